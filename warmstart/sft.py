"""SFT warm start: behaviour cloning on expert trajectories, DAgger aggregation, and policy evaluation.

Symbols: N step rows, T tokens (prompt + response, padded), T_r response tokens (padded), D hidden size.

Everything here uses the RL prompt format unchanged (docs/protocol.md, ``agents.prompts``): one user message per step
built by the env's ``PromptBuilder`` from a ``Transcript``, the tokenizer's chat template with the generation
prompt appended; the response is ``<think>RATIONALE</think><action>EXPERT ACTION</action>`` followed by the EOS
token. Pieces:

* **Rationales** [choice]: a short scratchpad in the think tags that restates what the expert's next action
  depends on, written only from what the prompt shows; built beside the experts, in ``envs.rationale``
  (``rationale`` style ``trace | goal | none``).

* **Rows** (``SFTRow``): a ``Transcript`` snapshot (what the agent has seen), the response text, provenance.
  Rendering to token ids happens late (``encode_rows``), with any tokenizer and ``PromptConfig``, so the same
  rows train the tokenizer (``rows_corpus``) and the model.
* **Loss** (``sft_loss``): negative log-likelihood of the response tokens only, token-mean over the batch:
  ``L = -(1 / sum_i |r_i|) * sum_i sum_{t < |r_i|} log pi(r_{i,t} | prompt_i, r_{i,<t})``; prompt tokens are
  never targets (``trainer.forward.policy_forward`` only scores response positions).
* **Learner** (``SFTLearner``): the trainer's DeepSpeed ``PPOActor`` (ZeRO on CPU with gloo, as everywhere),
  without reference model, with an SFT learning-rate schedule (linear warm-up, then constant | linear | cosine
  decay) [choice].
* **Acting**: ``play`` and ``evaluate`` play through ``agents.rollout.play``, the one loop RL rollouts and RL
  evaluation use (same prompts, cut, projection, invalid-action handling and per-sample seeds), with a per-turn
  hook for DAgger; ``acting`` builds their ``agents.rollout.Agent`` (the model behind the HF engine, a pool).
* **DAgger** (``play`` with ``PlayOptions(label_style=...)``): roll the current model out with the Hugging Face
  engine, label every state it reaches with the expert (action + rationale for the model's own prompt),
  aggregate, retrain [Ross et al. 2011]. ``expert_mix`` (beta) executes the expert's action instead of the model's with
  that probability (0 = pure DAgger after the first round).
* **Evaluation** (``evaluate``): the fixed, seeded task list of a split (``envs.pool.eval_tasks``), sampled at
  the evaluation temperature (protocol: 0.4) with RL evaluation's per-sample seeds, or greedy.

The one-command pipeline with caching lives in ``experiments/warmstart.py``.
"""
from __future__ import annotations

import hashlib
import json
import math
import random
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from common.config_checks import check_choices
from warmstart.config import BATCH_BY as BATCH_BY  # re-exported: sft.BATCH_BY is the settings' tuple
from warmstart.config import BatchBy

__all__ = [
    "SFTRow",
    "EncodedRows",
    "collect_expert_rows",
    "encode_response",
    "encode_rows",
    "rows_corpus",
    "save_rows",
    "load_rows",
    "RENAME_POOLS",
    "rename_rows",
    "sft_loss",
    "SFTLearner",
    "sft_trainer_config",
    "SFTSchedule",
    "train_sft",
    "EpisodeResult",
    "PlayResult",
    "PlayOptions",
    "acting",
    "play_sampling",
    "play",
    "PLAY_CONVENTIONS",
    "evaluate",
    "episode_seed",
]

# ==================================================================================================== rows
@dataclass
class SFTRow:
    """One training step row before tokenisation.

    transcript: the agent's view of the episode at this step (``agents.prompts.Transcript`` as a dict)
    response  : target text ``<think>...</think><action>...</action>``
    action    : the expert action inside it
    task      : (split, task index); seed: env seed of the episode; step: turn index
    source    : "expert" (expert-driven episode) | "dagger<k>" (state reached by the model in round k)
    """

    transcript: dict
    response: str
    action: str
    task: tuple[str, int]
    seed: int
    step: int
    source: str = "expert"

    def to_json(self) -> dict:
        d = asdict(self)
        d["task"] = list(self.task)
        return d

    @classmethod
    def from_json(cls, d: dict) -> SFTRow:
        d = dict(d)
        d["task"] = (str(d["task"][0]), int(d["task"][1]))
        tr = dict(d["transcript"])
        tr["pairs"] = [tuple(p) for p in tr.get("pairs", [])]
        d["transcript"] = tr
        return cls(**d)


def _snapshot(transcript) -> dict:
    d = asdict(transcript)
    d["pairs"] = [list(p) for p in transcript.pairs]
    return d


def _transcript(d: dict):
    from agents.prompts import Transcript

    d = dict(d)
    d["pairs"] = [tuple(p) for p in d.get("pairs", [])]
    return Transcript(**d)


def _textcraft_words() -> Sequence[str]:
    from envs.textcraft import TextCraftWorld

    return TextCraftWorld.shared().name_words


