"""A lean one-token decode step for Qwen2- and Llama-family Hugging Face models (the HF engine's decode loop).

Why [choice, issue 19]: on a CPU, a decode step of a small model is overhead, not arithmetic. Each Hugging Face
step rebuilds the attention mask, calls ~30 modules per layer and grows the KV cache by concatenation (a copy of
the whole cache per step and layer). This step runs the same arithmetic on the model's own parameters (read at
every call, so weight refreshes and a shared trainer module are always current), with the mask kept as one
boolean tensor and the KV cache preallocated for the whole response and written in place.

Per step, for B' live rows, layer by layer (D width, H query heads, H_kv key/value heads, d = head width):
    x   = RMSNorm(h)                                   h (B', D)
    q   = rope(x W_q + b_q) (B', H, d), k = rope(x W_k + b_k), v = x W_v + b_v   (B', H_kv, d)
    K[:, :, t] = k, V[:, :, t] = v                     cache (B', H_kv, T_max, d), t = tokens so far
    h  += softmax(q K[:, :, :t+1]^T / sqrt(d) + mask) V  W_o
    h  += W_down (silu(RMSNorm(h) W_gate) * RMSNorm(h) W_up)
logits = RMSNorm(h) W_lm. The rotary cos/sin come from the model's own rotary module (every RoPE variant it knows).

What it buys is modest: 1.0-1.3x the HF step's generation rate on one thread (``results/benchmarks/generation.md``)
and ~1.15x on the demo's 2-thread rollout; most of that rollout's 1.95x comes from the shared-prefix prefill.

``lean_support(model)`` says why a model cannot use it (the engine then keeps Hugging Face's step). Tested equal to
the Hugging Face step in logits (1e-5) and in the sampled tokens (``tests/agents/test_engines_hf.py``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["lean_support", "LeanDecoder"]

_TYPES = ("qwen2", "llama")


def lean_support(model) -> str | None:
    """None if ``model`` can decode with ``LeanDecoder``, else the reason it cannot."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) not in _TYPES:
        return f"model type {getattr(cfg, 'model_type', None)!r} is not one of {list(_TYPES)}"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"hidden_act={cfg.hidden_act!r} (only silu)"
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
        return "sliding-window layers"
    if getattr(cfg, "use_sliding_window", False):
        return "use_sliding_window=true"
    if getattr(cfg, "_attn_implementation", "sdpa") not in ("sdpa", "eager"):
        return f"attention implementation {cfg._attn_implementation!r}"
    base = getattr(model, "model", None)
    need = ("embed_tokens", "layers", "norm", "rotary_emb")
    if base is None or not all(hasattr(base, n) for n in need) or not hasattr(model, "lm_head"):
        return "not the standard <Model>ForCausalLM layout (model.embed_tokens, layers, norm, rotary_emb; lm_head)"
    linears = [model.lm_head]
    for layer in base.layers:
        a, m = layer.self_attn, layer.mlp
        linears += [a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj]
    odd = sorted({type(x).__name__ for x in linears if type(x) is not torch.nn.Linear})
    if odd:  # LoRA-injected, quantised, ...: their forward is not weight @ x + bias
        return f"projections of type {odd}, not plain torch.nn.Linear"
    return None


def _rms(x: torch.Tensor, norm) -> torch.Tensor:
    dt = x.dtype
    x = x.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * x.to(dt)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _linear(x: torch.Tensor, mod) -> torch.Tensor:
    return F.linear(x, mod.weight, mod.bias)


class LeanDecoder:
    """Decode state of one batch: the preallocated KV cache, the key mask and the live rows.

    ``start(cache, attention_mask, capacity)`` takes the prefill's Hugging Face cache (B, H_kv, T_p, d per layer)
    and its (B, T_p) mask; ``step(tokens (B',), positions (B',)) -> logits (B', V)`` decodes one token per live row;
    ``keep(idx)`` drops the finished rows.
    """

    def __init__(self, model):
        why = lean_support(model)
        if why is not None:
            raise ValueError(f"LeanDecoder: {why}")
        self.model = model
        cfg = model.config
        self.heads = int(cfg.num_attention_heads)
        self.kv_heads = int(getattr(cfg, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads)
        self.scale = self.head_dim ** -0.5

    def start(self, cache, attention_mask: torch.Tensor, capacity: int) -> None:
        layers = self.model.model.layers
        self.k, self.v = [], []
        for i in range(len(layers)):
            k, v = _layer_kv(cache, i)
            b, hk, t, d = k.shape
            kk = k.new_empty((b, hk, t + capacity, d))
            vv = v.new_empty((b, hk, t + capacity, d))
            kk[:, :, :t] = k
            vv[:, :, :t] = v
            self.k.append(kk)
            self.v.append(vv)
        self.t = int(attention_mask.shape[1])
        self.mask = torch.zeros((attention_mask.shape[0], self.t + capacity), dtype=torch.bool,
                                device=attention_mask.device)
        self.mask[:, : self.t] = attention_mask.bool()

    def keep(self, idx: torch.Tensor) -> None:
        self.k = [k[idx] for k in self.k]
        self.v = [v[idx] for v in self.v]
        self.mask = self.mask[idx]

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        m = self.model.model
        b = tokens.shape[0]
        t = self.t
        if t >= self.mask.shape[1]:
            raise RuntimeError(f"LeanDecoder: the KV cache holds {self.mask.shape[1]} positions, all used")
        h = F.embedding(tokens, m.embed_tokens.weight)[:, None, :]  # (B', 1, D)
        cos, sin = m.rotary_emb(h, positions[:, None])  # (B', 1, d)
        cos, sin = cos[:, None], sin[:, None]  # (B', 1, 1, d): broadcast over heads
        self.mask[:, t] = True
        mask = self.mask[:, None, None, : t + 1]  # (B', 1, 1, t + 1)
        gqa = self.heads != self.kv_heads
        for i, layer in enumerate(m.layers):
            a = layer.self_attn
            x = _rms(h, layer.input_layernorm)
            q = _linear(x, a.q_proj).view(b, 1, self.heads, self.head_dim).transpose(1, 2)
            k = _linear(x, a.k_proj).view(b, 1, self.kv_heads, self.head_dim).transpose(1, 2)
            v = _linear(x, a.v_proj).view(b, 1, self.kv_heads, self.head_dim).transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            self.k[i][:, :, t] = k[:, :, 0]
            self.v[i][:, :, t] = v[:, :, 0]
            o = F.scaled_dot_product_attention(q, self.k[i][:, :, : t + 1], self.v[i][:, :, : t + 1],
                                               attn_mask=mask, scale=self.scale, enable_gqa=gqa)
            h = h + _linear(o.transpose(1, 2).reshape(b, 1, self.heads * self.head_dim), a.o_proj)
            x = _rms(h, layer.post_attention_layernorm)
            mlp = layer.mlp
            h = h + _linear(F.silu(_linear(x, mlp.gate_proj)) * _linear(x, mlp.up_proj), mlp.down_proj)
        self.t = t + 1
        return _linear(_rms(h, m.norm)[:, 0], self.model.lm_head)


def _layer_kv(cache, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values (B, H_kv, T, d) of layer i of a Hugging Face ``DynamicCache`` (transformers >= 4.56 keeps
    them in ``cache.layers[i]``, older versions in ``key_cache[i]``/``value_cache[i]``)."""
    if hasattr(cache, "layers"):
        return cache.layers[i].keys, cache.layers[i].values
    return cache.key_cache[i], cache.value_cache[i]
