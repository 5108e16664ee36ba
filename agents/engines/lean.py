"""A lean one-token decode step for Qwen2- and Llama-family Hugging Face models (the HF engine's decode loop).

Why [choice]: on a CPU, a decode step of a small model is overhead and memory traffic, not arithmetic.
Each Hugging Face step rebuilds the attention mask, calls ~30 modules per layer and grows the KV cache by
concatenation (a copy of the whole cache per step and layer). This step runs the same arithmetic on the model's own
parameters, with the mask kept as one boolean tensor and the KV cache preallocated for the whole response and
written in place. W_q|W_k|W_v and W_gate|W_up are concatenated once per batch (``start``, ``LeanWeights``), so one
batch's generation reads one set of weights and each step runs 4 matmuls per layer instead of 7.

**Packed weights for models that do not fit the cache** [choice]. At a rollout's 8-16 rows, a step of
SmolLM2-135M reads its 540 MB of weights from memory, and ``F.linear`` (MKL) reads them at 5-7 GB/s on one thread
of these machines against 13.6 GB/s for a plain sum. ``LeanWeights`` reorders such a model's weights once into
oneDNN's blocked layout, whose matmul keeps 8-11 GB/s there; they are kept until the parameters change. The
demo's tiny model is not packed (its weights sit in the cache, where packing is slower).
``results/benchmarks/decode_linear.md`` (``python -m benchmarks.switches pack-weights``) has the figures.

Per step, for B' live rows, layer by layer (D width, H query heads, H_kv key/value heads, d = head width):
    x   = RMSNorm(h)                                   h (B', D)
    q, k, v = x [W_q|W_k|W_v] + b; q, k = rope(q), rope(k)   q (B', H, d), k, v (B', H_kv, d)
    K[:, :, t] = k, V[:, :, t] = v                     cache (B', H_kv, T_max, d), t = tokens so far
    h  += softmax(q K[:, :, :t+1]^T / sqrt(d) + mask) V  W_o
    h  += W_down (silu(RMSNorm(h) W_gate) * RMSNorm(h) W_up)
logits = RMSNorm(h) W_lm. The rotary cos/sin come from the model's own rotary module (every RoPE variant it knows).

**Cascade attention over shared prefixes** [choice]. When the prefill computed shared prompt prefixes once (a
group's G copies of the system prompt and task), the step keeps one copy of each prefix's keys and values (K, H_kv,
L, d) instead of B' copies, and each row's own cache holds only [the rest of its prompt | its response]. Per layer:
    s_pre = q P_k^T (one matmul per prefix over its run of adjacent rows), s_own = q K_own^T
    p     = softmax([s_pre | s_own] / sqrt(d) + [prefix mask | own mask])       (one softmax over both parts)
    o     = p[:, :L] P_v (per prefix) + p[:, L:] V_own
The same attention as over [prefix | own] keys; the prefix is read once per step for all its rows, not once per
row. On the demo's rollouts (prefixes of 215-324 tokens, 80-300 more per row) the step reads about half the bytes
and dropping finished rows copies less. Used when there are at most half as many prefixes as rows.

Measured: ``results/benchmarks/phases.md`` (rollout phase) and ``results/benchmarks/generation.md``.

``lean_support(model)`` says why a model cannot use it (the engine then keeps Hugging Face's step). Tested equal to
the Hugging Face step in logits (1e-5) and in the sampled tokens (``tests/agents/test_engines_hf.py``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["lean_support", "LeanDecoder", "LeanWeights", "PACK_MODES", "packing_available"]

_TYPES = ("qwen2", "llama")

PACK_MIN_BYTES = 64 << 20
"""``LeanWeights(pack="auto")`` packs a model whose decode weights take at least this many bytes [choice]: there a
step streams its weights from memory, and at a rollout's 8-16 rows oneDNN's packed matmul streams them faster than
``F.linear``; a small model's weights sit in the cache, where packing does not pay
(``results/benchmarks/decode_linear.md``: SmolLM2 and the demo's tiny model)."""

PACK_MODES = ("auto", "on", "off")
"""``LeanWeights``' ``pack`` (``HFEngine``'s ``pack_weights``, config ``rollout.hf_pack_weights``)."""

PACK_ROWS_HINT = 8
"""Rows the packed layout is chosen for [choice]: one layout serves every batch, as rows finish and leave it."""


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
    linears = _linears(model)
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


def packing_available() -> bool:
    """True where torch has oneDNN's packed linear (x86 CPU builds)."""
    mk = getattr(torch.ops, "mkldnn", None)
    return (torch.backends.mkldnn.is_available() and mk is not None
            and hasattr(mk, "_reorder_linear_weight") and hasattr(mk, "_linear_pointwise"))


class LeanWeights:
    """The weights a decode step reads, built from the model's parameters.

    Per layer: W_q|W_k|W_v and W_gate|W_up stacked into one matrix each (with their biases), W_o and W_down; then
    the LM head. Each is a ``(weight, bias)`` pair for ``linear``.

    ``pack``: auto | on | off. Packed, every weight is also reordered into oneDNN's blocked layout
    (``torch.ops.mkldnn._reorder_linear_weight``) and ``linear`` runs oneDNN's matmul on it: the same products
    summed in another order (log-probs within 1e-5 of the unpacked step). auto = on for a float32 model on the CPU
    whose weights take at least ``PACK_MIN_BYTES``, where torch has the ops [choice].

    Packing a model costs about a second per 500 MB, so packed weights are kept between batches and rebuilt when a
    parameter changed: its storage, its version counter (every in-place update through autograd's view, e.g. an
    optimizer step or ``copy_``) or a sample of 256 of its values (which also catches writes through ``.data``).
    Unpacked weights are rebuilt at every batch, as the stacking costs little.
    """

    def __init__(self, model, pack: str = "auto"):
        if pack not in PACK_MODES:
            raise ValueError(f"LeanWeights pack={pack!r} must be one of {PACK_MODES}")
        self.model, self.requested = model, pack
        params = [x.weight for x in _linears(model)]
        dtype = params[0].dtype
        on_cpu = params[0].device.type == "cpu"
        size = sum(p.numel() * p.element_size() for p in params)
        if pack == "on" and not (packing_available() and on_cpu and dtype == torch.float32):
            raise ValueError("LeanWeights pack='on' needs a float32 model on the CPU and torch's oneDNN ops "
                             f"(this model: {dtype}, {params[0].device}; oneDNN ops: {packing_available()}); "
                             "use pack='auto' or 'off'")
        self.packed = pack == "on" or (pack == "auto" and on_cpu and dtype == torch.float32
                                       and size >= PACK_MIN_BYTES and packing_available())
        self._key = None
        self._built = False

    def _fingerprint(self) -> tuple:
        out = []
        for p in self.model.parameters():
            flat = p.detach().reshape(-1)
            stride = max(1, flat.numel() // 256)
            out.append((p.data_ptr(), p._version, float(flat[::stride][:256].double().sum())))
        return tuple(out)

    def current(self) -> LeanWeights:
        """Build the weights from the current parameters (packed: only if a parameter changed since)."""
        key = self._fingerprint() if self.packed else None
        if not self._built or not self.packed or key != self._key:
            self._build()
            self._key, self._built = key, True
        return self

    def _build(self) -> None:
        prep = _pack if self.packed else (lambda wb: wb)
        self.qkv, self.o, self.gate_up, self.down = [], [], [], []
        for layer in self.model.model.layers:
            a, m = layer.self_attn, layer.mlp
            self.qkv.append(prep(_stacked((a.q_proj, a.k_proj, a.v_proj))))
            self.o.append(prep((a.o_proj.weight, a.o_proj.bias)))
            self.gate_up.append(prep(_stacked((m.gate_proj, m.up_proj))))  # Llama's mlp_bias: kept where present
            self.down.append(prep((m.down_proj.weight, m.down_proj.bias)))
        head = self.model.lm_head
        self.head = prep((head.weight, head.bias))

    def linear(self, x: torch.Tensor, wb: tuple[torch.Tensor, torch.Tensor | None]) -> torch.Tensor:
        """x (B, in) -> (B, out) through one of this set's (weight, bias) pairs."""
        if self.packed:
            return torch.ops.mkldnn._linear_pointwise(x.contiguous(), wb[0], wb[1], "none", [], "")
        return F.linear(x, *wb)


def _linears(model) -> list:
    """The LM head, then every layer's seven projections: the matrices a decode step multiplies by."""
    out = [model.lm_head]
    for layer in model.model.layers:
        a, m = layer.self_attn, layer.mlp
        out += [a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj]
    return out


@torch.no_grad()
def _pack(wb: tuple[torch.Tensor, torch.Tensor | None]) -> tuple[torch.Tensor, torch.Tensor | None]:
    w, b = wb
    return (torch.ops.mkldnn._reorder_linear_weight(w.detach().contiguous(), PACK_ROWS_HINT),
            None if b is None else b.detach().clone())


class LeanDecoder:
    """Decode state of one batch: the preallocated KV cache, the key mask and the live rows.

    ``start(cache, attention_mask, capacity)`` takes the prefill's Hugging Face cache (B, H_kv, T_p, d per layer)
    and its (B, T_p) mask; ``step(tokens (B',), positions (B',)) -> logits (B', V)`` decodes one token per live row;
    ``keep(idx)`` drops the finished rows: the HF engine's ``DecodeStep`` (``agents.engines.hf``).
    """

    def __init__(self, model, weights: LeanWeights | None = None):
        why = lean_support(model)
        if why is not None:
            raise ValueError(f"LeanDecoder: {why}")
        if weights is not None and weights.model is not model:
            raise ValueError("LeanDecoder: the LeanWeights were built for another model")
        self.model = model
        self.weights = weights if weights is not None else LeanWeights(model)
        cfg = model.config
        self.heads = int(cfg.num_attention_heads)
        self.kv_heads = int(getattr(cfg, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads)
        self.scale = self.head_dim ** -0.5

    def start(self, cache, attention_mask: torch.Tensor, capacity: int, prefix=None) -> list[int] | None:
        """Take over the prefill's cache. ``prefix`` = (keys, values, mask, row_prefix) of shared prompt prefixes:
        per layer the prefixes' keys and values (K, H_kv, L, d) before they were indexed out to the rows, their
        (K, L) mask and the prefix of each row (B,); the cache and ``attention_mask`` then cover [prefix | rest].

        With ``prefix`` the decoder keeps one copy of each prefix (``cascade``) and returns the row order it works
        in (rows of one prefix adjacent; None when that is the given order): the caller reorders its rows so.
        """
        layers = self.model.model.layers
        self.cascade = prefix is not None and _runs_worth_it(prefix[3])
        order = None
        first = 0
        if self.cascade:
            pre_k, pre_v, pre_mask, row_prefix = prefix
            first = int(pre_mask.shape[1])  # L: the rows' own cache starts after the prefix columns
            rp = row_prefix.tolist()
            perm = sorted(range(len(rp)), key=lambda r: rp[r])  # stable: rows of one prefix adjacent
            if perm != list(range(len(rp))):
                order = perm
            idx = torch.tensor(perm, dtype=torch.long, device=attention_mask.device)
            self.row_prefix = [rp[r] for r in perm]
            self.pre_k = [k.contiguous() for k in pre_k]
            self.pre_v = [v.contiguous() for v in pre_v]
            self.pre_len = first
            pre_bias = torch.zeros(pre_mask.shape, dtype=self.pre_k[0].dtype, device=attention_mask.device)
            self.pre_bias = pre_bias.masked_fill(~pre_mask.bool(), float("-inf"))
            attention_mask = attention_mask[idx]
        self.k, self.v = [], []
        for i in range(len(layers)):
            k, v = _layer_kv(cache, i)
            if self.cascade:
                k, v = k[idx, :, first:], v[idx, :, first:]
            b, hk, t, d = k.shape
            kk = k.new_empty((b, hk, t + capacity, d))
            vv = v.new_empty((b, hk, t + capacity, d))
            kk[:, :, :t] = k
            vv[:, :, :t] = v
            self.k.append(kk)
            self.v.append(vv)
        own = attention_mask[:, first:]
        self.t = int(own.shape[1])
        self.mask = torch.zeros((own.shape[0], self.t + capacity), dtype=torch.bool, device=own.device)
        self.mask[:, : self.t] = own.bool()
        self.w = self.weights.current()  # one batch's generation reads one set of weights
        if self.cascade:
            self._plan_runs()
        self.order = order
        return order

    def _plan_runs(self) -> None:
        """(prefix, first row, end row) of each run of adjacent rows that share a prefix."""
        runs, a = [], 0
        rp = self.row_prefix
        for r in range(1, len(rp) + 1):
            if r == len(rp) or rp[r] != rp[a]:
                runs.append((rp[a], a, r))
                a = r
        self.runs = runs
        self.row_pre_bias = self.pre_bias[torch.tensor(rp, dtype=torch.long, device=self.pre_bias.device)]

    def keep(self, idx: torch.Tensor) -> None:
        self.k = [k[idx] for k in self.k]
        self.v = [v[idx] for v in self.v]
        self.mask = self.mask[idx]
        if self.cascade:
            self.row_prefix = [self.row_prefix[j] for j in idx.tolist()]
            self._plan_runs()

    def _attend_cascade(self, q: torch.Tensor, i: int, t: int, bias: torch.Tensor) -> torch.Tensor:
        """q (B', H, d) -> attention output (B', H * d) over [the row's prefix | its own keys 0..t]: softmax over
        both parts at once (``bias`` (B', 1, 1, L + t + 1): 0 or -inf per key); each prefix's keys are read once
        for all its rows (a matmul over its run of rows)."""
        b = q.shape[0]
        g = self.heads // self.kv_heads
        qh = q.view(b, self.kv_heads, g, self.head_dim)  # query head h reads key/value head h // g (as HF)
        s_own = torch.matmul(qh, self.k[i][:, :, : t + 1].transpose(-1, -2))  # (B', H_kv, g, t + 1)
        parts = []
        for k, a, c in self.runs:
            n = c - a
            qk = qh[a:c].transpose(0, 1).reshape(self.kv_heads, n * g, self.head_dim)
            s = torch.matmul(qk, self.pre_k[i][k].transpose(-1, -2))  # (H_kv, n g, L)
            parts.append(s.view(self.kv_heads, n, g, -1).transpose(0, 1))
        s_pre = parts[0] if len(parts) == 1 else torch.cat(parts, 0)  # (B', H_kv, g, L)
        p = torch.softmax(torch.cat([s_pre, s_own], -1) * self.scale + bias, dim=-1)
        L = self.pre_len
        o = torch.matmul(p[..., L:], self.v[i][:, :, : t + 1])  # (B', H_kv, g, d)
        outs = []
        for k, a, c in self.runs:
            n = c - a
            pk = p[a:c, ..., :L].transpose(0, 1).reshape(self.kv_heads, n * g, L)
            outs.append(torch.matmul(pk, self.pre_v[i][k]).view(self.kv_heads, n, g, self.head_dim).transpose(0, 1))
        o = o + (outs[0] if len(outs) == 1 else torch.cat(outs, 0))
        return o.reshape(b, self.heads * self.head_dim)

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        m = self.model.model
        b = tokens.shape[0]
        t = self.t
        if t >= self.mask.shape[1]:
            raise RuntimeError(f"LeanDecoder: the KV cache holds {self.mask.shape[1]} positions, all used")
        h = F.embedding(tokens, m.embed_tokens.weight)[:, None, :]  # (B', 1, D)
        cos, sin = m.rotary_emb(h, positions[:, None])  # (B', 1, d): broadcast over the heads of (B', heads, d)
        self.mask[:, t] = True
        if self.cascade:  # additive mask over [prefix | own keys]: 0 where a key is seen, -inf where not
            own = torch.zeros((b, t + 1), dtype=h.dtype, device=h.device).masked_fill_(~self.mask[:, : t + 1],
                                                                                       float("-inf"))
            bias = torch.cat([self.row_pre_bias, own], 1)[:, None, None, :]
        else:
            mask = self.mask[:, None, None, : t + 1]  # (B', 1, 1, t + 1)
        gqa = self.heads != self.kv_heads
        nq, nk = self.heads, self.kv_heads
        for i, layer in enumerate(m.layers):
            x = _rms(h[:, 0], layer.input_layernorm)  # (B', D)
            qkv = self.w.linear(x, self.w.qkv[i]).view(b, nq + 2 * nk, self.head_dim)
            qk = qkv[:, : nq + nk]
            qk = qk * cos + _rotate_half(qk) * sin  # RoPE on the query and key heads at once
            q, k, v = qk[:, :nq], qk[:, nq:], qkv[:, nq + nk:]
            self.k[i][:, :, t] = k
            self.v[i][:, :, t] = v
            if self.cascade:
                o = self._attend_cascade(q, i, t, bias)
            else:
                o = F.scaled_dot_product_attention(q[:, :, None], self.k[i][:, :, : t + 1], self.v[i][:, :, : t + 1],
                                                   attn_mask=mask, scale=self.scale, enable_gqa=gqa)
                o = o.reshape(b, nq * self.head_dim)
            h = h + self.w.linear(o, self.w.o[i])[:, None]
            x = _rms(h[:, 0], layer.post_attention_layernorm)
            gu = self.w.linear(x, self.w.gate_up[i])
            gate, up = gu.split(gu.shape[-1] // 2, dim=-1)
            h = h + self.w.linear(F.silu(gate) * up, self.w.down[i])[:, None]
        self.t = t + 1
        return self.w.linear(_rms(h, m.norm)[:, 0], self.w.head)


def _stacked(projs) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight, bias) of linear layers stacked along their outputs; bias None when none has one."""
    w = torch.cat([p.weight for p in projs], 0)
    if all(p.bias is None for p in projs):
        return w, None
    return w, torch.cat([p.bias if p.bias is not None else p.weight.new_zeros(p.weight.shape[0]) for p in projs])


def _runs_worth_it(row_prefix: torch.Tensor) -> bool:
    """Cascade attention pays when prefixes are shared: fewer distinct prefixes than half the rows [choice]."""
    n = int(row_prefix.numel())
    return n >= 2 and len(set(row_prefix.tolist())) * 2 <= n


def _layer_kv(cache, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values (B, H_kv, T, d) of layer i of a Hugging Face ``DynamicCache`` (transformers >= 4.56 keeps
    them in ``cache.layers[i]``, older versions in ``key_cache[i]``/``value_cache[i]``)."""
    if hasattr(cache, "layers"):
        return cache.layers[i].keys, cache.layers[i].values
    return cache.key_cache[i], cache.value_cache[i]