#: env name -> the words ``rename_rows`` may permute (item-name words that no game message uses)
RENAME_POOLS: dict[str, Callable[[], Sequence[str]]] = {"textcraft": _textcraft_words}
_WORD_RE = re.compile(r"[a-z]+")


def _map_strings(obj: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: _map_strings(v, fn) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_strings(v, fn) for v in obj)
    return obj


def rename_rows(rows: Sequence[SFTRow], env_name: str, copies: int, seed: int = 0) -> list[SFTRow]:
    """``copies`` renamed copies of every row: each copy applies its own random permutation of the env's
    item-name words (``RENAME_POOLS``) to the whole row (recipes, goal, inventory, past observations and actions,
    rationale and action) [choice].

    A permutation keeps every recipe list consistent (distinct names stay distinct, "oak planks" still ends in
    the tag word "planks"), so the expert's action is still right for the renamed prompt, but a goal's name no
    longer predicts its recipe: the model has to read the recipe lines instead of recalling the training goals,
    which is what transfers to held-out goals. Returns only the copies (source ``<source>+rename``), in row
    order; seeded by ``seed`` and the row's position.
    """
    if copies < 0:
        raise ValueError(f"rename_rows: copies={copies!r} must be >= 0")
    if copies == 0 or not rows:
        return []
    if env_name not in RENAME_POOLS:
        raise ValueError(f"rename_rows: no renaming pool for env {env_name!r} (known: {sorted(RENAME_POOLS)}); "
                         "set the warm start's rename_copies to 0")
    pool = list(RENAME_POOLS[env_name]())
    out: list[SFTRow] = []
    for i, row in enumerate(rows):
        for c in range(copies):
            perm = pool[:]
            random.Random(episode_seed(seed, i, c)).shuffle(perm)
            mapping = dict(zip(pool, perm))

            def fn(text: str, mapping=mapping) -> str:
                return _WORD_RE.sub(lambda m: mapping.get(m.group(0), m.group(0)), text)

            out.append(SFTRow(_map_strings(row.transcript, fn), fn(row.response), fn(row.action), row.task,
                              row.seed, row.step, f"{row.source}+rename"))
    return out


