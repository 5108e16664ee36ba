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


def test_finished_rows_leave_the_batch(engine, prompts):
    free = engine.generate(prompts[:1], SAMPLE, seeds=[7])[0]
    stop = free.text[6:10]
    sizes = []
    hook = engine.model.model.register_forward_pre_hook(
        lambda mod, args, kw: sizes.append(kw["input_ids"].shape[0]), with_kwargs=True)
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
