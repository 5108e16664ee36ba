"""The actor's one forward pass over prompt+response: response log-probs, entropy and the BiGPO hidden state.

Symbols: N step rows, T tokens of prompt+response (padded), T_r response tokens (padded), D hidden size,
V vocabulary.

One pass, three outputs [paper, "Cost": the extra forward BiGPO pays in the paper is avoidable]:

* ``logprobs[i, t] = log softmax(z_{i, p_i - 1 + t} / tau)[y_{i, t}]`` for response token t of row i, where p_i is
  the prompt length, z the logits and tau the sampling temperature (logits at position p_i - 1 + t predict
  response token t);
* ``entropy[i, t] = logsumexp(z) - sum_v softmax(z)_v z_v`` at the same positions;
* ``hidden[i] = H^{(L)}_{i, p_i - 1}``: the hidden state at layer L of the LAST PROMPT TOKEN (the token after
  which generation starts) [paper, secondary reading], captured by a forward hook on the module that produces
  Hugging Face's ``hidden_states[L]`` (see ``hidden_state_module``), so the forward never materialises all
  layers' states and never runs twice.

The vocabulary log-softmax is computed in chunks of response tokens, each under activation checkpointing when
gradients are on, so the (tokens x V) logits never exist at once: memory is O(chunk x V) instead of
O(N T_r V) (for Qwen2.5 V = 151,936: 2,560 tokens would need 1.5 GB of fp32 logits per row otherwise).

Shared prompt prefixes [choice]: the rows of a rollout batch repeat long prompt prefixes (the system
prompt and task of a group, the history of a turn that G trajectories reached alike). ``pack_rows_shared`` gives
rows that share a prefix one copy of it: K distinct prefixes (K, L) run first, their KV cache is indexed out to
the N rows (``row_prefix``), and each row's suffix (the rest of its prompt, then its response) attends to its
prefix through that cache and to itself causally. Every real token sees exactly the tokens it sees unshared, at
the same positions, so log-probs, entropy, hidden states and gradients equal the unshared pass up to the order of
floating-point sums (``tests/trainer/test_prefix_sharing.py``). A row keeps at least one prompt token in its
suffix, so the hidden state (last prompt token) and every response logit come from the suffix pass.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

__all__ = [
    "PackedBatch",
    "PrefixPackedBatch",
    "ForwardOutput",
    "ForwardModule",
    "pack_rows",
    "pack_rows_shared",
    "prefix_order",
    "policy_forward",
    "plain_forward",
    "shared_prefix_forward",
    "batch_of",
    "hidden_state_module",
    "causal_lm_of",
]


@dataclass
class PackedBatch:
    """Prompt+response rows, right-padded, ready for one forward.

    input_ids      : LongTensor (N, T)    prompt tokens, then response tokens, then ``pad_id``
    attention_mask : LongTensor (N, T)    1 on real tokens
    prompt_len     : LongTensor (N,)      p_i >= 1
    response_ids   : LongTensor (N, T_r)  response tokens, right-padded
    response_mask  : BoolTensor (N, T_r)  True on real response tokens
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    prompt_len: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def to(self, device) -> PackedBatch:
        return PackedBatch(*(t.to(device) for t in (self.input_ids, self.attention_mask, self.prompt_len,
                                                    self.response_ids, self.response_mask)))

    @property
    def num_response_tokens(self) -> int:
        return int(self.response_mask.sum())

    @property
    def num_tokens(self) -> int:
        return int(self.attention_mask.sum())

    def as_kwargs(self) -> dict:
        return {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "prompt_len": self.prompt_len,
            "response_ids": self.response_ids,
            "response_mask": self.response_mask,
        }


