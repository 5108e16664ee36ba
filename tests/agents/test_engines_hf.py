"""Hugging Face rollout engine: batching, seeds, stops, log-probs, finished rows, weight refresh."""
from __future__ import annotations

import pytest
import torch

from agents.engines import Generation, SamplingConfig, make_engine
from agents.engines.hf import HFEngine


@pytest.fixture(scope="module")
def engine(tiny_dir):
    return make_engine("hf", tiny_dir, dtype="float32")


def _chat(tok, contents):
    return [tok.apply_chat_template([{"role": "user", "content": c}], add_generation_prompt=True, tokenize=True,
                                    return_dict=False) for c in contents]


@pytest.fixture(scope="module")
def prompts(engine):
    return _chat(engine.tokenizer, ["Goal: craft stick.", "Crafting commands:\ncraft 4 oak planks using 1 oak log",
                                    "hi", "get 2 oak log and then craft 1 crafting table"])


SAMPLE = SamplingConfig(temperature=1.0, max_tokens=24, stop=())


def test_greedy_equals_transformers_generate(engine, prompts):
    gens = engine.generate(prompts, SamplingConfig(temperature=0, max_tokens=16, stop=()))
    for p, g in zip(prompts, gens):
        ref = engine.model.generate(torch.tensor([p]), max_new_tokens=16, do_sample=False,
                                    eos_token_id=sorted(engine.eos_ids))
        ref_ids = ref[0, len(p):].tolist()
        assert g.token_ids == ref_ids
        assert isinstance(g, Generation) and g.finish_reason == ("length" if len(ref_ids) == 16 else "stop")


def test_rows_depend_only_on_their_own_seed(engine, prompts):
    seeds = [11, 12, 13, 14]
    batch = engine.generate(prompts, SAMPLE, seeds=seeds)
    again = engine.generate(prompts, SAMPLE, seeds=seeds)
    assert [g.token_ids for g in batch] == [g.token_ids for g in again]
    alone = [engine.generate([p], SAMPLE, seeds=[s])[0] for p, s in zip(prompts, seeds)]
    reordered = engine.generate(prompts[::-1], SAMPLE, seeds=seeds[::-1])[::-1]
    chunked = HFEngine(engine.model, engine.tokenizer, max_batch_size=3).generate(prompts, SAMPLE, seeds=seeds)
    for g, a, r, c in zip(batch, alone, reordered, chunked):
        assert g.token_ids == a.token_ids == r.token_ids == c.token_ids
        assert g.logprobs == pytest.approx(a.logprobs, abs=1e-4)
    # same prompt, same seed in one batch: identical rows; other seeds: different rows
    dup = engine.generate([prompts[0]] * 3, SAMPLE, seeds=[5, 5, 6])
    assert dup[0].token_ids == dup[1].token_ids != dup[2].token_ids


def test_default_seeds_come_from_the_config(engine, prompts):
    cfg = SamplingConfig(temperature=1.0, max_tokens=12, stop=(), seed=100)
    a = engine.generate(prompts, cfg)
    b = engine.generate(prompts, SamplingConfig(temperature=1.0, max_tokens=12, stop=()), seeds=[100, 101, 102, 103])
    assert [g.token_ids for g in a] == [g.token_ids for g in b]


def test_logprobs_match_a_teacher_forced_forward(engine, prompts):
    temp = 0.7
    gens = engine.generate(prompts[:2], SamplingConfig(temperature=temp, max_tokens=20, stop=()), seeds=[1, 2])
    for p, g in zip(prompts[:2], gens):
        ids = torch.tensor([p + g.token_ids])
        with torch.no_grad():
            logits = engine.model(ids).logits[0, len(p) - 1:-1].float() / temp  # (T_r, V)
        ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(g.token_ids)[:, None])[:, 0]
        assert torch.allclose(torch.tensor(g.logprobs), ref, atol=1e-4)
    assert engine.generate(prompts[:1], SamplingConfig(max_tokens=3, logprobs=False))[0].logprobs is None


