"""Hidden states of several layers at the last prompt token, from one forward pass (or from none).

BiGPO's state [paper]: ``h_i = H^{(L)}_{i, p_i - 1}``, the layer-L state of the LAST PROMPT TOKEN, Hugging Face's
``hidden_states[L]`` convention (``trainer.forward.hidden_state_module``: entry 0 = embeddings, negative indices
from the end, -1 = the final norm's output). The trainer captures one layer in its old-log-prob pass over
prompt+response; for the geometry study we want several layers at once, on CPU, without a second pass:

* ``capture_prompt_states(model, prompt_ids, layers)``: one prompt-only forward per micro-batch with one forward
  hook per layer. The model is causal, so the last prompt token's state does not depend on the response: this
  equals ``trainer.forward.policy_forward(..., hidden_layer=L).hidden`` on prompt+response rows (tested to float
  rounding) and costs a prompt-only forward for ALL layers together.
* ``CapturingEngine(hf_engine, layers)``: wraps the Hugging Face rollout engine; the same hooks record the last
  column of the left-padded PREFILL of every generation batch (left padding puts every row's last prompt token
  in the last column), so the rollout's own forward yields the states and no extra pass is needed at all
  [choice: the cheapest capture on CPU, where the prefill dominates the cost]. ``hidden_for(batch)`` returns
  them in a ``RolloutBatch``'s row order (matched by prompt token ids).

``CapturingEngine`` can also script the executed action of some rows (``ActionMix``): with probability
``expert`` the environment's expert action, with probability ``random`` a uniformly drawn admissible action
(envs that list them), else the model's own sample. The draw is a function of the row's sampling seed, so a
fixed seed fixes it. Scripted rows get the response ``<think>(scripted: expert)</think>\\n<action>a</action>``
(a valid protocol response, so PACE's action key is the executed action) and their hidden states come from
``capture_prompt_states`` on their prompts (the model still reads every prompt). This gives rollouts with the
state variety of a policy that makes progress while the hidden states stay the model's own.

Symbols: N step rows, B rows of one forward, T_p prompt tokens, D hidden size.
"""
from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from agents.engines.base import Generation, RolloutEngine, SamplingConfig
from trainer.forward import causal_lm_of, hidden_state_module

__all__ = ["capture_prompt_states", "CapturingEngine", "ActionMix", "SCRIPTED_THINK"]

SCRIPTED_THINK = "<think>(scripted: {source})</think>\n<action>{action}</action>"


def _layer_hooks(model: torch.nn.Module, layers: Sequence[int], record):
    """Register ``record(layer, out_tensor)`` as a forward hook on the module of each layer; returns handles."""
    handles = []
    for layer in layers:
        module, _ = hidden_state_module(model, int(layer))

        def hook(_mod, _inp, out, layer=layer):
            h = out[0] if isinstance(out, (tuple, list)) else out  # (B, T, D)
            record(layer, h)

        handles.append(module.register_forward_hook(hook))
    return handles


@torch.inference_mode()
def capture_prompt_states(model: torch.nn.Module, prompt_ids: Sequence, layers: Sequence[int], batch_size: int = 8,
                          pad_id: int = 0) -> dict[int, torch.Tensor]:
    """``{layer: FloatTensor (N, D)}``: the state of each prompt's last token at each layer, one forward per
    micro-batch for all layers.

    prompt_ids: N token-id sequences (lists or LongTensors (T_p,)), each non-empty. Rows are right-padded and
    batched in order of length (less padding), results are returned in the input order. fp32 on CPU.
    """
    layers = [int(x) for x in layers]
    if not layers:
        raise ValueError("capture_prompt_states: no layers given (e.g. layers=[-8, -4, -12])")
    if batch_size < 1:
        raise ValueError(f"capture_prompt_states: batch_size={batch_size} must be >= 1")
    lm = causal_lm_of(model)
    for layer in layers:
        hidden_state_module(lm, layer)  # validates the index with a clear message
    seqs = [torch.as_tensor(p, dtype=torch.long).flatten() for p in prompt_ids]
    n = len(seqs)
    lens = torch.tensor([int(s.numel()) for s in seqs], dtype=torch.long)
    if n and bool((lens == 0).any()):
        bad = torch.nonzero(lens == 0).flatten()[:5].tolist()
        raise ValueError(f"capture_prompt_states: prompts {bad} are empty; every row needs at least one token")
    device = next(lm.parameters()).device
    decoder = lm.get_decoder()
    out: dict[int, torch.Tensor | None] = {layer: None for layer in layers}
    if n == 0:
        d = int(lm.config.hidden_size)
        return {layer: torch.zeros(0, d) for layer in layers}
    order = torch.argsort(lens, stable=True)  # (N,) shortest first
    current: dict[str, torch.Tensor] = {}

    def record(layer, h):
        current[layer] = h[current["rows"], current["last"]].detach().float().cpu()  # (B, D)

    was_training = lm.training
    lm.eval()
    handles = _layer_hooks(lm, layers, record)
    try:
        for lo in range(0, n, batch_size):
            idx = order[lo:lo + batch_size]  # (B,)
            width = int(lens[idx].max())
            ids = torch.full((idx.numel(), width), int(pad_id), dtype=torch.long)
            att = torch.zeros((idx.numel(), width), dtype=torch.long)
            for j, i in enumerate(idx.tolist()):
                ids[j, : lens[i]] = seqs[i]
                att[j, : lens[i]] = 1
            current["rows"] = torch.arange(idx.numel(), device=device)
            current["last"] = (lens[idx] - 1).to(device)
            decoder(input_ids=ids.to(device), attention_mask=att.to(device), use_cache=False)
            for layer in layers:
                h = current.pop(layer)
                if out[layer] is None:
                    out[layer] = torch.empty((n, h.shape[1]), dtype=torch.float32)
                out[layer][idx] = h
    finally:
        for hd in handles:
            hd.remove()
        lm.train(was_training)
    return {layer: t for layer, t in out.items()}