def save_rows(rows: Sequence[SFTRow], path: str | Path) -> Path:
    """Write rows as JSON lines (atomically: a temporary file renamed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r.to_json()) + "\n")
    tmp.replace(path)
    return path


def load_rows(path: str | Path) -> list[SFTRow]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SFT rows file {path} does not exist; `python -m experiments.warmstart` writes it")
    with path.open(encoding="utf-8") as f:
        return [SFTRow.from_json(json.loads(line)) for line in f if line.strip()]


def _make_env(env_id: str, env_kwargs: dict | None):
    from envs.pool import make_env

    return make_env(env_id, env_kwargs)


def collect_expert_rows(env_id: str, tasks: Sequence, *, env_kwargs: dict | None = None, style: str = "trace",
                        progress: bool = False, desc: str = "expert") -> list[SFTRow]:
    """Play ``tasks`` (``envs.pool.Task``) with the env's expert (``envs.rationale.expert_episode``: no model
    plays, so no acting loop is needed); one ``SFTRow`` per step.

    Episodes the expert does not win are dropped (counted in the progress bar's postfix) [choice].
    """
    from agents.prompts import Transcript
    from envs.rationale import expert_episode

    env = _make_env(env_id, env_kwargs)
    rows: list[SFTRow] = []
    lost = 0
    bar = _bar(len(tasks), desc, progress)
    try:
        for task in tasks:
            ep = expert_episode(env, task.reset_kwargs(), style)
            if ep.won:
                tr = Transcript.start(ep.obs, ep.info)
                for t, st in enumerate(ep.steps):
                    rows.append(SFTRow(_snapshot(tr), st.response, st.action, task.task_id, int(task.seed), t))
                    tr.record(st.action, st.obs, st.info)
            else:
                lost += 1
            bar.update(1)
            bar.set_postfix(rows=len(rows), lost=lost, refresh=False)
    finally:
        bar.close()
        env.close()
    return rows


class _NoBar:
    n = 0

    def update(self, k=1):
        self.n += k

    def set_postfix(self, *a, **k):
        pass

    def set_description(self, *a, **k):
        pass

    def close(self):
        pass


def _bar(total: int, desc: str, enabled: bool):
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, dynamic_ncols=True, mininterval=1.0)


# ============================================================================================== tokenising
def encode_response(tokenizer, response: str, add_eos: bool = True) -> list[int]:
    """Token ids of a target response (no special tokens of its own), then EOS when ``add_eos``.

    The response is tokenised on its own, as the model generates it after the prompt [choice]; EOS after
    ``</action>`` teaches the model to end its turn even when the engine does not stop at the action tag.
    """
    ids = [int(i) for i in tokenizer(response, add_special_tokens=False).input_ids]
    if add_eos:
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no EOS token; pass add_eos=False or set tokenizer.eos_token")
        ids.append(int(tokenizer.eos_token_id))
    return ids


@dataclass
class EncodedRows:
    """Token ids of N rows. prompt_ids / response_ids: lists of N LongTensor (T_p,) / (T_r,); episode: N ints
    (rows of one episode share the id)."""

    prompt_ids: list[torch.Tensor]
    response_ids: list[torch.Tensor]
    episode: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.prompt_ids)

    @property
    def num_tokens(self) -> int:
        return sum(int(p.numel() + r.numel()) for p, r in zip(self.prompt_ids, self.response_ids))

    @property
    def num_response_tokens(self) -> int:
        return sum(int(r.numel()) for r in self.response_ids)


def _bound(prompt_config) -> int:
    """The hard prompt bound that goes with a ``PromptConfig``: its token bound, else none in practice."""
    return int(prompt_config.max_tokens) if getattr(prompt_config, "max_tokens", None) else 1 << 30


def encode_rows(rows: Sequence[SFTRow], tokenizer, env_name: str, prompt_config=None, *,
                progress: bool = False) -> EncodedRows:
    """Render each row's prompt exactly as a rollout does (``agents.rollout.encode_transcript``: builder +
    ``prompt_config`` + chat template; default ``agents.rollout.prompt_config_for(tokenizer, 2048)``) and tokenise
    it with its response."""
    from agents.prompts import get_prompt_builder
    from agents.rollout import encode_transcript, prompt_config_for

    builder = get_prompt_builder(env_name)
    cfg = prompt_config if prompt_config is not None else prompt_config_for(tokenizer, 2048)
    prompts, responses, episodes = [], [], []
    ids: dict[tuple, int] = {}
    bar = _bar(len(rows), "tokenise", progress)
    for r in rows:
        p_ids, _cut = encode_transcript(tokenizer, builder, _transcript(r.transcript), cfg, _bound(cfg))
        prompts.append(torch.tensor(p_ids, dtype=torch.long))
        responses.append(torch.tensor(encode_response(tokenizer, r.response), dtype=torch.long))
        episodes.append(ids.setdefault((r.source, tuple(r.task), r.seed), len(ids)))
        bar.update(1)
    bar.close()
    return EncodedRows(prompts, responses, episodes)


def rows_corpus(rows: Iterable[SFTRow], env_name: str, prompt_config=None) -> Iterator[str]:
    """Tokenizer-training texts from rows: each rendered prompt message and each response (the real text a
    model reads and writes; the chat template's special tokens are added by the tokenizer itself). Without a
    ``prompt_config`` (no tokenizer exists yet) the message is bounded in characters, with 2 past turns."""
    from agents.prompts import PromptConfig, get_prompt_builder

    builder = get_prompt_builder(env_name)
    cfg = prompt_config if prompt_config is not None else PromptConfig(history_length=2)
    for r in rows:
        yield builder.build(_transcript(r.transcript), cfg)
        yield r.response


# ==================================================================================================== loss
def sft_loss(logprobs: torch.Tensor, mask: torch.Tensor, total_tokens: float | torch.Tensor | None = None
             ) -> torch.Tensor:
    """Token-mean negative log-likelihood of response tokens.

    logprobs     : FloatTensor (N, T_r)  log pi(r_t | prompt, r_<t) of response tokens (``policy_forward``)
    mask         : BoolTensor (N, T_r)   True on real response tokens
    total_tokens : denominator (the whole mini-batch's response tokens when called per micro-batch);
                   default ``mask.sum()``
    returns      : scalar  -sum(logprobs * mask) / total_tokens
    """
    mask = mask.to(logprobs.device).bool()
    denom = mask.sum() if total_tokens is None else torch.as_tensor(total_tokens, dtype=torch.float32)
    denom = torch.clamp(torch.as_tensor(denom, dtype=torch.float32, device=logprobs.device), min=1.0)
    return -(logprobs * mask).sum() / denom


# ================================================================================================= learner
def _ppo_actor_cls():
    from trainer.ppo_actor import PPOActor

    return PPOActor


def sft_trainer_config(lr: float = 1e-3, batch_rows: int = 32, micro_batch_rows: int = 32,
                       weight_decay: float = 0.01, grad_clip: float = 1.0, warmup_steps: int = 20,
                       zero_stage: int = 2, precision: str = "auto"):
    """A ``TrainerConfig`` for SFT: no reference model (no KL), AdamW, DeepSpeed ZeRO ``zero_stage``."""
    from trainer.config import TrainerConfig

    return TrainerConfig(lr=lr, mini_batch_rows=batch_rows, micro_batch_rows=min(micro_batch_rows, batch_rows),
                         weight_decay=weight_decay, grad_clip=grad_clip, warmup_steps=warmup_steps,
                         zero_stage=zero_stage, precision=precision, use_kl_loss=False, entropy_coef=0.0,
                         logprob_batch_rows=max(batch_rows, 1))


class SFTLearner:
    """Behaviour cloning through the trainer's DeepSpeed ``PPOActor`` (no reference model).

    model: a Hugging Face causal LM; cfg: ``TrainerConfig`` (``sft_trainer_config``); ``total_steps`` and
    ``schedule`` (constant | linear | cosine, after ``cfg.warmup_steps`` of linear warm-up) set the learning
    rate per optimizer step [choice]; ``min_lr_ratio``: the floor of the decay as a fraction of ``cfg.lr``.

    ``prompt_weight`` > 0 adds next-token prediction of the prompt tokens with that weight (the denominator stays
    the number of response tokens) [choice; default 0 = response tokens only, as SFT of an instruct model does].
    It gives a model trained from scratch a learning signal at every position of the ~10x longer prompt for no
    extra forward or backward pass (only the LM head runs on more positions).

    ``share_prompt_loss`` (with ``prompt_weight`` > 0 and ``cfg.prefix_sharing``): rows of a micro-batch that share
    a prompt prefix compute it once (``trainer.forward.pack_rows_shared(score_prompt=True)``); its tokens'
    log-probs, the same for every row that holds it, enter the loss once per row (weight ``prompt_weight`` x rows),
    so the loss and its gradient equal the unshared pass's to float tolerance (tests/warmstart/test_sft_sharing.py)
    [choice: off by default, because the float order, and so a warm start's weights, change]. Without a prompt loss,
    rows share prefixes whenever ``cfg.prefix_sharing`` is on, as in the RL update.
    """

    def __init__(self, model, cfg, *, device: str = "cpu", schedule: str = "cosine", total_steps: int = 0,
                 min_lr_ratio: float = 0.1, prompt_weight: float = 0.0, share_prompt_loss: bool = False):
        from trainer.config import ModelConfig

        if schedule not in ("constant", "linear", "cosine"):
            raise ValueError(f"SFT schedule={schedule!r} must be constant | linear | cosine")
        if not (isinstance(prompt_weight, (int, float)) and 0.0 <= prompt_weight <= 1.0):
            raise ValueError(f"SFT prompt_weight={prompt_weight!r} must lie in [0, 1] (0 = response tokens only)")
        if cfg.use_kl_loss:
            raise ValueError("SFT needs trainer.use_kl_loss=false (no reference model); use sft_trainer_config()")
        actor_cls = _ppo_actor_cls()
        sched = self

        class _Actor(actor_cls):
            def lr_at(self, step: int) -> float:  # the SFT schedule instead of PPO's constant rate
                return sched.lr_at(step)

        self.cfg = cfg
        self.schedule = schedule
        self.total_steps = int(total_steps)
        self.min_lr_ratio = float(min_lr_ratio)
        self.prompt_weight = float(prompt_weight)
        self.share_prompt_loss = bool(share_prompt_loss)
        self.actor = _Actor(model, cfg, model_cfg=ModelConfig(path="sft", hidden_layer=-1), temperature=1.0,
                            device=device)

    def lr_at(self, step: int) -> float:
        """Learning rate of optimizer step ``step`` (0-based): warm-up, then the decay of ``schedule``."""
        lr, w = float(self.cfg.lr), int(self.cfg.warmup_steps)
        if w > 0 and step < w:
            return lr * (step + 1) / w
        if self.schedule == "constant" or self.total_steps <= w:
            return lr
        frac = min(1.0, (step - w) / max(1, self.total_steps - w))
        lo = lr * self.min_lr_ratio
        if self.schedule == "linear":
            return lo + (lr - lo) * (1.0 - frac)
        return lo + (lr - lo) * 0.5 * (1.0 + math.cos(math.pi * frac))

    @property
    def lm(self):
        return self.actor.lm

    def _micro_losses(self, prompt_ids, response_ids, pad_id, total):
        """Yield (row indices, offending rows, loss to backpropagate, response-token NLL sum) per micro-batch.

        With ``prompt_weight`` w > 0 a row is scored from its second token on: it is packed as prompt = its first
        token, response = the rest of the prompt + the response, with token weights w on the former prompt and 1
        on the response, so the actor's own forward computes every log-prob needed.
        """
        from trainer.forward import ForwardOutput, PrefixPackedBatch, pack_rows_shared, prefix_order
        from trainer.ppo_actor import split_even

        act = self.actor
        n = len(prompt_ids)
        r_len = [int(r.numel()) for r in response_ids]
        n_micro = max(1, math.ceil(n / self.cfg.micro_batch_rows))
        w = self.prompt_weight
        share_w = w > 0 and self.share_prompt_loss and self.cfg.prefix_sharing
        if self.cfg.prefix_sharing and (w == 0 or share_w):  # shared prefixes side by side (trainer/forward.py)
            order = prefix_order(prompt_ids)
        else:
            order = sorted(range(n), key=lambda i: -(int(prompt_ids[i].numel()) + r_len[i]))  # less padding
        for micro in split_even(order, n_micro):
            if share_w:
                packed = pack_rows_shared([prompt_ids[i] for i in micro], [response_ids[i] for i in micro], pad_id,
                                          score_prompt=True)
                if isinstance(packed, PrefixPackedBatch):
                    yield self._shared_prompt_loss(micro, packed, prompt_ids, r_len, total)
                    continue
            if w > 0:
                ps = [prompt_ids[i][:1] for i in micro]
                rs = [torch.cat([prompt_ids[i][1:], response_ids[i]]) for i in micro]
            else:
                ps = [prompt_ids[i] for i in micro]
                rs = [response_ids[i] for i in micro]
            packed = act.pack(ps, rs, pad_id, grad=True).to(act.device)
            out = ForwardOutput(**act.engine(packed.as_kwargs(), hidden_layer=None, compute_entropy=False,
                                           chunk_tokens=self.cfg.logprob_chunk_tokens, temperature=1.0))
            mask = out.mask.float()  # (n_micro_rows, T_r)
            resp_mask = mask
            if w > 0:
                weights = torch.zeros_like(mask)
                resp_mask = torch.zeros_like(mask)
                for j, i in enumerate(micro):
                    lp = int(prompt_ids[i].numel()) - 1
                    weights[j, :lp] = w
                    weights[j, lp: lp + r_len[i]] = 1.0
                    resp_mask[j, lp: lp + r_len[i]] = 1.0
                mask = weights
            nll_resp = -(out.logprobs * resp_mask).sum()
            loss = -(out.logprobs * mask).sum() / total
            yield micro, [micro[j] for j in out.nonfinite_rows.tolist()], loss, nll_resp

    def _shared_prompt_loss(self, micro, packed, prompt_ids, r_len, total):
        """``_micro_losses``' tuple for one micro-batch packed by ``pack_rows_shared(score_prompt=True)``: the
        suffix log-probs (the rest of each prompt at weight w, then the response at 1), each row's first suffix
        token (weight w) and each shared prefix's tokens (weight w x the rows that hold it)."""
        from trainer.forward import ForwardOutput

        act, w = self.actor, self.prompt_weight
        cut = packed.prefix_mask.sum(1)[packed.row_prefix].tolist()  # each row's prefix length
        out = ForwardOutput(**act.engine(packed.to(act.device).as_kwargs(), hidden_layer=None, compute_entropy=False,
                                       chunk_tokens=self.cfg.logprob_chunk_tokens, temperature=1.0,
                                       prefix_targets=True))
        weights = torch.zeros_like(out.logprobs)
        resp_mask = torch.zeros_like(out.logprobs)
        for j, i in enumerate(micro):
            lp = int(prompt_ids[i].numel()) - cut[j] - 1  # prompt tokens of the suffix's "response" part
            weights[j, :lp] = w
            weights[j, lp: lp + r_len[i]] = 1.0
            resp_mask[j, lp: lp + r_len[i]] = 1.0
        rows_of = torch.bincount(packed.row_prefix, minlength=packed.prefix_ids.shape[0]).to(out.logprobs)  # (K,)
        prompt_part = (out.prefix_logprobs.sum(1) * rows_of).sum() + out.bridge_logprobs.sum()
        nll_resp = -(out.logprobs * resp_mask).sum()
        loss = -((out.logprobs * weights).sum() + w * prompt_part) / total
        return micro, [micro[j] for j in out.nonfinite_rows.tolist()], loss, nll_resp

    def step(self, prompt_ids: Sequence[torch.Tensor], response_ids: Sequence[torch.Tensor], pad_id: int = 0
             ) -> dict[str, float]:
        """One optimizer step on N rows (micro-batched by ``cfg.micro_batch_rows``): ``loss/sft`` (token-mean
        NLL of the response tokens before the step), ``loss/tokens``, ``loss/grad_norm``, ``loss/lr``,
        ``loss/applied``."""
        act = self.actor
        n = len(prompt_ids)
        if n == 0:
            raise ValueError("SFTLearner.step: no rows")
        r_len = [int(r.numel()) for r in response_ids]
        if min(r_len) < 1:
            raise ValueError("SFTLearner.step: a row has an empty response; every SFT row needs a target")
        total = float(act._allreduce(torch.tensor([float(sum(r_len))]))[0])
        nll_sum, bad_rows = 0.0, []
        act.engine.train()
        for _rows, bad, loss, nll in self._micro_losses(prompt_ids, response_ids, pad_id, total):
            if bad or not bool(torch.isfinite(loss.detach())):
                bad_rows.extend(bad or _rows)
                loss = loss * float("nan")  # poison: the step is skipped (trainer.ppo_actor's mechanism)
            act.engine.backward(loss * act.world_size, scale_wrt_gas=False)
            nll_sum += float(nll.detach())
        applied = act._optimizer_step(bad_rows)
        m = {"loss/sft": nll_sum / total, "loss/tokens": total, "loss/applied": float(applied),
             "loss/lr": self.lr_at(max(act.optimizer_steps - 1, 0))}
        gn = act._manual_grad_norm if act._manual_grad_norm is not None else act.engine.get_global_grad_norm()
        if gn is not None and math.isfinite(float(gn)):
            m["loss/grad_norm"] = float(gn)
        return m

    def export(self, out_dir: str | Path, tokenizer=None) -> Path | None:
        """The trained model as a Hugging Face folder (``PPOActor.export_hf``)."""
        return self.actor.export_hf(out_dir, tokenizer=tokenizer)


def _episode_batches(data: EncodedRows, batch_rows: int, generator: torch.Generator) -> list[list[int]]:
    """Mini-batches of ``batch_rows`` rows cut from the rows of the episodes in a shuffled order (each episode's
    rows in their order), then shuffled [choice]: rows that share a prompt prefix land in one batch."""
    if len(data.episode) != len(data):
        raise ValueError("train_sft(batch_by='episode'): the rows carry no episode ids (EncodedRows.episode)")
    members: dict[int, list[int]] = defaultdict(list)
    for i, e in enumerate(data.episode):
        members[e].append(i)
    keys = sorted(members)
    flat = [i for k in torch.randperm(len(keys), generator=generator).tolist() for i in members[keys[k]]]
    out = [flat[k: k + batch_rows] for k in range(0, len(flat), batch_rows)]
    order = torch.randperm(len(out), generator=generator).tolist()
    return [out[k] for k in order]


def _batches(data: EncodedRows, batch_rows: int, generator: torch.Generator, bucket: int = 8) -> list[list[int]]:
    """Shuffled mini-batches of row indices; rows of similar length share a batch (less padding) [choice]:
    shuffle, cut into chunks of ``bucket`` batches, sort each chunk by length, split, shuffle the batches."""
    n = len(data)
    perm = torch.randperm(n, generator=generator).tolist()
    lengths = [int(p.numel() + r.numel()) for p, r in zip(data.prompt_ids, data.response_ids)]
    out = []
    chunk = batch_rows * bucket
    for lo in range(0, n, chunk):
        part = sorted(perm[lo: lo + chunk], key=lambda i: lengths[i])
        out.extend(part[k: k + batch_rows] for k in range(0, len(part), batch_rows))
    order = torch.randperm(len(out), generator=generator).tolist()
    return [out[k] for k in order]


@dataclass(frozen=True)
class SFTSchedule:
    """What one call of ``train_sft`` trains: ``epochs`` passes (fractions allowed) of mini-batches of ``batch_rows``
    rows, formed as ``batch_by`` says (``BATCH_BY``) and shuffled from ``seed``.

    ``time_budget_s`` (None = none) stops training early when that many seconds of ``budget_clock`` have passed:
    ``wall`` (elapsed seconds) or ``cpu`` (this process's CPU seconds, all threads: the same amount of training on a
    busy or an idle machine) [choice]."""

    epochs: float = 1.0
    batch_rows: int = 32
    seed: int = 0
    batch_by: BatchBy = "row"
    time_budget_s: float | None = None
    budget_clock: Literal["wall", "cpu"] = "wall"

    def __post_init__(self) -> None:
        check_choices(self, "SFTSchedule")  # a ConfigError (a ValueError) naming the field and the allowed values


def train_sft(learner: SFTLearner, data: EncodedRows, schedule: SFTSchedule = SFTSchedule(), *, pad_id: int = 0,
              progress: bool = False, desc: str = "sft", log_every: int = 50,
              on_log: Callable[[dict], None] | None = None) -> dict[str, float]:
    """``schedule.epochs`` passes of shuffled mini-batches of ``schedule.batch_rows`` rows (``SFTSchedule``).

    Stops early when the schedule's ``time_budget_s`` runs out; with a budget, the learner's ``total_steps`` (the
    end of its learning-rate decay) is re-fitted after 10 and 50 steps to the steps the budget allows at the pace
    measured so far, so the decay ends with the budget. Returns summary metrics: ``loss/sft_first``,
    ``loss/sft_last`` (mean of the last ``log_every`` steps), ``perf/steps``, ``perf/tokens``,
    ``perf/tokens_per_s``, ``perf/seconds``.
    """
    if len(data) == 0:
        raise ValueError("train_sft: no rows to train on")
    epochs, batch_rows, seed = schedule.epochs, schedule.batch_rows, schedule.seed
    batch_by, time_budget_s, budget_clock = schedule.batch_by, schedule.time_budget_s, schedule.budget_clock
    batches = _batches if batch_by == "row" else _episode_batches
    clock = time.perf_counter if budget_clock == "wall" else time.process_time
    b0 = clock()
    g = torch.Generator().manual_seed(int(seed))
    plan: list[list[int]] = []
    whole = int(math.floor(epochs))
    for _ in range(whole):
        plan.extend(batches(data, batch_rows, g))
    frac = epochs - whole
    if frac > 0:
        extra = batches(data, batch_rows, g)
        plan.extend(extra[: max(1, int(round(frac * len(extra))))])
    bar = _bar(len(plan), desc, progress)
    t0 = time.perf_counter()
    losses: list[float] = []
    tokens = 0
    steps = 0
    try:
        for idx in plan:
            m = learner.step([data.prompt_ids[i] for i in idx], [data.response_ids[i] for i in idx], pad_id)
            steps += 1
            tokens += sum(int(data.prompt_ids[i].numel() + data.response_ids[i].numel()) for i in idx)
            if m["loss/applied"]:
                losses.append(m["loss/sft"])
            bar.update(1)
            if steps % 10 == 0:
                recent = losses[-log_every:]
                bar.set_postfix(loss=f"{sum(recent) / max(1, len(recent)):.3f}",
                                tok_s=f"{tokens / (time.perf_counter() - t0):.0f}", refresh=False)
            if on_log is not None and steps % log_every == 0:
                recent = losses[-log_every:]
                on_log({"step": steps, "loss": sum(recent) / max(1, len(recent)), "lr": m["loss/lr"],
                        "seconds": time.perf_counter() - t0})
            if time_budget_s is not None:
                spent = clock() - b0
                if spent > time_budget_s:
                    break
                if steps in (10, 50) and hasattr(learner, "total_steps"):
                    # fit the decay into the budget: the steps that fit at the pace so far [choice]
                    learner.total_steps = min(len(plan), max(steps + 1, int(time_budget_s * steps / spent)))
                    bar.total = learner.total_steps
    finally:
        bar.close()
    secs = time.perf_counter() - t0
    last = losses[-log_every:]
    return {
        "loss/sft_first": losses[0] if losses else float("nan"),
        "loss/sft_last": sum(last) / len(last) if last else float("nan"),
        "perf/steps": float(steps),
        "perf/planned_steps": float(len(plan)),
        "perf/tokens": float(tokens),
        "perf/seconds": secs,
        "perf/tokens_per_s": tokens / secs if secs > 0 else 0.0,
    }


# ======================================================================================== rollouts, DAgger
def episode_seed(*keys: int) -> int:
    """A seed from integer keys (stable across processes and machines) [choice]."""
    h = hashlib.sha256(",".join(str(int(k)) for k in keys).encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


@dataclass
class EpisodeResult:
    task: tuple[str, int]
    family: str
    won: bool
    steps: int
    invalid: int
    actions: list[str] = field(default_factory=list)


@dataclass
class PlayResult:
    """What ``play`` returns: one ``EpisodeResult`` per task, the expert-labelled rows (DAgger) and timing."""

    episodes: list[EpisodeResult]
    rows: list[SFTRow]
    generated_tokens: int
    seconds: float
    batch: Any = None  # the step rows (``agents.batch.RolloutBatch``), as ``agents.rollout.play`` returned them

    @property
    def success(self) -> float:
        return sum(e.won for e in self.episodes) / max(1, len(self.episodes))

    def by_family(self) -> dict[str, float]:
        acc: dict[str, list[bool]] = defaultdict(list)
        for e in self.episodes:
            acc[e.family].append(e.won)
        return {k: sum(v) / len(v) for k, v in sorted(acc.items())}

    def summary(self) -> dict[str, float]:
        n = max(1, len(self.episodes))
        return {
            "success": self.success,
            "episodes": float(len(self.episodes)),
            "mean_steps": sum(e.steps for e in self.episodes) / n,
            "invalid_rate": sum(e.invalid for e in self.episodes) / max(1, sum(e.steps for e in self.episodes)),
            "generated_tokens": float(self.generated_tokens),
            "tokens_per_s": self.generated_tokens / self.seconds if self.seconds > 0 else 0.0,
            "seconds": self.seconds,
        }


#: the sampling-seed and history conventions ``play`` accepts (``conventions``): "rollout" = the acting loop's own
#: (``agents.rollout.sample_seed``, the history shows ``INVALID_ACTION_TEXT`` after an invalid step; evaluation always
#: uses these); "episode" = ``episode_seed(seed, task.seed, turn)`` and an empty history entry, the conventions the
#: warm start's DAgger rounds were built with (its cached models and every result built on one depend on them)
PLAY_CONVENTIONS = ("rollout", "episode")


@dataclass(frozen=True)
class PlayOptions:
    """How ``play`` acts beyond the sampling settings.

    label_style : DAgger: with it set, every state an episode reaches is labelled with the expert
        (``envs.rationale.expert_response`` in this style) and returned as an ``SFTRow`` tagged ``source``
    expert_mix : DAgger's beta: the probability (seeded per task and turn) that the expert's action is executed
        instead of the model's
    conventions : the sampling-seed and history conventions, see ``PLAY_CONVENTIONS``
    progress / desc : show a progress bar with this label
    """

    label_style: str | None = None
    expert_mix: float = 0.0
    source: str = "dagger"
    conventions: str = "rollout"
    progress: bool = False
    desc: str = "play"


class _PlayHook:
    """``agents.rollout.TurnHook`` of ``play``: the progress bar after each chunk; with ``label_style``, DAgger:
    label every state an episode reaches with the expert (asked inside the pool, ``TextEnv.expert_response``), and
    with probability ``expert_mix`` (seeded per task and turn) execute the expert's action instead of the model's;
    with ``conventions="episode"``, the warm start's seeds and empty history entry."""

    def __init__(self, options: PlayOptions, seed: int, bar):
        from agents.rollout import INVALID_ACTION_TEXT

        self.style, self.mix, self.source = options.label_style, float(options.expert_mix), options.source
        self.seed = int(seed)
        self.bar, self.won = bar, 0
        self.rows: list[SFTRow] = []
        legacy = options.conventions == "episode"
        self.seed_fn = (lambda task, copy, turn: episode_seed(self.seed, task.seed, turn)) if legacy else None
        self.invalid_text = "" if legacy else INVALID_ACTION_TEXT

    def before_step(self, pool, episodes, actions, valids, turn) -> None:
        if self.style is None:
            return
        for j, e in enumerate(episodes):
            try:
                response, expert_act = pool.call([e.slot], "expert_response", e.info, self.style)[0]
            except Exception:  # a state the expert cannot plan from: not labelled
                continue
            t = len(e.rows)
            self.rows.append(SFTRow(_snapshot(e.transcript), response, expert_act, e.task.task_id, int(e.task.seed),
                                    t, self.source))
            if self.mix > 0 and random.Random(episode_seed(self.seed, e.task.seed, t, 7)).random() < self.mix:
                actions[j], valids[j] = expert_act, True

    def after_chunk(self, episodes) -> None:
        self.won += sum(e.won for e in episodes)
        self.bar.update(len(episodes))
        self.bar.set_postfix(success=f"{self.won / max(1, self.bar.n):.3f}", refresh=False)


def play_sampling(temperature: float = 0.4, max_response_tokens: int = 128, top_p: float = 1.0):
    """The ``SamplingConfig`` the warm start plays with (stops at ``</action>``, no log-probs); 0 = greedy."""
    from agents.engines.base import SamplingConfig

    return SamplingConfig(temperature=float(temperature), top_p=float(top_p), max_tokens=int(max_response_tokens),
                          stop=("</action>",), logprobs=False)


@contextmanager
def acting(model, tokenizer, env_id: str, *, env_kwargs: dict | None = None, max_steps: int | None = None,
           batch_envs: int = 32, prompt_config=None, max_prompt_tokens: int | None = None) -> Iterator:
    """An ``agents.rollout.Agent`` for ``play`` / ``evaluate``: ``model`` (in eval mode until the block ends)
    behind the Hugging Face engine, an inline pool of ``batch_envs`` envs of ``env_id`` (``max_steps``: the
    horizon, into ``env_kwargs``). ``prompt_config``: default ``agents.rollout.prompt_config_for(tokenizer,
    2048)``; ``max_prompt_tokens`` (the hard cut): default the config's token bound."""
    from agents import rollout
    from agents.engines.hf import HFEngine
    from envs.pool import EnvPool

    kwargs = dict(env_kwargs or {})
    if max_steps is not None:
        kwargs["max_steps"] = int(max_steps)
    pcfg = prompt_config if prompt_config is not None else rollout.prompt_config_for(tokenizer, 2048)
    bound = int(max_prompt_tokens) if max_prompt_tokens is not None else _bound(pcfg)
    was_training = model.training
    model.eval()
    try:
        with EnvPool(env_id, num_envs=max(1, int(batch_envs)), mode="inline", env_kwargs=kwargs) as pool:
            yield rollout.Agent(pool=pool, engine=HFEngine(model, tokenizer), tokenizer=tokenizer,
                                prompt_config=pcfg, max_prompt_tokens=bound)
    finally:
        if was_training:
            model.train()


def play(agent, tasks: Sequence, *, sampling, seed: int = 0, options: PlayOptions = PlayOptions()) -> PlayResult:
    """Roll the model out on ``tasks`` through the acting loop every rollout uses (``agents.rollout.play``: up to
    the pool's size envs in lock-step, one batched ``generate`` per turn over the live ones, prompts and invalid
    responses as in RL). ``agent``: from ``acting``; ``sampling``: e.g. ``play_sampling``; ``options``: DAgger
    labelling, conventions, progress (``PlayOptions``).
    """
    from agents import rollout

    if options.conventions not in PLAY_CONVENTIONS:
        raise ValueError(f"play: conventions={options.conventions!r} must be one of {PLAY_CONVENTIONS}")
    tasks = list(tasks)
    bar = _bar(len(tasks), options.desc, options.progress)
    hook = _PlayHook(options, seed, bar)
    t0 = time.perf_counter()
    try:
        batch, eps = rollout.play(agent, tasks, sampling=sampling, seed=seed, hook=hook)
    finally:
        bar.close()
    episodes, k = [], 0  # batch rows are sorted by (task, copy, step), the episodes' order
    for e in eps:
        n = len(e.rows)
        episodes.append(EpisodeResult(e.task.task_id, e.family, e.won, n, sum(not v for v in e.valids),
                                      list(batch.action[k:k + n])))
        k += n
    gen_tokens = sum(int(r.numel()) for r in batch.response_ids)
    return PlayResult(episodes, hook.rows, gen_tokens, time.perf_counter() - t0, batch)


def evaluate(agent, split: str, *, sampling, seed: int = 12345, max_tasks: int | None = None,
             options: PlayOptions | None = None) -> PlayResult:
    """Success on the fixed, seeded task list of ``split`` (``envs.pool.eval_tasks(split, n, max_tasks, seed)``,
    the list every run evaluates on), sampled with ``sampling`` (temperature 0 = greedy) and the per-sample seeds of
    RL evaluation (``agents.rollout.sample_seed`` of ``seed``): the same episodes as ``agents.rollout.evaluate`` of
    the same model, list, seed, sampling and prompt settings. ``options``: the progress bar only (evaluation plays
    by the acting loop's own conventions, unlabelled)."""
    from envs.pool import eval_tasks

    options = options if options is not None else PlayOptions(desc=f"eval {split} T={sampling.temperature:g}")
    if options.label_style is not None or options.conventions != "rollout":
        raise ValueError("evaluate: evaluation plays unlabelled by the acting loop's own conventions; pass "
                         "options with label_style=None and conventions='rollout'")
    tasks = eval_tasks(split, agent.pool.num_tasks(split), max_tasks, seed)
    return play(agent, tasks, sampling=sampling, seed=seed, options=options)