def test_tiny_top_p_is_greedy(engine, prompts):
    greedy = engine.generate(prompts, SamplingConfig(temperature=0, max_tokens=12, stop=()))
    nucleus = engine.generate(prompts, SamplingConfig(temperature=1.0, top_p=1e-6, max_tokens=12, stop=()),
                              seeds=[1, 2, 3, 4])
    assert [g.token_ids for g in greedy] == [g.token_ids for g in nucleus]


def test_stop_string_ends_the_row_and_stays_in_the_text(engine, prompts):
    free = engine.generate(prompts[:1], SAMPLE, seeds=[7])[0]
    assert len(free.text) > 12
    stop = free.text[6:10]  # a (possibly multi-token) stop string taken from the free-running text
    cut = engine.generate(prompts[:1], SamplingConfig(temperature=1.0, max_tokens=24, stop=("zzzq", stop)),
                          seeds=[7])[0]
    assert cut.finish_reason == "stop" and cut.stop_string == stop
    assert cut.text == free.text[: free.text.find(stop) + len(stop)]
    assert cut.token_ids == free.token_ids[: len(cut.token_ids)] and len(cut.token_ids) < len(free.token_ids)


def test_closing_action_tag_stops(tiny_dir, action_biased_state, prompts):
    """With weights that favour </action>, rows end right after it; the others run to max_tokens."""
    eng = make_engine("hf", tiny_dir, dtype="float32")
    eng.update_weights(action_biased_state.items())
    close_id = eng.tokenizer.convert_tokens_to_ids("</action>")
    cfg = SamplingConfig(temperature=1.0, max_tokens=40)
    assert cfg.stop == ("</action>",)
    gens = eng.generate(prompts * 4, cfg, seeds=list(range(16)))
    stopped = [g for g in gens if g.stop_string == "</action>"]
    assert len(stopped) >= 4, [g.text for g in gens]
    for g in stopped:
        assert g.text.endswith("</action>") and g.token_ids[-1] == close_id and g.finish_reason == "stop"
        assert close_id not in g.token_ids[:-1]
    for g in gens:
        if g.stop_string is None and g.token_ids[-1] not in eng.eos_ids:
            assert g.finish_reason == "length" and len(g.token_ids) == 40 and g.truncated


@pytest.mark.parametrize("decode", ["hf", "lean"])
def test_finished_rows_leave_the_batch(engine, prompts, decode, monkeypatch):
    from agents.engines.lean import LeanDecoder

    engine = HFEngine(engine.model, engine.tokenizer, decode=decode)
    free = engine.generate(prompts[:1], SAMPLE, seeds=[7])[0]
    stop = free.text[6:10]
    sizes = []
    hook = engine.model.model.register_forward_pre_hook(
        lambda mod, args, kw: sizes.append(kw["input_ids"].shape[0]), with_kwargs=True)
    lean_step = LeanDecoder.step

    def counted(self, tokens, positions):
        sizes.append(tokens.shape[0])
        return lean_step(self, tokens, positions)

    monkeypatch.setattr(LeanDecoder, "step", counted)
    try:
        gens = engine.generate([prompts[0], prompts[1]], SamplingConfig(temperature=1.0, max_tokens=24, stop=(stop,)),
                               seeds=[7, 8])
    finally:
        hook.remove()
    n0 = len(gens[0].token_ids)
    assert gens[0].finish_reason == "stop" and len(gens[1].token_ids) > n0
    # prefill + one forward per generated token of the longest row; rows drop out once finished
    assert sizes[:n0] == [2] * n0
    assert set(sizes[n0:]) == {1}
    assert len(sizes) == len(gens[1].token_ids)


def test_eos_stops_smollm2(smollm2_dir):
    eng = HFEngine(smollm2_dir, dtype="float32")
    p = _chat(eng.tokenizer, ["What is the capital of France? Answer in one short sentence."])
    g = eng.generate(p, SamplingConfig(temperature=0, max_tokens=40))[0]
    assert g.finish_reason == "stop" and g.stop_string is None
    assert g.token_ids[-1] in eng.eos_ids and "Paris" in g.text and "<|im_end|>" not in g.text


