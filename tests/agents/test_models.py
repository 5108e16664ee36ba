"""Model folders: loading errors, SmolLM2 conversion, tiny models and their tokenizers."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agents.models import ModelNotFoundError, check_model_dir, load_model_and_tokenizer, load_tokenizer
from agents.models.corpus import default_corpus, protocol_corpus, textcraft_corpus
from agents.models.tiny import (
    PROTOCOL_TAGS,
    SPECIAL_TOKENS,
    TinyModelConfig,
    build_tiny_model,
    train_tokenizer,
)

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- loading and errors
def test_missing_smollm2_folder_names_path_and_command(tmp_path, monkeypatch):
    monkeypatch.setenv("BIPACE_CACHE", str(tmp_path))
    with pytest.raises(ModelNotFoundError) as e:
        check_model_dir("smollm2-135m-instruct")
    msg = str(e.value)
    assert str(tmp_path / "models" / "smollm2-135m-instruct") in msg
    assert "python -m agents.models convert-smollm2" in msg


def test_missing_hub_model_names_download_command(tmp_path, monkeypatch):
    monkeypatch.setenv("BIPACE_CACHE", str(tmp_path))
    with pytest.raises(ModelNotFoundError) as e:
        load_tokenizer("Qwen/Qwen2.5-1.5B-Instruct")
    msg = str(e.value)
    target = tmp_path / "models" / "Qwen2.5-1.5B-Instruct"
    assert f"huggingface-cli download Qwen/Qwen2.5-1.5B-Instruct --local-dir {target}" in msg


def test_incomplete_folder_is_rejected(tmp_path, tiny_dir):
    with pytest.raises(ModelNotFoundError, match="config.json"):
        check_model_dir(tmp_path)
    (tmp_path / "config.json").write_text((tiny_dir / "config.json").read_text())
    with pytest.raises(ModelNotFoundError, match="no tokenizer"):
        check_model_dir(tmp_path)
    (tmp_path / "tokenizer.json").write_text((tiny_dir / "tokenizer.json").read_text())
    with pytest.raises(ModelNotFoundError, match="no weights"):
        check_model_dir(tmp_path)
    assert check_model_dir(tmp_path, need_weights=False) == tmp_path.resolve()


# ---------------------------------------------------------------- tiny models
def _texts():
    corpus = list(default_corpus())
    extra = [
        "<|im_start|>user\nCraft 1 stick.<|im_end|>\n<|im_start|>assistant\n<think>I need planks.</think>"
        "<action>get 2 oak planks</action><|im_end|>",
        "héllo wörld, naïve café – 123 日本語 🙂",
        "  leading spaces\n\n\ttabs\r\nand CRLF  ",
        "You have 'apple 1', \"key 2\" and 3.5 coins; go to shelf 10!",
    ]
    return corpus[::7] + extra


def test_tiny_tokenizer_same_ids_in_auto_and_fast_tokenizer(tiny_dir):
    """AutoTokenizer (vLLM's loader; Qwen2Tokenizer for a qwen2 config) and PreTrainedTokenizerFast
    (the trained pipeline as saved) must give identical ids (docs/cpu.md, "Tokenizer trap")."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    auto = AutoTokenizer.from_pretrained(str(tiny_dir))
    fast = PreTrainedTokenizerFast.from_pretrained(str(tiny_dir))
    raw = Tokenizer.from_file(str(tiny_dir / "tokenizer.json"))
    assert type(auto).__name__ == "Qwen2Tokenizer"  # the class vLLM gets; the trap is real here
    assert len(auto) == len(fast) == raw.get_vocab_size(with_added_tokens=True)
    for text in _texts():
        ids = raw.encode(text).ids
        assert auto(text).input_ids == ids, text
        assert fast(text).input_ids == ids, text
        assert auto.decode(ids) == fast.decode(ids)


def test_tiny_tokenizer_tags_and_special_tokens(tiny_dir):
    tok = load_tokenizer(tiny_dir)
    for t in (*SPECIAL_TOKENS, *PROTOCOL_TAGS):
        ids = tok(t).input_ids
        assert len(ids) == 1, (t, ids)
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    resp = "<think>I need 2 oak planks.</think>\n<action>get 1 oak log</action>"
    ids = tok(resp).input_ids
    assert tok.convert_tokens_to_ids("<action>") in ids and tok.convert_tokens_to_ids("</action>") in ids
    assert tok.decode(ids, skip_special_tokens=True) == resp  # tags survive special-token skipping
    # byte-level: any text round-trips, nothing becomes <unk>
    for text in _texts()[-4:]:
        assert tok.decode(tok(text).input_ids) == text


def test_tiny_chat_template_is_qwen_style(tiny_dir):
    tok = load_tokenizer(tiny_dir)
    msgs = [{"role": "user", "content": "Goal: craft stick."}]
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\nGoal: craft stick.<|im_end|>\n<|im_start|>assistant\n"
    no_gen = tok.apply_chat_template(msgs, add_generation_prompt=False, tokenize=False)
    assert no_gen == "<|im_start|>user\nGoal: craft stick.<|im_end|>\n"


def test_tiny_model_folder_loads_and_runs(tiny_dir):
    model, tok = load_model_and_tokenizer(tiny_dir)
    meta = json.loads((tiny_dir / "bipace_tiny.json").read_text())
    assert model.config.model_type == "qwen2"
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 64
    assert model.config.hidden_size // model.config.num_attention_heads >= 32
    assert model.config.vocab_size == len(tok) == meta["vocab_size"]
    assert model.config.eos_token_id == tok.eos_token_id
    ids = torch.tensor([tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                                tokenize=True, return_dict=False)])
    out = model(ids, output_hidden_states=True)
    assert out.logits.shape == (1, ids.shape[1], len(tok))
    assert len(out.hidden_states) == model.config.num_hidden_layers + 1
    assert torch.isfinite(out.logits).all()


