"""Hugging Face rollout engine: a KV-cache sampling loop over a batched, left-padded forward.

[choice] Our own decoding loop instead of ``model.generate``, for three reasons:
1. per-row seeds: each prompt samples with its own ``torch.Generator`` seeded from ``seeds[i]``, so a
   row's response depends only on (prompt, seed, config, weights), not on which other prompts share
   the batch or in which order (``generate`` draws every row from one global RNG stream);
2. finished rows leave the batch: when a row emits EOS or a stop string, it is removed from the
   batch and from the KV cache (``DynamicCache.batch_select_indices``), so it stops costing compute;
3. stop strings end a row as soon as they appear, and the sampled token's log-prob comes for free.

Per decoding step, for the B' live rows (symbols of ``agents.engines.base``):
    logits      (B', V)   last position of the forward over [prompt | generated so far]
    logp        (B', V)   = log_softmax(logits / T)        (T = 1 for greedy)
    p_top       (B', V)   = softmax restricted to the smallest set with mass >= top_p, renormalised
    token_i     ~ Categorical(p_top[i]) with generator_i    (argmax when T = 0)
    logprob_i   = logp[i, token_i]
Positions of left-padded rows are ``cumsum(mask) - 1``, so padding never shifts a row's positions.
With ``SamplingConfig.hidden_layer = L`` the prompt's forward also returns ``hidden_states[L]`` at each row's last
prompt token (B, D): the BiGPO state of the row, as the trainer's pass over [prompt | response] computes it.
"""
from __future__ import annotations

import gc
import os
from collections.abc import Iterable, Sequence
from typing import Protocol

import torch

from .base import Generation, RolloutEngine, SamplingConfig, check_generate_args

__all__ = ["HFEngine", "DecodeStep", "HFStep"]


class DecodeStep(Protocol):
    """The decode step of one batch, after its prompt's prefill: one token per live row and step.

    order           : the row order the step works in (None: the batch's own); the engine reorders its rows so
    keep(idx)       : only the live rows ``idx`` (B'',) go on (the others finished)
    step(tokens, positions) -> logits : tokens (B',) just sampled, at positions (B',) -> next-token logits (B', V)

    ``HFStep`` is Hugging Face's own step; ``agents.engines.lean.LeanDecoder`` runs the same arithmetic leaner, and
    with cascade attention over shared prefixes (tested equal: ``tests/agents/test_engines_hf.py``).
    """

    order: list[int] | None

    def keep(self, idx: torch.Tensor) -> None: ...

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor: ...


class HFStep:
    """Hugging Face's decode step, the reference: the model's forward over each live row's new token, with the
    prefill's ``DynamicCache`` (grown by one key and value per step) and the (B', T) attention mask (grown by one
    column per step); finished rows leave the cache (``batch_select_indices``) and the mask."""

    order = None

    def __init__(self, model, cache, attention_mask: torch.Tensor):
        self.model, self.cache, self.attn = model, cache, attention_mask

    def keep(self, idx: torch.Tensor) -> None:
        self.cache.batch_select_indices(idx)
        self.attn = self.attn[idx]

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        self.attn = torch.cat([self.attn, self.attn.new_ones((tokens.shape[0], 1))], dim=1)  # (B', T + 1)
        out = self.model(input_ids=tokens[:, None], attention_mask=self.attn, position_ids=positions[:, None],
                         past_key_values=self.cache, use_cache=True)
        return out.logits[:, -1, :]