def pack_rows(prompt_ids: Sequence[torch.Tensor], response_ids: Sequence[torch.Tensor], pad_id: int = 0) -> PackedBatch:
    """Concatenate each row's prompt and response and right-pad to the longest row.

    Right padding keeps every real token at its natural position (0..p_i + r_i - 1), so position ids need no
    adjustment and, the model being causal, a row's prompt states do not depend on its response or padding.
    """
    if len(prompt_ids) != len(response_ids):
        raise ValueError(f"pack_rows: {len(prompt_ids)} prompts but {len(response_ids)} responses")
    n = len(prompt_ids)
    if n == 0:
        raise ValueError("pack_rows: no rows to pack")
    p_len = torch.tensor([int(p.numel()) for p in prompt_ids], dtype=torch.long)
    r_len = torch.tensor([int(r.numel()) for r in response_ids], dtype=torch.long)
    if bool((p_len == 0).any()):
        bad = torch.nonzero(p_len == 0).flatten()[:5].tolist()
        raise ValueError(f"pack_rows: rows {bad} have an empty prompt; every step row needs at least one prompt token")
    width = int((p_len + r_len).max())
    width_r = max(int(r_len.max()), 1)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    att = torch.zeros((n, width), dtype=torch.long)
    resp = torch.full((n, width_r), pad_id, dtype=torch.long)
    rmask = torch.zeros((n, width_r), dtype=torch.bool)
    for i, (p, r) in enumerate(zip(prompt_ids, response_ids)):
        lp, lr = p.numel(), r.numel()
        ids[i, :lp] = p
        ids[i, lp: lp + lr] = r
        att[i, : lp + lr] = 1
        resp[i, :lr] = r
        rmask[i, :lr] = True
    return PackedBatch(ids, att, p_len, resp, rmask)