def test_update_weights_in_place(tiny_dir, tiny_dir_b, prompts):
    from transformers import AutoModelForCausalLM

    eng = make_engine("hf", tiny_dir)
    fresh_b = make_engine("hf", tiny_dir_b)
    before = eng.generate(prompts, SamplingConfig(temperature=0, max_tokens=12, stop=()))
    new = AutoModelForCausalLM.from_pretrained(str(tiny_dir_b)).state_dict()
    assert eng.update_weights(iter(new.items())) == len(new)
    after = eng.generate(prompts, SamplingConfig(temperature=0, max_tokens=12, stop=()))
    ref = fresh_b.generate(prompts, SamplingConfig(temperature=0, max_tokens=12, stop=()))
    assert [g.token_ids for g in after] == [g.token_ids for g in ref]
    assert [g.token_ids for g in after] != [g.token_ids for g in before]
    name, t = next(iter(new.items()))
    with pytest.raises(KeyError, match="module"):
        eng.update_weights([("module." + name, t)])
    with pytest.raises(ValueError, match="shape"):
        eng.update_weights([(name, t[:1])])


@pytest.mark.parametrize("kwargs, match", [
    ({"temperature": -1}, "temperature"),
    ({"temperature": float("nan")}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"stop": ("",)}, "stop"),
    ({"hidden_layer": True}, "hidden_layer"),
    ({"hidden_layer": -1.5}, "hidden_layer"),
])
def test_sampling_config_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingConfig(**kwargs)


def test_generate_rejects_bad_arguments(engine, prompts):
    with pytest.raises(ValueError, match="one seed per prompt"):
        engine.generate(prompts, SAMPLE, seeds=[1])
    with pytest.raises(ValueError, match="empty"):
        engine.generate([[]], SAMPLE, seeds=[1])
    with pytest.raises(ValueError, match="vocabulary"):
        engine.generate([[10**6]], SAMPLE, seeds=[1])
    with pytest.raises(ValueError, match="unknown rollout engine"):
        make_engine("tgi", "x")
    assert engine.generate([], SAMPLE, seeds=[]) == []


# ------------------------------------------------------------------------------------ lean decode step
def _agree(model_dir, prompts_fn, max_tokens=32, tol=1e-5):
    hf = HFEngine(model_dir, dtype="float32", decode="hf")
    lean = HFEngine(hf.model, hf.tokenizer, decode="lean")
    assert hf.decode == "hf" and lean.decode == "lean"
    prompts = prompts_fn(hf.tokenizer)
    for cfg in (SamplingConfig(temperature=1.0, max_tokens=max_tokens, stop=("</action>", ".")),
                SamplingConfig(temperature=0.0, max_tokens=max_tokens, stop=()),
                SamplingConfig(temperature=0.7, top_p=0.9, max_tokens=max_tokens, stop=())):
        seeds = list(range(3, 3 + len(prompts)))
        a, b = hf.generate(prompts, cfg, seeds=seeds), lean.generate(prompts, cfg, seeds=seeds)
        assert [g.token_ids for g in b] == [g.token_ids for g in a]
        assert [g.finish_reason for g in b] == [g.finish_reason for g in a]
        for x, y in zip(a, b):
            assert y.logprobs == pytest.approx(x.logprobs, abs=tol)
    return prompts


def test_lean_decode_equals_hugging_face_decode_tiny(tiny_dir):
    """Qwen2 (the tiny model): the same tokens and log-probs, rows of other lengths finishing at other steps."""
    _agree(tiny_dir, lambda tok: _chat(tok, ["Goal: craft stick.", "hi", "get 2 oak log and then craft 1 table",
                                             "Crafting commands:\ncraft 4 oak planks using 1 oak log"]))


def test_lean_decode_equals_hugging_face_decode_smollm2(smollm2_dir):
    """Llama with grouped-query attention (SmolLM2-135M: 9 query heads, 3 key/value heads) and tied embeddings."""
    # its lean step runs on packed weights (``LeanWeights``, auto): the sums in another order, hence 5e-5
    _agree(smollm2_dir, lambda tok: _chat(tok, ["Name a colour.", "Count from one to five."]), max_tokens=12,
           tol=5e-5)