def test_tiny_build_is_reproducible_and_refuses_to_overwrite(tmp_path):
    cfg = TinyModelConfig(layers=1, hidden=64, heads=2, vocab_size=400, seed=3)
    corpus = list(textcraft_corpus(n_tasks=20))
    a = build_tiny_model(tmp_path / "a", cfg, corpus=corpus)
    b = build_tiny_model(tmp_path / "b", cfg, corpus=corpus)
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()
    from safetensors.torch import load_file

    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    with pytest.raises(FileExistsError, match="--force"):
        build_tiny_model(a, cfg, corpus=corpus)
    build_tiny_model(a, TinyModelConfig(layers=1, hidden=64, heads=2, vocab_size=400, seed=4), corpus=corpus,
                     force=True)
    wc = load_file(a / "model.safetensors")
    assert not torch.equal(wc["model.embed_tokens.weight"], wb["model.embed_tokens.weight"])


@pytest.mark.parametrize("kwargs, match", [
    ({"hidden": 64, "heads": 4}, "head dim"),
    ({"hidden": 100, "heads": 3}, "divisible"),
    ({"heads": 4, "kv_heads": 3}, "multiple of kv_heads"),
    ({"vocab_size": 100}, "vocab_size"),
    ({"layers": 0}, "layers"),
    ({"dtype": "float8"}, "dtype"),
])
def test_tiny_config_rejects_bad_shapes(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TinyModelConfig(**kwargs)


def test_tokenizer_corpus_errors():
    with pytest.raises(ValueError, match="empty"):
        train_tokenizer([], vocab_size=400)
    with pytest.raises(TypeError, match="str"):
        train_tokenizer(["ok", 3], vocab_size=400)


def test_expert_episode_corpus_renders_rollout_prompts():
    """Prompts exactly as agents.prompts renders them for the env, answered by the env's expert."""
    import envs
    from agents.models.corpus import expert_episode_corpus
    from agents.prompts import Transcript, build_messages

    docs = list(expert_episode_corpus("TextCraft-v0", n_episodes=2))
    prompts, responses = docs[0::2], docs[1::2]
    assert len(prompts) == len(responses) >= 2
    env = envs.make("TextCraft-v0")
    obs, info = env.reset(seed=0, options={"split": "train", "task_index": 0})
    assert prompts[0] == build_messages("TextCraft-v0", Transcript.start(obs, info))[0]["content"]
    first = envs.expert_action(env)
    assert responses[0].endswith(f"<action>{first}</action>") and responses[0].startswith("<think>")
    env.close()


def test_corpus_is_textcraft_and_protocol_text():
    tc = list(textcraft_corpus(n_tasks=5))
    assert any(t.startswith("craft ") and " using " in t for t in tc)  # real recipe commands
    assert any(t.startswith("Crafting commands:\n") and "Goal: craft" in t for t in tc)
    pr = list(protocol_corpus(n_steps=5))
    assert any(t.startswith("<think>") and t.endswith("</action>") for t in pr)
    assert list(textcraft_corpus(seed=1, n_tasks=5)) == list(textcraft_corpus(seed=1, n_tasks=5))


def test_build_tiny_command_line(tmp_path, capsys):
    """The real entry point in a subprocess once; `info` and a rejected shape through main() in-process."""
    from agents.models.__main__ import main

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(list(textcraft_corpus(n_tasks=10))[:400]).replace("\n\n", "\\n\\n") + "\n")
    out = tmp_path / "cli_tiny"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "agents.models", "build-tiny", "--out", str(out), "--layers", "1",
           "--hidden", "64", "--heads", "2", "--vocab-size", "512", "--corpus", str(corpus)]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "built" in r.stdout
    meta = json.loads((out / "bipace_tiny.json").read_text())
    assert meta["config"]["layers"] == 1 and meta["vocab_size"] <= 512
    assert main(["info", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["model_type"] == "qwen2"
    with pytest.raises(ValueError, match="head dim"):
        main(cmd[3:-2] + ["--heads", "4", "--force"])
    with pytest.raises(FileNotFoundError, match="corpus file"):
        main(["build-tiny", "--out", str(tmp_path / "x"), "--hidden", "64", "--heads", "2", "--corpus",
              str(tmp_path / "missing.txt")])


# ---------------------------------------------------------------- SmolLM2
def test_smollm2_folder_loads_and_answers_a_chat_prompt(smollm2_dir):
    model, tok = load_model_and_tokenizer(smollm2_dir)
    assert model.config.model_type == "llama" and model.config.num_hidden_layers == 30
    assert model.dtype == torch.bfloat16
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(134.5e6, rel=0.01)
    ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                  add_generation_prompt=True, tokenize=True, return_dict=False)
    out = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)
    answer = tok.decode(out[0, len(ids):], skip_special_tokens=True)
    assert "Paris" in answer, answer


def test_smollm2_conversion_is_idempotent(smollm2_dir):
    from agents.models.smollm2 import convert_smollm2, is_converted

    assert is_converted(smollm2_dir)
    before = (smollm2_dir / "model.safetensors").stat().st_mtime_ns
    assert convert_smollm2(smollm2_dir) == smollm2_dir
    assert (smollm2_dir / "model.safetensors").stat().st_mtime_ns == before