@dataclass
class PrefixPackedBatch:
    """Rows that share prompt prefixes, ready for one prefix forward plus one suffix forward.

    prefix_ids     : LongTensor (K, L)    the K distinct prefixes, right-padded
    prefix_mask    : LongTensor (K, L)    1 on real prefix tokens (every prefix has >= 1)
    row_prefix     : LongTensor (N,)      the prefix of each row
    input_ids      : LongTensor (N, S)    the rest of each row's prompt, then its response, right-padded
    attention_mask : LongTensor (N, S)    1 on real suffix tokens
    prompt_len     : LongTensor (N,)      prompt tokens in the suffix, >= 1
    response_ids   : LongTensor (N, T_r)  as in ``PackedBatch``
    response_mask  : BoolTensor (N, T_r)
    suffix_bucket  : LongTensor (N,)      or None: the suffix forward runs once per bucket, each over its rows
                                          trimmed to their longest suffix (less padding); None = one forward
    """

    prefix_ids: torch.Tensor
    prefix_mask: torch.Tensor
    row_prefix: torch.Tensor
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    prompt_len: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    suffix_bucket: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def to(self, device) -> PrefixPackedBatch:
        return PrefixPackedBatch(*(None if getattr(self, f) is None else getattr(self, f).to(device)
                                   for f in self.__dataclass_fields__))

    @property
    def num_response_tokens(self) -> int:
        return int(self.response_mask.sum())

    @property
    def num_tokens(self) -> int:
        """Real tokens the two forwards run (each shared prefix once)."""
        return int(self.prefix_mask.sum()) + int(self.attention_mask.sum())

    def suffix_forwards(self) -> list[tuple[int, int]]:
        """(rows, width) of each suffix forward: one over all rows at the padded width, or one per bucket at the
        width of its longest suffix."""
        if self.suffix_bucket is None:
            return [(int(self.input_ids.shape[0]), int(self.input_ids.shape[1]))]
        width = self.attention_mask.sum(1)
        return [(int((self.suffix_bucket == b).sum()), int(width[self.suffix_bucket == b].max()))
                for b in self.suffix_bucket.unique().tolist()]

    @property
    def padded_tokens(self) -> int:
        """Token positions the forwards compute, padding included (each suffix bucket at its own width)."""
        return int(self.prefix_ids.numel()) + sum(n * w for n, w in self.suffix_forwards())

    def as_kwargs(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def prefix_order(prompt_ids: Sequence[torch.Tensor]) -> list[int]:
    """Row indices sorted by prompt tokens (lexicographically), so that rows sharing a prefix are adjacent."""
    keys = [p.tolist() for p in prompt_ids]
    return sorted(range(len(keys)), key=keys.__getitem__)


def length_order(prompt_ids: Sequence[torch.Tensor], response_ids: Sequence[torch.Tensor]) -> list[int]:
    """Row indices by prompt + response length, longest first (stable): batches of rows of similar length, so that
    rows packed without shared prefixes (``pack_rows``) carry the least padding."""
    lengths = torch.tensor([int(p.numel() + r.numel()) for p, r in zip(prompt_ids, response_ids)])
    return torch.argsort(lengths, descending=True, stable=True).tolist()


def pack_rows_shared(prompt_ids: Sequence[torch.Tensor], response_ids: Sequence[torch.Tensor], pad_id: int = 0,
                     *, min_saving: float = 0.1, score_prompt: bool = False,
                     suffix_buckets: int = 1) -> PackedBatch | PrefixPackedBatch:
    """Pack rows so that rows sharing a prompt prefix compute it once; ``PackedBatch`` when that saves too little.

    The rows keep their order; ``agents.prefixes.plan_shared_prefixes`` picks the prefixes (the token positions
    the two forwards compute, padding included, against those of the unshared packing). ``suffix_buckets`` > 1:
    the suffixes then run in up to that many forwards of rows of similar length (``plan_length_buckets``), each
    over the shared KV cache, so that short suffixes are not padded to the longest.

    ``score_prompt`` (a loss on prompt tokens too, SFT's ``prompt_weight``): every token after the first is a
    target. Row i = prefix P[:L] + a suffix whose one-token prompt is P[L] and whose "response" is P[L+1:] and
    then the response; P[1:L] and P[L] are scored by the prefix forward (``policy_forward(prefix_targets=True)``).
    Unshared, the prompt is P[:1] and the "response" P[1:] + the response.
    """
    from agents.prefixes import plan_shared_prefixes, prefix_tensors

    def split(p: torch.Tensor, r: torch.Tensor, c: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(suffix prompt, suffix targets) of a row whose first c prompt tokens come from elsewhere."""
        return (p[c: c + 1], torch.cat([p[c + 1:], r])) if score_prompt else (p[c:], r)

    plan = plan_shared_prefixes([p.tolist() for p in prompt_ids], [int(r.numel()) for r in response_ids],
                                min_saving=min_saving)
    if plan is None:
        if not score_prompt:
            return pack_rows(prompt_ids, response_ids, pad_id)
        ps, rs = zip(*(split(p, r, 0) for p, r in zip(prompt_ids, response_ids)))
        return pack_rows(list(ps), list(rs), pad_id)
    prefixes, row_prefix = plan
    pre, pre_mask = prefix_tensors(prefixes, pad_id)
    ps, rs = zip(*(split(p, r, len(prefixes[k])) for p, r, k in zip(prompt_ids, response_ids, row_prefix)))
    rest = pack_rows(list(ps), list(rs), pad_id)
    bucket = None
    if suffix_buckets > 1:
        from agents.prefixes import plan_length_buckets

        plan_b = plan_length_buckets(rest.attention_mask.sum(1).tolist(), suffix_buckets)
        if max(plan_b) > 0:
            bucket = torch.tensor(plan_b, dtype=torch.long)
    return PrefixPackedBatch(pre, pre_mask, torch.tensor(row_prefix, dtype=torch.long), rest.input_ids,
                             rest.attention_mask, rest.prompt_len, rest.response_ids, rest.response_mask, bucket)


@dataclass
class ForwardOutput:
    """What one actor forward returns.

    logprobs      : FloatTensor (N, T_r)  log pi(y_t | prompt, y_<t), 0 on padding; differentiable in training
    entropy       : FloatTensor (N, T_r)  token entropy of pi(. | prompt, y_<t), 0 on padding (None if not asked)
    mask          : BoolTensor (N, T_r)   response_mask
    hidden        : FloatTensor (N, D)    layer-L state at the last prompt token, fp32, detached (None if not asked)
    nonfinite_rows: LongTensor (K,)       rows whose log-probs or entropy hold NaN/Inf on real tokens

    With ``prefix_targets`` (a shared batch; the SFT warm start's prompt-token loss):
    prefix_logprobs: FloatTensor (K, L)   column j >= 1: log pi(prefix_j | prefix_<j) of shared prefix k, computed
                                          once for all its rows; 0 in column 0 and on padding
    bridge_logprobs: FloatTensor (N,)     log pi(first suffix token of row i | its prefix), which the prefix's last
                                          position predicts
    """

    logprobs: torch.Tensor
    entropy: torch.Tensor | None
    mask: torch.Tensor
    hidden: torch.Tensor | None
    nonfinite_rows: torch.Tensor
    prefix_logprobs: torch.Tensor | None = None
    bridge_logprobs: torch.Tensor | None = None


def causal_lm_of(model: nn.Module) -> nn.Module:
    """The Hugging Face causal LM inside ``model`` (unwraps DeepSpeed engines, ``ForwardModule`` and peft)."""
    m = model
    for _ in range(6):
        if hasattr(m, "module") and isinstance(m.module, nn.Module) and not hasattr(m, "get_decoder"):
            m = m.module  # DeepSpeed engine / DDP
        elif isinstance(m, ForwardModule):
            m = m.lm
        elif hasattr(m, "get_base_model") and callable(m.get_base_model):
            m = m.get_base_model()  # peft: the LM with LoRA layers injected
        else:
            break
    if not hasattr(m, "get_decoder"):
        raise TypeError(f"{type(model).__name__} does not hold a Hugging Face causal LM (no get_decoder())")
    return m


def _num_layers(lm: nn.Module) -> int:
    cfg = lm.config
    cfg = getattr(cfg, "text_config", cfg) if not hasattr(cfg, "num_hidden_layers") else cfg
    return int(cfg.num_hidden_layers)


def hidden_state_module(model: nn.Module, index: int) -> tuple[nn.Module, str]:
    """The module whose output is Hugging Face's ``hidden_states[index]``, and a description of it.

    ``hidden_states`` has L + 1 entries for an L-layer model: entry 0 is the embedding output, entry j (1 <= j < L)
    the output of decoder layer j - 1, and entry L the output of the final norm applied to layer L - 1's output
    (transformers overwrites the last entry with ``last_hidden_state``). A negative ``index`` counts from the end:
    -1 -> final norm, -(L+1) -> embeddings [choice, docs/method.md, "Hidden state"].
    """
    lm = causal_lm_of(model)
    num_layers = _num_layers(lm)
    if not isinstance(index, int) or isinstance(index, bool):
        raise ValueError(f"model.hidden_layer={index!r} must be an int")
    if not -(num_layers + 1) <= index <= num_layers:
        raise ValueError(
            f"model.hidden_layer={index} is out of range for a {num_layers}-layer model: hidden_states has "
            f"{num_layers + 1} entries, so use an index in [-{num_layers + 1}, -1] (e.g. -{min(12, num_layers)})"
        )
    pos = index % (num_layers + 1)
    decoder = lm.get_decoder()
    if pos == 0:
        return decoder.get_input_embeddings(), "embeddings"
    if pos == num_layers:
        return decoder.norm, f"final norm after layer {num_layers - 1}"
    return decoder.layers[pos - 1], f"output of decoder layer {pos - 1}"


def _chunk_logprob_entropy(h: torch.Tensor, targets: torch.Tensor, lm_head: nn.Module, inv_temp: float,
                           want_entropy: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """h (C, D), targets (C,) -> (log p of target (C,), entropy (C,)), fp32."""
    logits = lm_head(h).float()  # (C, V)
    if inv_temp != 1.0:
        logits = logits * inv_temp
    lse = torch.logsumexp(logits, dim=-1)  # (C,)
    logp = logits.gather(1, targets.unsqueeze(1)).squeeze(1) - lse
    if want_entropy:
        ent = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)  # H = lse - E_p[z]
    else:
        ent = torch.zeros_like(lse)
    return logp, ent


def _logprobs_chunked(h: torch.Tensor, y: torch.Tensor, lm_head: nn.Module, temperature: float,
                      want_entropy: bool, chunk_tokens: int, min_chunks: int = 0,
                      pad_h: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """h (M, D), y (M,) -> (log p (M,), entropy (M,), pad term) through the LM head in chunks of ``chunk_tokens``
    positions, each recomputed in the backward (activation checkpointing) so that no (M, V) logits tensor is kept.

    ``min_chunks`` > ceil(M / chunk_tokens): the LM head also runs on ``pad_h`` (1, D) until that many chunks ran,
    so that ranks with fewer response tokens make the same module calls (ZeRO-3 gathers the head's weights in
    every call, forward and backward). The pad term is 0 times those chunks' log-probs: a scalar the caller adds
    to its output so that their backward runs too; None when no pad chunk ran."""
    inv_temp = 1.0 / float(temperature) if temperature and temperature > 0 else 1.0
    logp_parts, ent_parts = [], []
    use_ckpt = torch.is_grad_enabled() and h.requires_grad

    def head(h_c: torch.Tensor, y_c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if use_ckpt:
            return checkpoint(_chunk_logprob_entropy, h_c, y_c, lm_head, inv_temp, want_entropy, use_reentrant=False)
        return _chunk_logprob_entropy(h_c, y_c, lm_head, inv_temp, want_entropy)

    for start in range(0, h.shape[0], max(1, chunk_tokens)):
        lp, en = head(h[start: start + chunk_tokens], y[start: start + chunk_tokens])
        logp_parts.append(lp)
        ent_parts.append(en)
    pad = None
    if len(logp_parts) < min_chunks:
        if pad_h is None:
            raise ValueError("_logprobs_chunked: min_chunks needs pad_h, a (1, D) state to run the pad chunks on")
        y_pad = torch.zeros(pad_h.shape[0], dtype=torch.long, device=pad_h.device)
        pad = sum(head(pad_h, y_pad)[0].sum() for _ in range(min_chunks - len(logp_parts))) * 0.0
    if not logp_parts:
        return h.new_zeros(0, dtype=torch.float32), h.new_zeros(0, dtype=torch.float32), pad
    return torch.cat(logp_parts), torch.cat(ent_parts), pad


def policy_forward(model: nn.Module, batch: PackedBatch | PrefixPackedBatch, *, hidden_layer: int | None = None,
                  compute_entropy: bool = True, temperature: float = 1.0, chunk_tokens: int = 1024,
                  prefix_targets: bool = False, head_chunks: int = 0) -> ForwardOutput:
    """One forward of ``model`` (a causal LM, possibly peft-wrapped) over packed rows; see the module docstring.

    ``batch``: a ``PackedBatch`` runs the plain forward (``plain_forward``), a ``PrefixPackedBatch`` the shared-prefix
    one (``shared_prefix_forward``: the rows' suffixes attend to their shared prefix through its KV cache); both give
    the same outputs up to the order of floating-point sums. Gradients flow to ``logprobs``/``entropy`` when grad
    mode is on, through the shared prefix too. ``temperature`` divides the logits as the sampler did, so that ratios
    compare the same distributions [GiGPO/verl]. ``chunk_tokens``: response tokens per LM-head chunk.
    ``prefix_targets`` (shared batches only) also scores the shared prefixes' own tokens and each row's first
    suffix token (``ForwardOutput.prefix_logprobs`` / ``bridge_logprobs``), so that a loss over every prompt token
    (SFT's ``prompt_weight``) needs no unshared pass. ``head_chunks``: run the LM head at least that many times (pad
    chunks of zero weight), so that ranks with fewer response tokens make the same calls (``PPOActor`` sets it
    under ZeRO-3 on several ranks).
    """
    if isinstance(batch, PrefixPackedBatch):
        return shared_prefix_forward(model, batch, hidden_layer=hidden_layer, compute_entropy=compute_entropy,
                                     temperature=temperature, chunk_tokens=chunk_tokens,
                                     prefix_targets=prefix_targets, head_chunks=head_chunks)
    if not isinstance(batch, PackedBatch):
        raise TypeError(f"policy_forward: batch is a {type(batch).__name__}; pack the rows with pack_rows or "
                        "pack_rows_shared (PackedBatch or PrefixPackedBatch)")
    if prefix_targets:
        raise ValueError("policy_forward: prefix_targets needs a shared batch (a PrefixPackedBatch, pack_rows_shared)")
    return plain_forward(model, batch, hidden_layer=hidden_layer, compute_entropy=compute_entropy,
                         temperature=temperature, chunk_tokens=chunk_tokens, head_chunks=head_chunks)


def plain_forward(model: nn.Module, batch: PackedBatch, *, hidden_layer: int | None = None,
                  compute_entropy: bool = True, temperature: float = 1.0, chunk_tokens: int = 1024,
                  head_chunks: int = 0) -> ForwardOutput:
    """The actor's forward without shortcuts: one decoder pass over the [prompt | response] rows, the hidden state
    at each row's last prompt token (a hook on the module behind ``hidden_states[L]``), then the response
    log-probs and entropy through the LM head (``_response_outputs``). Arguments as in ``policy_forward``."""
    lm = causal_lm_of(model)
    last_prompt = batch.prompt_len.to(batch.input_ids.device) - 1  # (N,)
    with _HiddenCapture(lm, hidden_layer, last_prompt) as capture:
        capture.rows = torch.arange(len(batch), device=batch.input_ids.device)
        out = lm.get_decoder()(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
    last = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]  # (N, T, D), after final norm
    hidden = capture.states[0] if capture.states else None
    return _response_outputs(lm, batch, last, hidden, compute_entropy=compute_entropy, temperature=temperature,
                             chunk_tokens=chunk_tokens, head_chunks=head_chunks)


class _HiddenCapture:
    """A forward hook on the module whose output is ``hidden_states[layer]`` (``hidden_state_module``): each forward
    it sees appends its state at the last prompt token of ``rows`` (the rows that forward runs), (n, D) fp32 and
    detached, to ``states``. ``layer=None`` captures nothing. The hook is removed on leaving the ``with`` block."""

    def __init__(self, lm: nn.Module, layer: int | None, last_prompt: torch.Tensor):
        self.states: list[torch.Tensor] = []
        self.rows: torch.Tensor | None = None
        self.last_prompt = last_prompt
        self._handle = None
        if layer is not None:
            module, _ = hidden_state_module(lm, layer)
            self._handle = module.register_forward_hook(self._hook)

    def _hook(self, _mod, _inp, out) -> None:
        h = out[0] if isinstance(out, (tuple, list)) else out  # (n, T, D)
        g = self.rows
        self.states.append(h[torch.arange(g.numel(), device=self.last_prompt.device),
                             self.last_prompt[g]].detach().float())  # (n, D)

    def __enter__(self) -> _HiddenCapture:
        return self

    def __exit__(self, *exc) -> None:
        if self._handle is not None:
            self._handle.remove()


def _response_outputs(lm: nn.Module, batch: PackedBatch | PrefixPackedBatch, last: torch.Tensor,
                      hidden: torch.Tensor | None, *, compute_entropy: bool, temperature: float, chunk_tokens: int,
                      head_chunks: int) -> ForwardOutput:
    """Log-probs and entropy of the response tokens from the final states ``last`` (N, T, D) of the rows' tokens
    (after the prompt tokens of ``batch.input_ids``), and the rows whose values are not finite."""
    lm_head = lm.get_output_embeddings()
    device = batch.input_ids.device
    n = batch.input_ids.shape[0]
    last_prompt = batch.prompt_len.to(device) - 1  # (N,)
    t_r = batch.response_ids.shape[1]
    # logits at position p_i - 1 + t predict response token t
    pos = (last_prompt.unsqueeze(1) + torch.arange(t_r, device=device).unsqueeze(0)).clamp(max=last.shape[1] - 1)
    mask = batch.response_mask.to(device).bool()
    sel_rows, sel_t = torch.nonzero(mask, as_tuple=True)  # (M,), (M,): real response tokens only
    h_sel = last[sel_rows, pos[sel_rows, sel_t]]  # (M, D)
    y_sel = batch.response_ids.to(device)[sel_rows, sel_t]  # (M,)

    logp_flat, ent_flat, pad = _logprobs_chunked(h_sel, y_sel, lm_head, temperature, compute_entropy, chunk_tokens,
                                                 min_chunks=head_chunks, pad_h=last[:1, 0])

    logprobs = torch.zeros((n, t_r), dtype=torch.float32, device=device).index_put((sel_rows, sel_t), logp_flat)
    if pad is not None:
        logprobs = logprobs + pad  # adds 0: keeps the pad chunks in the graph so that their backward runs
    entropy = None
    if compute_entropy:
        entropy = torch.zeros((n, t_r), dtype=torch.float32, device=device).index_put((sel_rows, sel_t), ent_flat)

    bad_tok = ~torch.isfinite(logp_flat.detach())
    if compute_entropy:
        bad_tok |= ~torch.isfinite(ent_flat.detach())
    bad_rows = torch.unique(sel_rows[bad_tok]) if bool(bad_tok.any()) else sel_rows.new_zeros(0)
    return ForwardOutput(logprobs=logprobs, entropy=entropy, mask=mask, hidden=hidden, nonfinite_rows=bad_rows)


def shared_prefix_forward(model: nn.Module, batch: PrefixPackedBatch, *, hidden_layer: int | None = None,
                          compute_entropy: bool = True, temperature: float = 1.0, chunk_tokens: int = 1024,
                          prefix_targets: bool = False, head_chunks: int = 0) -> ForwardOutput:
    """``plain_forward`` for rows that share prompt prefixes (``pack_rows_shared``): the K prefixes run once, their
    KV cache is indexed out to the rows, then the rows' suffixes run at their true positions (module docstring).
    With ``batch.suffix_bucket`` the suffixes run as one forward per bucket, each trimmed to its rows' longest
    suffix and over its own copy of their prefixes' KV cache; the result is that of one suffix forward up to float
    rounding. Arguments as in ``policy_forward``."""
    lm = causal_lm_of(model)
    decoder = lm.get_decoder()
    lm_head = lm.get_output_embeddings()
    input_ids, attention_mask = batch.input_ids, batch.attention_mask
    prefix_ids, prefix_mask = batch.prefix_ids, batch.prefix_mask
    n = input_ids.shape[0]
    device = input_ids.device
    last_prompt = batch.prompt_len.to(device) - 1  # (N,)
    rows = torch.arange(n, device=device)

    prefix_extra: tuple[torch.Tensor, torch.Tensor] | tuple[None, None] = (None, None)
    if getattr(lm, "is_gradient_checkpointing", False) and torch.is_grad_enabled():
        raise ValueError("policy_forward: a shared prefix passes its KV cache to the rows, which Hugging Face "
                         "gradient checkpointing turns off; pack with pack_rows (trainer.prefix_sharing=false)")
    from transformers import DynamicCache

    cache = DynamicCache(config=lm.config)
    pre_out = decoder(input_ids=prefix_ids, attention_mask=prefix_mask, past_key_values=cache, use_cache=True)
    row_prefix = batch.row_prefix.to(device)
    if prefix_targets:
        pre_last = pre_out.last_hidden_state if hasattr(pre_out, "last_hidden_state") else pre_out[0]  # (K, L, D)
        prefix_extra = _prefix_target_logprobs(pre_last, prefix_ids.to(device), prefix_mask.to(device),
                                               row_prefix, input_ids[:, 0], lm_head, temperature, chunk_tokens)
    shared = prefix_mask.to(device)[row_prefix]  # (N, L)
    offset = shared.sum(1, keepdim=True)  # (N, 1): a suffix starts at its prefix's length
    suffix_bucket = batch.suffix_bucket
    if suffix_bucket is None:
        cache.batch_select_indices(row_prefix)  # (K, ...) -> (N, ...): each row's prefix keys and values
        call = {"input_ids": input_ids, "attention_mask": torch.cat([shared, attention_mask], dim=1),
                "position_ids": offset + torch.arange(input_ids.shape[1], device=device).unsqueeze(0),
                "past_key_values": cache, "use_cache": True}
    else:
        prefix_kv = [(layer.keys, layer.values) for layer in cache.layers]  # per layer, (K, heads, L, d)

        def bucket_call(g: torch.Tensor) -> dict:
            width = int(attention_mask[g].sum(1).max())
            sub = DynamicCache(config=lm.config)
            for li, (k, v) in enumerate(prefix_kv):  # (K, ...) -> (n_g, ...): this bucket's prefixes
                sub.update(k.index_select(0, row_prefix[g]), v.index_select(0, row_prefix[g]), li)
            return {"input_ids": input_ids[g, :width],
                    "attention_mask": torch.cat([shared[g], attention_mask[g, :width]], dim=1),
                    "position_ids": offset[g] + torch.arange(width, device=device).unsqueeze(0),
                    "past_key_values": sub, "use_cache": True}

    suffix_bucket = suffix_bucket.to(device) if suffix_bucket is not None else None
    groups = ([torch.nonzero(suffix_bucket == b).flatten() for b in torch.unique(suffix_bucket).tolist()]
              if suffix_bucket is not None else [rows])
    with _HiddenCapture(lm, hidden_layer, last_prompt) as capture:
        parts = []
        for g in groups:
            capture.rows = g
            o = decoder(**(call if suffix_bucket is None else bucket_call(g)))
            parts.append(o.last_hidden_state if hasattr(o, "last_hidden_state") else o[0])
    captured = capture.states
    if suffix_bucket is None:
        last = parts[0]  # (N, T, D), after final norm
        hidden = captured[0] if captured else None
    else:  # the buckets' outputs, right-padded to the widest, back in row order
        width = max(p.shape[1] for p in parts)
        perm = torch.cat(groups)
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(n, device=device)
        last = torch.cat([torch.nn.functional.pad(p, (0, 0, 0, width - p.shape[1])) for p in parts])[inv]
        hidden = torch.cat(captured)[inv] if captured else None

    out = _response_outputs(lm, batch, last, hidden, compute_entropy=compute_entropy, temperature=temperature,
                            chunk_tokens=chunk_tokens, head_chunks=head_chunks)
    pre_lp, bridge_lp = prefix_extra
    if pre_lp is not None:  # a non-finite shared token poisons every row of its prefix
        out.prefix_logprobs, out.bridge_logprobs = pre_lp, bridge_lp
        bad = ~torch.isfinite(bridge_lp.detach()) | ~torch.isfinite(pre_lp.detach()).all(1)[row_prefix]
        if bool(bad.any()):
            out.nonfinite_rows = torch.unique(torch.cat([out.nonfinite_rows, torch.nonzero(bad).flatten()]))
    return out


def _prefix_target_logprobs(pre_last: torch.Tensor, prefix_ids: torch.Tensor, prefix_mask: torch.Tensor,
                            row_prefix: torch.Tensor, first_suffix: torch.Tensor, lm_head: nn.Module,
                            temperature: float, chunk_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(K, L) log-probs of each prefix's tokens 1.. under the prefix itself, and (N,) of each row's first suffix
    token under its prefix's last position (``ForwardOutput.prefix_logprobs`` / ``bridge_logprobs``)."""
    k, width = prefix_ids.shape
    lengths = prefix_mask.sum(1)  # (K,)
    tgt = prefix_mask[:, 1:].bool()  # (K, L-1): real targets at columns 1..
    sel_k, sel_j = torch.nonzero(tgt, as_tuple=True)
    h = torch.cat([pre_last[sel_k, sel_j], pre_last[row_prefix, lengths[row_prefix] - 1]])  # (M + N, D)
    y = torch.cat([prefix_ids[sel_k, sel_j + 1], first_suffix])
    logp, _, _ = _logprobs_chunked(h, y, lm_head, temperature, False, chunk_tokens)
    m = sel_k.shape[0]
    pre_lp = torch.zeros((k, width), dtype=torch.float32, device=pre_last.device).index_put((sel_k, sel_j + 1),
                                                                                            logp[:m])
    return pre_lp, logp[m:]




def batch_of(fields: dict[str, torch.Tensor | None]) -> PackedBatch | PrefixPackedBatch:
    """The batch whose ``as_kwargs()`` is ``fields`` (a ``PrefixPackedBatch`` when it has ``prefix_ids``)."""
    return PrefixPackedBatch(**fields) if "prefix_ids" in fields else PackedBatch(**fields)


class ForwardModule(nn.Module):
    """Wraps a causal LM so that a DeepSpeed engine's ``forward`` is exactly ``policy_forward``.

    DeepSpeed (ZeRO-3 above all) must see the whole computation inside its engine's forward call so that its
    parameter gathering and hooks run; ``engine(packed.as_kwargs(), hidden_layer=-12)`` does that. ZeRO-3's hooks
    only look inside tuples, lists and dicts, so the batch goes in as its ``as_kwargs()`` dict (a batch object is
    taken too) and the output is a plain dict of tensors; turn it into a ``ForwardOutput`` with
    ``ForwardOutput(**out)``.
    """

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm

    def forward(self, batch: dict[str, torch.Tensor | None] | PackedBatch | PrefixPackedBatch, *,
                hidden_layer: int | None = None, compute_entropy: bool = True, temperature: float = 1.0,
                chunk_tokens: int = 1024, prefix_targets: bool = False,
                head_chunks: int = 0) -> dict[str, torch.Tensor | None]:
        if isinstance(batch, dict):
            batch = batch_of(batch)
        out = policy_forward(self.lm, batch, hidden_layer=hidden_layer, compute_entropy=compute_entropy,
                            temperature=temperature, chunk_tokens=chunk_tokens, prefix_targets=prefix_targets,
                            head_chunks=head_chunks)
        return dict(vars(out))