def _one_lean_step(eng, position_offset: int = 0, pack: str = "auto"):
    """(lean step's logits, the model's forward logits) for one token after a prefill of a short chat prompt."""
    from transformers import DynamicCache

    from agents.engines.lean import LeanDecoder, LeanWeights

    ids = torch.tensor([_chat(eng.tokenizer, ["Goal: craft stick."])[0]])
    nxt = torch.tensor([7])
    with torch.no_grad():
        cache = DynamicCache(config=eng.model.config)
        eng.model(input_ids=ids, past_key_values=cache, use_cache=True)
        dec = LeanDecoder(eng.model, weights=LeanWeights(eng.model, pack=pack))
        dec.start(cache, torch.ones_like(ids), capacity=4)
        got = dec.step(nxt, torch.tensor([ids.shape[1] + position_offset]))
        ref = eng.model(torch.cat([ids, nxt[None]], 1)).logits[:, -1]
    return got, ref


def test_lean_step_logits_equal_the_model_forward(tiny_dir):
    """One step on its own: logits of the lean step after a prefill = the model's logits at that position."""
    eng = HFEngine(tiny_dir, dtype="float32", decode="hf")
    got, ref = _one_lean_step(eng)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    # and a wrong position (RoPE) is seen: the comparison can fail
    off, _ = _one_lean_step(eng, position_offset=5)
    assert (off - ref).abs().max() > 1e-3