class HFEngine(RolloutEngine):
    """Rollouts with a transformers causal LM (always available; the fallback to vLLM).

    model          : a model folder / name (see ``agents.models.resolve_model_path``) or a loaded
                     ``PreTrainedModel`` (e.g. the trainer's actor, then ``tokenizer`` is required)
    dtype          : when loading from a folder: auto | float32 | bfloat16 | float16
    device         : when loading from a folder (default: cuda if available, else cpu)
    max_batch_size : prompts per forward batch (None = all at once); bounds KV-cache memory
    decode         : auto | lean | hf. The prompt always runs through the model's own forward; each decode step
                     runs ``agents.engines.lean`` (the same arithmetic, preallocated KV cache: 1.0-1.3x the
                     generation rate on one CPU thread, results/benchmarks/generation.md) or Hugging Face's forward.
                     auto = lean where the model supports it (``lean_support``), else hf [choice]
    share_prefixes : prompts of one batch that share a prefix (a group's G copies, the task text) compute it once:
                     the prefixes run first, their KV cache is indexed out to the rows, then the rest of each
                     prompt runs (left-padded) at its true positions [choice; same tokens, log-probs within 1e-5]
    cascade        : with share_prefixes and the lean step, the decode steps too read each prefix's keys and values
                     once for all its rows (``agents.engines.lean``, cascade attention) instead of a copy per row
                     [choice; same tokens, log-probs within 1e-5]. An attribute, so benchmarks can switch it
    pack_weights   : auto | on | off: the lean step's weights in oneDNN's packed layout (``agents.engines.lean``,
                     ``LeanWeights``); auto = for float32 models on the CPU of at least 64 MB of weights (SmolLM2,
                     not the tiny models) [choice; log-probs within 1e-5]. Kept between batches until the
                     parameters change. An attribute, so benchmarks can switch it
    """

    name = "hf"

    def __init__(self, model, tokenizer=None, dtype: str = "auto", device: str | None = None,
                 max_batch_size: int | None = None, decode: str = "auto", share_prefixes: bool = True,
                 cascade: bool = True, pack_weights: str = "auto"):
        from agents.models import load_model, load_tokenizer

        if isinstance(model, (str, os.PathLike)):
            device = device or ("cuda" if torch.cuda.is_available() else "cpu")
            self.model = load_model(model, dtype=dtype, device=device)
            self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(model)
        else:
            if tokenizer is None:
                raise ValueError("HFEngine got a model object but no tokenizer; pass tokenizer=... (e.g. "
                                 "agents.models.load_tokenizer(path))")
            self.model, self.tokenizer = model, tokenizer
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"HFEngine max_batch_size={max_batch_size} must be >= 1 or None")
        self.max_batch_size = max_batch_size
        from .lean import lean_support

        if decode not in ("auto", "lean", "hf"):
            raise ValueError(f"HFEngine decode={decode!r} must be auto | lean | hf")
        why = lean_support(self.model)
        if decode == "lean" and why is not None:
            raise ValueError(f"HFEngine decode='lean' cannot serve this model: {why}; use decode='hf' or 'auto'")
        self.decode = "lean" if (decode != "hf" and why is None) else "hf"
        self.share_prefixes = bool(share_prefixes)
        self.cascade = bool(cascade)
        from .lean import PACK_MODES

        if pack_weights not in PACK_MODES:  # here, not at the first batch: a bad value fails before any compute
            raise ValueError(f"HFEngine pack_weights={pack_weights!r} must be one of {PACK_MODES}")
        self.pack_weights = pack_weights
        self._lean_weights = None  # LeanWeights, built at the first lean batch and kept while the parameters hold
        self.device = next(self.model.parameters()).device
        self._home_device = self.device
        self.supports_sleep = self.device.type != "cpu"
        eos = self.model.generation_config.eos_token_id if self.model.generation_config is not None else None
        eos = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
        if self.tokenizer.eos_token_id is not None:
            eos.append(self.tokenizer.eos_token_id)
        if not eos:
            raise ValueError("model has no EOS token (generation_config.eos_token_id and tokenizer.eos_token "
                             "are both unset); generation could only stop at max_tokens")
        self.eos_ids = frozenset(int(e) for e in eos)
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else min(self.eos_ids)
        self.vocab_size = int(self.model.get_input_embeddings().weight.shape[0])

    # ------------------------------------------------------------------ generation
    def generate(self, prompt_token_ids: Sequence[Sequence[int]], sampling: SamplingConfig,
                 seeds: Sequence[int] | None = None) -> list[Generation]:
        seeds = check_generate_args(prompt_token_ids, sampling, seeds, vocab_size=self.vocab_size)
        if not prompt_token_ids:
            return []
        step = self.max_batch_size or len(prompt_token_ids)
        out: list[Generation] = []
        was_training = self.model.training  # a shared trainer module may be in train mode (dropout)
        self.model.eval()
        try:
            for lo in range(0, len(prompt_token_ids), step):
                out.extend(self._generate_batch([list(map(int, p)) for p in prompt_token_ids[lo:lo + step]],
                                                sampling, seeds[lo:lo + step]))
        finally:
            self.model.train(was_training)
        return out

    @torch.inference_mode()
    def _generate_batch(self, prompts: list[list[int]], sampling: SamplingConfig,
                        seeds: list[int]) -> list[Generation]:
        from transformers import DynamicCache

        model, dev = self.model, self.device
        b = len(prompts)
        cache = DynamicCache(config=model.config)
        shared = self._shared_prefixes(prompts) if self.share_prefixes else None
        prefix = None  # the shared prefixes' (keys, values, mask, row_prefix), for a cascade decode step
        if shared is not None:  # [shared prefixes, right-padded | rest of each prompt, left-padded]
            pre_ids, pre_mask, row_prefix, rest = shared
            model(input_ids=pre_ids.to(dev), attention_mask=pre_mask.to(dev), past_key_values=cache, use_cache=True,
                  logits_to_keep=1)
            row_prefix = row_prefix.to(dev)
            if self.decode == "lean" and self.cascade:  # the prefixes' own keys and values (K, ...), before they
                from .lean import _layer_kv  # go to the rows

                kv = [_layer_kv(cache, i) for i in range(len(model.model.layers))]
                prefix = ([k for k, _ in kv], [v for _, v in kv], pre_mask.to(dev), row_prefix)
            cache.batch_select_indices(row_prefix)  # (K, ...) -> (B, ...)
            pre_mask = pre_mask.to(dev)[row_prefix]
            offset = pre_mask.sum(1, keepdim=True)  # (B, 1)
            prompts_now = rest
        else:
            prompts_now = prompts
        width = max(len(p) for p in prompts_now)
        input_ids = torch.full((b, width), self.pad_id, dtype=torch.long)  # (B, T_p) left-padded
        attn = torch.zeros((b, width), dtype=torch.long)
        for i, p in enumerate(prompts_now):
            input_ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            attn[i, width - len(p):] = 1
        input_ids, attn = input_ids.to(dev), attn.to(dev)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)  # (B, T_p)
        if shared is not None:
            pos = pos + offset
            attn = torch.cat([pre_mask, attn], dim=1)  # the mask over [prefix | rest]
        gens = [torch.Generator(device=dev).manual_seed(s) for s in seeds]
        stop_window = max((len(s.encode()) for s in sampling.stop), default=0) + 1

        tokens: list[list[int]] = [[] for _ in range(b)]
        logprobs: list[list[float]] = [[] for _ in range(b)]
        finish: list[str | None] = [None] * b
        stop_hit: list[str | None] = [None] * b
        live = list(range(b))  # original row index of each live row
        want_hidden = sampling.hidden_layer is not None
        out = model(input_ids=input_ids, attention_mask=attn, position_ids=pos, past_key_values=cache,
                    use_cache=True, logits_to_keep=1, output_hidden_states=want_hidden)
        logits = out.logits[:, -1, :]
        hidden = None
        if want_hidden:  # (B, D): the last prompt token (left padding puts it in the last column) at layer L
            states = out.hidden_states
            if not -len(states) <= sampling.hidden_layer < len(states):
                raise ValueError(f"SamplingConfig.hidden_layer={sampling.hidden_layer} is out of range: this "
                                 f"model's hidden_states has {len(states)} entries (layers + 1)")
            hidden = states[sampling.hidden_layer][:, -1, :].float().cpu()
            del states
        del out
        decoder = self._decode_step(cache, attn, sampling.max_tokens, prefix)
        cache = prefix = None
        if decoder.order is not None:  # the step keeps the rows of one prefix adjacent
            idx = torch.tensor(decoder.order, dtype=torch.long, device=dev)
            logits, pos = logits[idx], pos[idx]
            live = [live[j] for j in decoder.order]
        next_pos = pos[:, -1] + 1  # (B',)
        for _ in range(sampling.max_tokens):
            new, lps = self._sample(logits, sampling, [gens[r] for r in live])  # (B',), (B',)
            new_l, lps_l = new.tolist(), lps.tolist()
            keep = []
            for j, r in enumerate(live):
                t = new_l[j]
                tokens[r].append(t)
                logprobs[r].append(lps_l[j])
                if t in self.eos_ids:
                    finish[r] = "stop"
                elif sampling.stop and (s := self._stop_in_tail(tokens[r], sampling.stop, stop_window)):
                    finish[r], stop_hit[r] = "stop", s
                elif len(tokens[r]) >= sampling.max_tokens:
                    finish[r] = "length"
                else:
                    keep.append(j)
            if not keep:
                break
            if len(keep) < len(live):  # finished rows leave the batch and the KV cache
                idx = torch.tensor(keep, dtype=torch.long, device=dev)
                decoder.keep(idx)
                next_pos, new = next_pos[idx], new[idx]
                live = [live[j] for j in keep]
            logits = decoder.step(new, next_pos)
            next_pos = next_pos + 1
        del decoder

        result = []
        for r in range(b):
            text = self.tokenizer.decode(tokens[r], skip_special_tokens=True)
            if stop_hit[r] is not None:
                text = _cut_after_first_stop(text, sampling.stop)
            result.append(Generation(token_ids=tokens[r], text=text, finish_reason=finish[r] or "length",
                                     logprobs=logprobs[r] if sampling.logprobs else None,
                                     stop_string=stop_hit[r], hidden=hidden[r] if hidden is not None else None))
        return result

    def _decode_step(self, cache, attention_mask: torch.Tensor, capacity: int, prefix) -> DecodeStep:
        """The decode step of one batch, taking over its prefill's ``cache`` and (B, T) ``attention_mask``:
        Hugging Face's own (``HFStep``, decode=hf) or the lean one (``agents.engines.lean.LeanDecoder``, which with
        ``prefix``, the shared prefixes' keys and values, reads each prefix once for all its rows: cascade attention).
        ``capacity``: the most tokens a row generates."""
        if self.decode == "hf":
            return HFStep(self.model, cache, attention_mask)
        from .lean import LeanDecoder

        step = LeanDecoder(self.model, weights=self.lean_weights())
        step.start(cache, attention_mask, capacity=capacity, prefix=prefix)
        return step

    @staticmethod
    def _shared_prefixes(prompts: list[list[int]]):
        """(prefix ids (K, L) right-padded, prefix mask (K, L), prefix of each row (B,), the rest of each prompt)
        when the rows share prompt prefixes worth computing once (``agents.prefixes``), else None."""
        from agents.prefixes import plan_shared_prefixes, prefix_tensors

        plan = plan_shared_prefixes(prompts)
        if plan is None:
            return None
        prefixes, row_prefix = plan
        ids, mask = prefix_tensors(prefixes)
        rest = [p[len(prefixes[k]):] for p, k in zip(prompts, row_prefix)]
        return ids, mask, torch.tensor(row_prefix, dtype=torch.long), rest

    @staticmethod
    def _sample(logits: torch.Tensor, sampling: SamplingConfig,
                gens: list[torch.Generator]) -> tuple[torch.Tensor, torch.Tensor]:
        """logits (B', V) -> tokens LongTensor (B',), log-probs FloatTensor (B',)."""
        logits = logits.float()
        if sampling.greedy:
            logp = torch.log_softmax(logits, dim=-1)
            tok = logits.argmax(dim=-1)
        else:
            logp = torch.log_softmax(logits / sampling.temperature, dim=-1)  # (B', V)
            probs = logp.exp()
            if sampling.top_p < 1.0:
                p_sorted, order = probs.sort(dim=-1, descending=True)
                mass_before = p_sorted.cumsum(dim=-1) - p_sorted
                p_sorted = p_sorted.masked_fill(mass_before >= sampling.top_p, 0.0)
                probs = torch.zeros_like(probs).scatter_(-1, order, p_sorted)
            if not bool(torch.isfinite(probs).all()):
                bad = sorted({int(j) for j in (~torch.isfinite(probs)).nonzero()[:, 0]})
                raise FloatingPointError(f"HFEngine: NaN or Inf in the next-token distribution of batch rows {bad} "
                                         "(the model's logits): check the weights (a diverged update?)")
            # one generator per row: a row's draw never depends on the other rows of the batch. The draw is
            # torch.multinomial(p, 1)'s own, batched: q ~ Exp(1) per entry from the row's generator, token =
            # argmax(p / q) (the exponential race); the same tokens, without its per-row checks and syncs
            q = torch.empty_like(probs)
            for j, g in enumerate(gens):
                q[j].exponential_(generator=g)
            tok = (probs / q).argmax(dim=-1)
        return tok, logp.gather(-1, tok[:, None])[:, 0]

    def _stop_in_tail(self, ids: list[int], stops: tuple[str, ...], window: int) -> str | None:
        tail = self.tokenizer.decode(ids[-window:], skip_special_tokens=True)
        for s in stops:
            if s in tail:
                return s
        return None

    # ------------------------------------------------------------------ weights and memory
    def lean_weights(self):
        """The lean step's ``LeanWeights`` (kept between batches; made anew when ``pack_weights`` was switched)."""
        from .lean import LeanWeights

        w = self._lean_weights
        if w is None or w.requested != self.pack_weights:
            w = self._lean_weights = LeanWeights(self.model, pack=self.pack_weights)
        return w

    @torch.no_grad()
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Copy tensors into the model's parameters/buffers in place (dtype and device converted)."""
        self._lean_weights = None  # the lean step's packed copy is rebuilt from the new values
        targets = dict(self.model.named_parameters(remove_duplicate=False))
        targets.update(dict(self.model.named_buffers(remove_duplicate=False)))
        n = 0
        for name, tensor in named_tensors:
            dst = targets.get(name)
            if dst is None:
                hint = " (strip the 'module.' prefix of the DeepSpeed wrapper)" if name.startswith("module.") else ""
                raise KeyError(f"update_weights: {name!r} is not a parameter of the engine's model{hint}; "
                               f"expected names like {next(iter(targets))!r}")
            if tuple(dst.shape) != tuple(tensor.shape):
                raise ValueError(f"update_weights: {name!r} has shape {tuple(tensor.shape)}, the model's is "
                                 f"{tuple(dst.shape)}")
            dst.copy_(tensor.detach().to(device=dst.device, dtype=dst.dtype))
            n += 1
        if n == 0:
            raise ValueError("update_weights got no tensors")
        return n

    def sleep(self) -> None:
        """Move the model to CPU memory (accelerator only; no-op on CPU)."""
        if self.supports_sleep and self.device.type != "cpu":
            self.model.to("cpu")
            self.device = torch.device("cpu")
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

    def wake(self) -> None:
        if self.supports_sleep and self.device != self._home_device:
            self.model.to(self._home_device)
            self.device = self._home_device

    def close(self) -> None:
        self.model = None
        gc.collect()


def _cut_after_first_stop(text: str, stops: tuple[str, ...]) -> str:
    """Text up to and including the stop string that ends first."""
    ends = [text.find(s) + len(s) for s in stops if s in text]
    return text[: min(ends)] if ends else text