@dataclass(frozen=True)
class ActionMix:
    """Scripted executed actions [choice, for the geometry study only]: probability of the env's expert
    action and of a uniformly random admissible action; the model's own sample otherwise."""

    expert: float = 0.0
    random: float = 0.0

    def __post_init__(self):
        for name in ("expert", "random"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and 0.0 <= v <= 1.0):
                raise ValueError(f"ActionMix.{name}={v!r} must be a probability in [0, 1]")
        if self.expert + self.random > 1.0 + 1e-12:
            raise ValueError(f"ActionMix: expert + random = {self.expert + self.random} exceeds 1")

    @property
    def active(self) -> bool:
        return self.expert > 0 or self.random > 0

    def source(self, seed: int) -> str:
        """``model`` | ``expert`` | ``random`` for a row, from its sampling seed only."""
        u = float(np.random.default_rng([int(seed) & 0xFFFFFFFF, 0x4D4958]).random())
        if u < self.expert:
            return "expert"
        if u < self.expert + self.random:
            return "random"
        return "model"


class CapturingEngine(RolloutEngine):
    """A Hugging Face engine that records the last-prompt-token states of ``layers`` in each generation's
    prefill (see the module docstring), and optionally scripts some executed actions (``mix``).

    engine: an ``agents.engines.HFEngine`` (its ``model`` is hooked during ``generate`` only).
    pool: the ``envs.pool.EnvPool`` the rollout steps; needed only when ``mix`` is active (expert actions and
        admissible lists are read from its envs). With a mix, ``generate`` must be called, as
        ``agents.rollout.collect`` does, with the prompts of exactly the live envs in ascending slot order.
    scripted_batch_size: micro-batch of the prompt-only forward of scripted rows.
    """

    name = "hf-capture"

    def __init__(self, engine, layers: Sequence[int], pool=None, mix: ActionMix | None = None,
                 scripted_batch_size: int = 8):
        if not hasattr(engine, "model") or not hasattr(engine, "_generate_batch"):
            raise TypeError(f"CapturingEngine wraps the Hugging Face engine (agents.engines.HFEngine), got "
                            f"{type(engine).__name__}; vLLM does not expose its layers' states")
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.layers = [int(x) for x in layers]
        if not self.layers:
            raise ValueError("CapturingEngine: no layers given (e.g. [-8, -4, -12])")
        for layer in self.layers:
            hidden_state_module(engine.model, layer)  # validates the index
        self.mix = mix or ActionMix()
        if self.mix.active and pool is None:
            raise ValueError("CapturingEngine: an action mix needs the EnvPool (pool=...) to ask its envs for expert "
                             "and admissible actions")
        self.pool = pool
        self.scripted_batch_size = scripted_batch_size
        self.supports_sleep = False
        # prompt ids -> queue of (states {layer: (D,)}, source); rows are matched by prompt content
        self._store: dict[tuple[int, ...], deque] = defaultdict(deque)
        self.counts = {"model": 0, "expert": 0, "random": 0}

    # ------------------------------------------------------------------ generation
    def generate(self, prompt_token_ids: Sequence[Sequence[int]], sampling: SamplingConfig,
                 seeds: Sequence[int] | None = None) -> list[Generation]:
        prompts = [list(map(int, p)) for p in prompt_token_ids]
        n = len(prompts)
        if n == 0:
            return []
        if seeds is None:
            seeds = [int(sampling.seed or 0) + i for i in range(n)]
        sources = [self.mix.source(s) for s in seeds] if self.mix.active else ["model"] * n
        scripted = [i for i, s in enumerate(sources) if s != "model"]
        actions: dict[int, str] = {}
        if scripted:
            slots = self.pool.live_indices()
            if len(slots) != n:
                raise RuntimeError(f"CapturingEngine: {n} prompts but {len(slots)} live envs in the pool; an action "
                                   "mix needs the prompts of exactly the live envs in slot order "
                                   "(agents.rollout.collect)")
            want_expert = [i for i in scripted if sources[i] == "expert"]
            want_random = [i for i in scripted if sources[i] == "random"]
            if want_expert:
                for i, a in zip(want_expert, self.pool.expert_actions([slots[i] for i in want_expert])):
                    actions[i] = str(a)
            if want_random:
                infos = self.pool.call([slots[i] for i in want_random], "_current_info")
                for i, info in zip(want_random, infos):
                    adm = [a for a in (info.get("admissible_actions") or []) if a]
                    if not adm:  # no list (TextCraft): the model acts
                        sources[i] = "model"
                        continue
                    rng = np.random.default_rng([int(seeds[i]) & 0xFFFFFFFF, 0x524E44])
                    actions[i] = str(adm[int(rng.integers(len(adm)))])
            scripted = [i for i in scripted if sources[i] != "model"]
        modelled = [i for i in range(n) if sources[i] == "model"]
        states: list[dict[int, torch.Tensor] | None] = [None] * n
        gens: list[Generation | None] = [None] * n
        if modelled:
            got, sts = self._generate_capturing([prompts[i] for i in modelled], sampling, [seeds[i] for i in modelled])
            for i, g, st in zip(modelled, got, sts):
                gens[i], states[i] = g, st
        if scripted:
            caps = capture_prompt_states(self.engine.model, [prompts[i] for i in scripted], self.layers,
                                         batch_size=self.scripted_batch_size, pad_id=self.engine.pad_id)
            for j, i in enumerate(scripted):
                text = SCRIPTED_THINK.format(source=sources[i], action=actions[i])
                ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
                gens[i] = Generation(token_ids=list(ids), text=text, finish_reason="stop", logprobs=None)
                states[i] = {layer: caps[layer][j] for layer in self.layers}
        for i in range(n):
            self._store[tuple(prompts[i])].append((states[i], sources[i]))
            self.counts[sources[i]] += 1
        return gens  # type: ignore[return-value]

    def _generate_capturing(self, prompts: list[list[int]], sampling: SamplingConfig, seeds: list[int]):
        """Generate with the wrapped engine; hooks record the last column of each batch's prefill."""
        chunks: dict[int, list[torch.Tensor]] = {layer: [] for layer in self.layers}

        def record(layer, h):
            if h.shape[1] > 1:  # the prefill (decode steps feed one token per row)
                chunks[layer].append(h[:, -1].detach().float().cpu())  # (B, D): left padding -> last column

        if min(len(p) for p in prompts) < 2:
            raise ValueError("CapturingEngine: a prompt of fewer than 2 tokens cannot be told from a decode step")
        handles = _layer_hooks(self.engine.model, self.layers, record)
        # one prefill forward over the whole prompts: a shared-prefix prefill would run two (agents/engines/hf.py)
        shared = getattr(self.engine, "share_prefixes", False)
        self.engine.share_prefixes = False
        try:
            gens = self.engine.generate(prompts, sampling, seeds=seeds)
        finally:
            self.engine.share_prefixes = shared
            for hd in handles:
                hd.remove()
        per_layer = {layer: torch.cat(c) if c else torch.zeros(0) for layer, c in chunks.items()}
        for layer, t in per_layer.items():
            if t.shape[0] != len(prompts):
                raise RuntimeError(f"CapturingEngine: captured {t.shape[0]} prefill states at layer {layer} for "
                                   f"{len(prompts)} prompts (did the engine batch differently?)")
        return gens, [{layer: per_layer[layer][i] for layer in self.layers} for i in range(len(prompts))]

    # ------------------------------------------------------------------ read-out
    def hidden_for(self, batch) -> tuple[dict[int, torch.Tensor], list[str]]:
        """``({layer: FloatTensor (N, D)}, sources (N))`` in the row order of ``batch`` (a ``RolloutBatch``),
        matched by prompt token ids; consumes the records. Raises if a row's prompt was never generated here."""
        rows: list[dict[int, torch.Tensor]] = []
        sources: list[str] = []
        for i, p in enumerate(batch.prompt_ids):
            q = self._store.get(tuple(int(x) for x in p.tolist()))
            if not q:
                raise KeyError(f"CapturingEngine.hidden_for: row {i} (group {int(batch.group_id[i])}, step "
                               f"{int(batch.step[i])}) has a prompt this engine never generated for")
            st, src = q.popleft()
            rows.append(st)
            sources.append(src)
        hidden = {layer: torch.stack([r[layer] for r in rows]) for layer in self.layers}
        return hidden, sources

    def clear(self) -> None:
        self._store.clear()

    # ------------------------------------------------------------------ the rest of the engine interface
    def update_weights(self, named_tensors) -> int:
        return self.engine.update_weights(named_tensors)

    def sleep(self) -> None:
        self.engine.sleep()

    def wake(self) -> None:
        self.engine.wake()

    def close(self) -> None:
        self.engine.close()