def test_unsupported_models_keep_the_hugging_face_step(tiny_dir):
    from transformers import GPT2Config, GPT2LMHeadModel

    from agents.engines.lean import lean_support

    tok = HFEngine(tiny_dir, decode="hf").tokenizer
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=len(tok)))
    assert "gpt2" in lean_support(gpt2)
    assert HFEngine(gpt2, tok).decode == "hf"
    with pytest.raises(ValueError, match="cannot serve this model"):
        HFEngine(gpt2, tok, decode="lean")
    with pytest.raises(ValueError, match="auto | lean | hf"):
        HFEngine(tiny_dir, decode="fast")
    # a projection whose forward is not weight @ x + bias (as LoRA injects) keeps the Hugging Face step
    eng = HFEngine(tiny_dir, decode="hf")

    class Wrapped(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner, self.weight, self.bias = inner, inner.weight, inner.bias

        def forward(self, x):
            return self.inner(x) + 1.0

    eng.model.model.layers[0].mlp.up_proj = Wrapped(eng.model.model.layers[0].mlp.up_proj)
    assert "Wrapped" in lean_support(eng.model)
    assert HFEngine(eng.model, tok).decode == "hf"


# ------------------------------------------------------------------------------ shared prompt prefixes
def _grouped_prompts(tok):
    """Two goals x three copies: the copies share the whole prompt, the goals share the chat header."""
    head = "You are playing a crafting game. Commands: get, craft, inventory. " * 3
    rows = []
    for goal in ("Goal: craft stick.", "Goal: craft 4 oak planks from 1 oak log."):
        rows += _chat(tok, [head + goal] * 3)
    rows += _chat(tok, [head + "Goal: craft stick. You hold nothing."])
    return rows


@pytest.mark.parametrize("model", ["tiny", "smollm2"])
def test_shared_prefix_prefill_gives_the_unshared_generations(model, tiny_dir, smollm2_dir, monkeypatch):
    path = tiny_dir if model == "tiny" else smollm2_dir
    plain = HFEngine(path, dtype="float32", share_prefixes=False)
    shared = HFEngine(plain.model, plain.tokenizer, share_prefixes=True)
    prompts = _grouped_prompts(plain.tokenizer)
    used = []
    real = HFEngine._shared_prefixes

    def spy(ps):
        out = real(ps)
        used.append(out is not None)
        return out

    monkeypatch.setattr(HFEngine, "_shared_prefixes", staticmethod(spy))
    cfg = SamplingConfig(temperature=1.0, max_tokens=16 if model == "tiny" else 8, stop=())
    seeds = list(range(20, 20 + len(prompts)))
    a, b = plain.generate(prompts, cfg, seeds=seeds), shared.generate(prompts, cfg, seeds=seeds)
    assert used == [True]  # the plain engine never asks
    assert [g.token_ids for g in b] == [g.token_ids for g in a]
    tol = 1e-5 if model == "tiny" else 5e-5  # SmolLM2's 30 fp32 layers: up to 1.8e-5 measured (float rounding)
    for x, y in zip(a, b):
        assert y.logprobs == pytest.approx(x.logprobs, abs=tol)
    # the three copies of a goal with the same seed are the same row, so they also equal each other
    again = shared.generate(prompts[:3], cfg, seeds=[5, 5, 5])
    assert again[0].token_ids == again[1].token_ids == again[2].token_ids


def _same_generations(ref, other, prompts, model: str, seed0: int) -> list[set[int]]:
    """Sampling with stop strings, then greedy: ``other`` gives ``ref``'s tokens and finish reasons, log-probs within
    float rounding (1e-5; 5e-5 over SmolLM2's 30 layers). Returns each setting's set of generation lengths."""
    n = 24 if model == "tiny" else 8
    tol = 1e-5 if model == "tiny" else 5e-5
    lens = []
    for cfg in (SamplingConfig(temperature=1.0, max_tokens=n, stop=(".", "a", "e")),
                SamplingConfig(temperature=0.0, max_tokens=n, stop=())):
        seeds = list(range(seed0, seed0 + len(prompts)))
        a, b = ref.generate(prompts, cfg, seeds=seeds), other.generate(prompts, cfg, seeds=seeds)
        assert [g.token_ids for g in b] == [g.token_ids for g in a]
        assert [g.finish_reason for g in b] == [g.finish_reason for g in a]
        for x, y in zip(a, b):
            assert y.logprobs == pytest.approx(x.logprobs, abs=tol)
        lens.append({len(g.token_ids) for g in b})
    return lens


@pytest.mark.parametrize("model", ["tiny", "smollm2"])
def test_cascade_decode_over_interleaved_groups_gives_the_plain_generations(model, tiny_dir, smollm2_dir,
                                                                          monkeypatch):
    """The lean step reads each shared prefix once for all its rows (``LeanDecoder`` cascade): with the groups'
    rows interleaved in the batch (so the decoder reorders them), rows finishing at different steps (stop
    strings, EOS, the cap) and grouped-query attention (SmolLM2), the tokens are Hugging Face's step over whole
    prompts, log-probs within float rounding."""
    from agents.engines.lean import LeanDecoder

    path = tiny_dir if model == "tiny" else smollm2_dir
    plain = HFEngine(path, dtype="float32", decode="hf", share_prefixes=False)
    lean = HFEngine(plain.model, plain.tokenizer, decode="lean", share_prefixes=True)
    goal_a = "Goal: craft stick. Recipe: craft 4 stick using 2 oak planks. " * 4
    goal_b = "Goal: craft 4 oak planks. Recipe: craft 4 oak planks using 1 oak log. " * 4
    # two long task texts (two prefixes), interleaved; one A row with an observation of its own
    prompts = _chat(plain.tokenizer, [goal_a, goal_b, goal_a + "You hold nothing.", goal_a, goal_b, goal_a, goal_b])
    orders = []
    real_start = LeanDecoder.start

    def spy(self, *a, **kw):
        order = real_start(self, *a, **kw)
        orders.append((self.cascade, order, len(self.runs) if self.cascade else 0))
        return order

    monkeypatch.setattr(LeanDecoder, "start", spy)
    lens = _same_generations(plain, lean, prompts, model, seed0=40)
    assert orders and all(c and runs >= 2 for c, _, runs in orders)  # the cascade ran, over 2+ prefixes
    assert all(o is not None and sorted(o) == list(range(len(prompts))) for _, o, _ in orders)  # and reordered
    assert len(lens[0]) > 1  # sampling with stop strings: rows left the batch at different steps


def test_prefix_plan_keeps_a_prompt_token_per_row_and_skips_what_saves_little():
    from agents.prefixes import plan_shared_prefixes

    head = list(range(10, 60))
    prompts = [head + [1, 2], head + [1, 3, 4], head + [7], list(range(100, 140))]
    prefixes, row_prefix = plan_shared_prefixes(prompts)
    for p, k in zip(prompts, row_prefix):
        pre = prefixes[k]
        assert p[: len(pre)] == pre and len(pre) < len(p)
    assert row_prefix[0] == row_prefix[1] == row_prefix[2] != row_prefix[3]
    assert len(prefixes[row_prefix[0]]) == 50
    assert plan_shared_prefixes([[5, 6, 7], [8, 9, 10]]) is None  # nothing in common
    assert plan_shared_prefixes([head + [1]]) is None  # one row
    assert plan_shared_prefixes([[5], [5]]) is None  # one-token prompts keep their token


def test_generation_benchmark_prompts_come_in_groups_as_in_a_rollout(tiny_dir):
    """``benchmarks.generation_speed --group-size G``: B/G distinct prompts, each G times in a row."""
    from benchmarks.generation_speed import _prompts

    tok = HFEngine(tiny_dir, decode="hf").tokenizer
    grouped = _prompts(tok, 8, group_size=4)
    assert len(grouped) == 8
    assert grouped[0] == grouped[1] == grouped[3] and grouped[4] == grouped[7] and grouped[0] != grouped[4]
    plain = _prompts(tok, 4)
    assert len({tuple(p) for p in plain}) == 4
    assert _prompts(tok, 5, group_size=2)[4] not in _prompts(tok, 5, group_size=2)[:4]  # a last, partial group


def test_batched_draw_is_torch_multinomial_row_by_row():
    """The sampler's batched exponential race draws what ``torch.multinomial(p, 1, generator=g)`` draws for each row
    (tokens and the generators' states after), on peaked, flat and top-p-truncated distributions; NaN logits are an
    error that names the row."""
    g = torch.Generator().manual_seed(0)
    logits = torch.cat([torch.randn(6, 1370, generator=g) * s for s in (0.5, 3.0, 8.0)])  # (18, V)
    for top_p in (1.0, 0.9):
        sampling = SamplingConfig(temperature=1.0, top_p=top_p, max_tokens=4, stop=())
        for step in range(30):
            seeds = [1000 * step + j for j in range(logits.shape[0])]
            a = [torch.Generator().manual_seed(s) for s in seeds]
            b = [torch.Generator().manual_seed(s) for s in seeds]
            tok, _ = HFEngine._sample(logits, sampling, a)
            logp = torch.log_softmax(logits, dim=-1)
            probs = logp.exp()
            if top_p < 1.0:
                p_sorted, order = probs.sort(dim=-1, descending=True)
                p_sorted = p_sorted.masked_fill(p_sorted.cumsum(-1) - p_sorted >= top_p, 0.0)
                probs = torch.zeros_like(probs).scatter_(-1, order, p_sorted)
            ref = torch.stack([torch.multinomial(probs[j], 1, generator=gj)[0] for j, gj in enumerate(b)])
            assert tok.tolist() == ref.tolist()
            assert all(torch.equal(x.get_state(), y.get_state()) for x, y in zip(a, b))
    bad = logits[:3].clone()
    bad[1, 5] = float("nan")
    with pytest.raises(FloatingPointError, match=r"rows \[1\]"):
        HFEngine._sample(bad, SamplingConfig(temperature=1.0, max_tokens=4, stop=()),
                         [torch.Generator().manual_seed(i) for i in range(3)])


@pytest.mark.parametrize("pack", ["off", "on"])
def test_lean_step_keeps_mlp_biases(tiny_dir, pack):
    """A Llama-style MLP with biases (``mlp_bias``): the fused gate|up projection keeps them, packed or not (logits
    equal the model's forward; dropping them fails this test)."""
    from agents.engines.lean import packing_available

    if pack == "on" and not packing_available():
        pytest.skip("this torch build has no oneDNN packed linear")
    eng = HFEngine(tiny_dir, dtype="float32", decode="hf")
    torch.manual_seed(3)
    for layer in eng.model.model.layers:
        for proj in (layer.mlp.gate_proj, layer.mlp.up_proj):
            proj.bias = torch.nn.Parameter(torch.randn(proj.out_features) * 0.5)
    got, ref = _one_lean_step(eng, pack=pack)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------ packed decode weights
def _needs_packing():
    from agents.engines.lean import packing_available

    if not packing_available():
        pytest.skip("this torch build has no oneDNN packed linear")


@pytest.mark.parametrize("model", ["tiny", "smollm2"])
def test_packed_weights_give_the_unpacked_generations(model, tiny_dir, smollm2_dir):
    """The lean step on oneDNN-packed weights (``LeanWeights(pack='on')``): the same tokens as on the model's own
    weights, log-probs within float rounding, over interleaved groups (cascade) and rows finishing at different
    steps. auto packs SmolLM2 (540 MB of weights) and not the tiny model."""
    _needs_packing()
    path = tiny_dir if model == "tiny" else smollm2_dir
    plain = HFEngine(path, dtype="float32", decode="lean", pack_weights="off")
    packed = HFEngine(plain.model, plain.tokenizer, decode="lean", pack_weights="on")
    auto = HFEngine(plain.model, plain.tokenizer, decode="lean")
    assert auto.lean_weights().packed == (model == "smollm2")
    goal_a = "Goal: craft stick. Recipe: craft 4 stick using 2 oak planks. " * 3
    goal_b = "Goal: craft 4 oak planks. Recipe: craft 4 oak planks using 1 oak log. " * 3
    prompts = _chat(plain.tokenizer, [goal_a, goal_b, goal_a + "You hold nothing.", goal_a, goal_b, goal_a])
    _same_generations(plain, packed, prompts, model, seed0=60)
    assert packed.lean_weights().packed


def test_packed_weights_follow_the_parameters(tiny_dir, tiny_dir_b, prompts, monkeypatch):
    """Packed weights are kept between batches and rebuilt when the parameters change: in place through autograd's
    view (an optimizer step), through ``.data`` (as DeepSpeed writes), or by ``update_weights``. After each change
    the packed engine generates what an engine on the model's own weights generates."""
    from transformers import AutoModelForCausalLM

    from agents.engines.lean import LeanWeights

    _needs_packing()
    builds = []
    real_build = LeanWeights._build

    def counted(self):
        builds.append(self.packed)
        real_build(self)

    monkeypatch.setattr(LeanWeights, "_build", counted)
    eng = HFEngine(tiny_dir, dtype="float32", decode="lean", pack_weights="on")
    ref = HFEngine(eng.model, eng.tokenizer, decode="lean", pack_weights="off")
    cfg = SamplingConfig(temperature=1.0, max_tokens=12, stop=())
    seeds = list(range(len(prompts)))

    def check():
        got, want = eng.generate(prompts, cfg, seeds=seeds), ref.generate(prompts, cfg, seeds=seeds)
        assert [g.token_ids for g in got] == [g.token_ids for g in want]
        for x, y in zip(got, want):
            assert x.logprobs == pytest.approx(y.logprobs, abs=1e-5)
        return [(g.token_ids, [round(v, 3) for v in g.logprobs]) for g in got]

    first = check()
    check()
    assert builds.count(True) == 1  # unchanged parameters: packed once
    with torch.no_grad():
        eng.model.model.layers[0].mlp.down_proj.weight.mul_(-3.0)
        eng.model.lm_head.weight.mul_(2.0)
    second = check()
    assert builds.count(True) == 2 and second != first
    new = AutoModelForCausalLM.from_pretrained(str(tiny_dir_b)).state_dict()
    params = dict(eng.model.named_parameters())
    for name, t in new.items():  # written through .data: the version counters do not move
        if name in params:
            params[name].data.copy_(t)
    third = check()
    assert builds.count(True) == 3 and third != second
    eng.update_weights(iter(AutoModelForCausalLM.from_pretrained(str(tiny_dir)).state_dict().items()))
    assert check() == first and builds.count(True) == 4


def test_packed_weights_reject_what_they_cannot_serve(tiny_dir):
    from agents.engines.lean import LeanWeights

    _needs_packing()
    with pytest.raises(ValueError, match="pack_weights='sometimes' must be one of"):
        HFEngine(tiny_dir, dtype="float32", pack_weights="sometimes")
    bf16 = HFEngine(tiny_dir, dtype="bfloat16")
    with pytest.raises(ValueError, match="float32 model on the CPU"):
        LeanWeights(bf16.model, pack="on")
    assert not LeanWeights(bf16.model).packed
