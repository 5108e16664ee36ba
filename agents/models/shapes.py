"""Architectures of the paper's models, for code that builds them with random weights (no model hub): the GPU check
(``experiments.gpu_check``) and the trainer benchmark (``benchmarks.trainer_speed``); and for the memory planner
(``experiments.plan_memory``, ``experiments.plan_time``), which count parameters from ``ModelShape``: a
``config.json``'s shapes (``resolve_shape``)."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["QWEN25_15B", "QWEN25_7B", "random_qwen2", "ModelShape", "shape_from_hf_config", "param_count",
           "known_shape", "resolve_shape"]

#: Qwen2.5-1.5B(-Instruct)'s shape, from its config.json (``transformers.Qwen2Config`` keyword arguments)
QWEN25_15B = dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                  num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=32768,
                  rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=1_000_000.0)
#: Qwen2.5-7B(-Instruct)'s shape, from its config.json: untied embeddings (a separate LM head), 4 KV heads
QWEN25_7B = dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                 num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768,
                 rms_norm_eps=1e-6, tie_word_embeddings=False, rope_theta=1_000_000.0)


def random_qwen2(shape: dict, device: str = "cpu", dtype=None, **config_kw):
    """A ``Qwen2ForCausalLM`` of ``shape`` with random weights, initialised on ``device`` (1.5B parameters initialise
    in seconds on a GPU, minutes on the host), in ``dtype`` (default float32). ``config_kw``: further
    ``Qwen2Config`` fields (token ids, attention implementation). Seeded by torch's global generator."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(**shape, **config_kw)
    with torch.device(device):
        return Qwen2ForCausalLM(cfg).to(dtype=dtype or torch.float32)


# ------------------------------------------------------------------ shapes for counting (the planners)
@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's shapes (Qwen2/Llama layout: gated MLP, RMSNorm, optional QKV bias)."""

    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    tied: bool
    qkv_bias: bool
    head_dim: int
    name: str = "model"

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    def layer_params(self) -> int:
        h, kv, q = self.hidden, self.kv_width, self.heads * self.head_dim
        attn = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if self.qkv_bias else 0)
        return attn + 3 * h * self.intermediate + 2 * h  # q, k, v, o; gate, up, down; two RMSNorms


def shape_from_hf_config(d: dict, name: str = "model") -> ModelShape:
    """The shapes of a Hugging Face ``config.json`` dict (Qwen2 has QKV bias, Llama-style ``attention_bias``)."""
    try:
        heads = int(d["num_attention_heads"])
        hidden = int(d["hidden_size"])
        return ModelShape(
            vocab=int(d["vocab_size"]), hidden=hidden, intermediate=int(d["intermediate_size"]),
            layers=int(d["num_hidden_layers"]), heads=heads, kv_heads=int(d.get("num_key_value_heads") or heads),
            tied=bool(d.get("tie_word_embeddings", False)),
            qkv_bias=bool(d.get("attention_bias", d.get("model_type") == "qwen2")),
            head_dim=int(d.get("head_dim") or hidden // heads), name=name)
    except KeyError as e:
        raise ValueError(f"model config lacks {e.args[0]!r}: not a decoder-only transformer config.json") from e


def param_count(s: ModelShape) -> int:
    """Exact parameter count: embedding, L layers, final norm, and the LM head unless tied."""
    return s.vocab * s.hidden * (1 if s.tied else 2) + s.layers * s.layer_params() + s.hidden


def known_shape(model_path: str) -> ModelShape | None:
    """The built-in shape that ``model.path``'s name points at (Qwen2.5-1.5B or -7B), or None."""
    name = Path(model_path.rstrip("/")).name.lower()
    if re.search(r"(^|[^\d.])1\.5b", name):
        return shape_from_hf_config({**QWEN25_15B, "model_type": "qwen2"}, "Qwen2.5-1.5B-Instruct (built-in shape)")
    if re.search(r"(^|[^\d.])7b", name):
        return shape_from_hf_config({**QWEN25_7B, "model_type": "qwen2"}, "Qwen2.5-7B-Instruct (built-in shape)")
    return None


def resolve_shape(model_path: str, model_config: str | None = None) -> ModelShape:
    """``--model-config``, else ``model.path/config.json``, else the built-in shape by name; ValueError otherwise."""
    for cand in ([Path(model_config)] if model_config else []) + [Path(model_path) / "config.json"]:
        if cand.is_file():
            try:
                d = json.loads(cand.read_text())
            except (OSError, ValueError) as e:
                raise ValueError(f"{cand} is not a readable JSON file: {e}") from e
            return shape_from_hf_config(d.get("text_config", d), name=f"{cand.parent.name or cand.name} ({cand.name})")
        if model_config:
            raise ValueError(f"--model-config {model_config!r} does not exist")
    shape = known_shape(model_path)
    if shape is None:
        raise ValueError(f"model.path={model_path!r} has no config.json and is not Qwen2.5-1.5B/7B by name: pass "
                         "--model-config path/to/config.json")
    return shape
