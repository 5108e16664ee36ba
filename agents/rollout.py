"""The multi-turn group rollout: P prompt groups x G copies of a task, one step row per live env per turn.

Symbols: P prompt groups, G trajectories (copies) per group, N step rows, T_p prompt tokens, T_r response
tokens. Env slot ``s`` of the pool holds group ``s // G``, copy ``s % G`` (``envs.pool.EnvPool.reset``).

One turn, for the set L of LIVE envs only (finished episodes never generate again) [docs/protocol.md]::

    messages_s = builder.messages(transcript_s)                  s in L, one user message (agents.prompts)
    prompt_s   = chat_template(messages_s, generation prompt)    token ids, <= max_prompt_tokens (hard cut)
    gen_s      = engine.generate([prompt_s for s in L], seeds=[seed(run, task_s, copy_s, turn)])  one batch
    a_s, v_s   = project(gen_s.text)        invalid (or cut at max tokens) -> a_s = NOOP_ACTION, v_s = False
    obs, r, terminated, truncated, info = pool.step(L, a)        live envs only
    row(s, turn) = (group, copy, step, prompt, response, r, v, anchor_obs, state_key, ...)
    transcript_s.record(executed action, obs, info)             reasoning text never enters the history

until no env is live (won, or the env's horizon ``max_steps`` sets ``truncated``).

Choices [choice unless tagged]:

* **Per-sample seeds**: ``sample_seed(seed, task, copy, turn)`` (NumPy ``SeedSequence`` of the run seed, the
  task's split, index and env seed, the copy index and the turn), so a row's response depends only on its own
  prompt and that seed: identical seeds give identical rollouts (HF engine, CPU), whatever else is live and
  however an evaluation list is chunked.
* **Prompt length**: the prompt builder's own bound (``PromptConfig.max_tokens``; ``prompt_config_for`` sets it
  from ``max_prompt_tokens`` minus the chat template's overhead) shortens the message gracefully (history,
  then the observation's oldest text, ...). ``max_prompt_tokens`` is then only a last-resort hard cut of the
  token ids (``encode_prompt``): the chat template's opening and the message's first line (the role line) are
  kept, the oldest text after it is cut, leaving ``PROMPT_CUT_MARKER``, and the template's closing and
  generation prompt are kept. Rows cut this way are counted in ``rollout/prompt_truncated_frac``.
* **Invalid responses** [protocol]: no ``<think>``/``<action>`` tags, or a response cut at ``max_tokens``
  (``response_truncated``; GiGPO's penalty applies) sends ``NOOP_ACTION`` to the env. Empty, garbage,
  100 kB or non-ASCII text is just an invalid action. The transcript's history then shows
  ``INVALID_ACTION_TEXT`` as the executed action (the env's no-op answer follows it).
* **Env errors**: a step whose ``info`` carries ``"error"`` (an exception inside the env, a crashed or hung
  pool worker) ends that episode at that row (``done=True``, counted in ``rollout/env_errors``); the other
  envs go on.
* **Rows** are returned sorted by (group, trajectory, step); ``anchor_obs`` and ``state_key`` are those of the
  state the prompt was built from (o_t, the state the action was taken in) [GiGPO].

The hidden states BiGPO needs come from a forward that runs anyway: by default the trainer's old-log-prob pass
over these rows (``trainer.forward.policy_forward(..., hidden_layer=L)``); with ``trainer.old_logprobs: rollout`` the
prompt's own forward here (``SamplingConfig.hidden_layer``, HF engine: ``RolloutBatch.rollout_hidden``), and the
trainer skips that pass.
"""
from __future__ import annotations

import hashlib
import math
import re
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from agents.batch import RolloutBatch
from agents.engines.base import Generation, RolloutEngine, SamplingConfig
from agents.projection import NOOP_ACTION, project
from agents.prompts import PROMPT_FORMATS, PromptConfig, Transcript, get_prompt_builder

__all__ = [
    "NonFiniteReward",
    "Agent",
    "collect",
    "evaluate",
    "play",
    "Episode",
    "TurnHook",
    "ExpertShare",
    "sample_seed",
    "encode_prompt",
    "encode_transcript",
    "prompt_config_for",
    "PROMPT_CUT_MARKER",
    "INVALID_ACTION_TEXT",
    "RolloutTrace",
]

#: left in a prompt whose oldest text was cut by the hard ``max_prompt_tokens`` bound
PROMPT_CUT_MARKER = "[... earlier text of this prompt cut to fit max_prompt_tokens ...]\n"
#: what the history shows as the executed action of a step whose response was invalid
INVALID_ACTION_TEXT = "(no valid action)"


# ====================================================================== seeds and prompts
def sample_seed(seed: int, split: str, task_index: int, task_seed: int, copy: int, turn: int) -> int:
    """The sampling seed of one response: a function of (run seed, task, copy, turn) only, in [0, 2^31 - 1)."""
    key = [int(seed) & 0xFFFFFFFF, zlib.crc32(str(split).encode()), int(task_index) & 0xFFFFFFFF,
           int(task_seed) & 0xFFFFFFFF, int(copy) & 0xFFFFFFFF, int(turn) & 0xFFFFFFFF, 0x524F4C4C]
    return int(np.random.SeedSequence(key).generate_state(1)[0] % (2**31 - 1))


def _encode(tokenizer, texts: list[str]) -> list[list[int]]:
    """Token ids of rendered chat texts; the same ids as ``apply_chat_template(..., tokenize=True)``."""
    if not texts:
        return []
    return [list(x) for x in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def _render(tokenizer, messages: list[dict[str, str]]) -> str:
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def prompt_config_for(tokenizer, max_prompt_tokens: int, history_length: int = 2, margin: int = 8) -> PromptConfig:
    """A ``PromptConfig`` whose token bound keeps the whole chat prompt within ``max_prompt_tokens``.

    The chat template's own tokens (measured on an empty message; SmolLM2's template adds a system line) and
    ``margin`` tokens (merges across the message's edges) are reserved, so the builder shortens the message
    itself and ``encode_prompt``'s hard cut stays a rare last resort.
    """
    overhead = len(_encode(tokenizer, [_render(tokenizer, [{"role": "user", "content": ""}])])[0])
    if max_prompt_tokens - overhead - margin < 1:
        raise ValueError(
            f"max_prompt_tokens={max_prompt_tokens} leaves no room for a message: the chat template alone takes "
            f"{overhead} tokens (+{margin} margin); raise rollout.max_prompt_tokens")

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    return PromptConfig(history_length=history_length, max_tokens=int(max_prompt_tokens), count_tokens=count,
                        reserve_tokens=overhead + margin)


def encode_prompt(tokenizer, messages: list[dict[str, str]], max_prompt_tokens: int,
                  text: str | None = None, ids: list[int] | None = None) -> tuple[list[int], bool]:
    """Chat-template token ids of ``messages`` (generation prompt appended), at most ``max_prompt_tokens``.

    Returns ``(ids, cut)``. A prompt over the bound is cut from the left AFTER its first user-visible header:
    kept are the template's opening up to the end of the message's first line (the role line), then
    ``PROMPT_CUT_MARKER``, then the newest part of the rest of the message, then the template's closing and
    generation prompt. If even that frame does not fit, the last ``max_prompt_tokens`` ids are kept (a plain
    left cut; the generation prompt survives). ``text``/``ids``: the rendered text and its ids if known.
    """
    if not isinstance(max_prompt_tokens, int) or max_prompt_tokens < 1:
        raise ValueError(f"max_prompt_tokens={max_prompt_tokens!r} must be a positive integer")
    text = _render(tokenizer, messages) if text is None else text
    ids = _encode(tokenizer, [text])[0] if ids is None else ids
    if len(ids) <= max_prompt_tokens:
        return ids, False
    content = str(messages[-1].get("content", "")) if messages else ""
    pos = text.rfind(content) if content else -1
    if pos >= 0:
        first_line = content.split("\n", 1)[0]
        head_end = pos + len(first_line) + (1 if len(first_line) < len(content) else 0)
        head, body, tail = text[:head_end], text[head_end:pos + len(content)], text[pos + len(content):]

        def size(k: int) -> int:
            return len(_encode(tokenizer, [head + PROMPT_CUT_MARKER + body[len(body) - k:] + tail])[0])

        if size(0) <= max_prompt_tokens:
            lo, hi = 0, len(body)  # the longest end of the body that fits (binary search on characters)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if size(mid) <= max_prompt_tokens:
                    lo = mid
                else:
                    hi = mid - 1
            cut = _encode(tokenizer, [head + PROMPT_CUT_MARKER + body[len(body) - lo:] + tail])[0]
            if len(cut) <= max_prompt_tokens:
                return cut, True
    return ids[len(ids) - max_prompt_tokens:], True


def encode_transcript(tokenizer, builder, transcript: Transcript, config: PromptConfig | None,
                      max_prompt_tokens: int) -> tuple[list[int], bool]:
    """``(ids, cut)``: the prompt of one state exactly as a rollout encodes it (the builder's message within
    ``config``'s bound, the chat template with the generation prompt, ``encode_prompt``'s last-resort cut); the SFT
    warm start encodes its rows with it, so SFT and RL prompts are the same ids."""
    messages = _messages(builder, transcript, config)
    return encode_prompt(tokenizer, messages, max_prompt_tokens)


def _messages(builder, transcript: Transcript, config: PromptConfig | None) -> list[dict[str, str]]:
    """The builder's message within ``config``'s bound; if the bound is below what the prompt's fixed parts need,
    the unbounded message (the hard cut of ``encode_prompt`` then applies and is counted) [choice: a rollout
    never dies mid-training on a length setting]."""
    try:
        return builder.messages(transcript, config)
    except ValueError:
        hist = config.history_length if config is not None else 2
        return builder.messages(transcript, PromptConfig(history_length=hist, max_chars=10**9))


# ====================================================================== one rollout
@dataclass
class RolloutTrace:
    """What one rollout did, beyond the rows (for metrics, tests and the benchmark).

    prompts_per_turn : list[list[int]]  env slots prompted at each turn, in the order given to the engine
    generations_avoided : int           prompts a prompt-every-env-every-turn rollout would have added
    """

    prompts_per_turn: list[list[int]] = field(default_factory=list)
    generations_avoided: int = 0
    turns: int = 0
    env_errors: int = 0
    prompt_truncated: int = 0
    time: dict[str, float] = field(default_factory=dict)


SeedFn = Callable[[Any, int, int], int]  # (task, copy, turn) -> sampling seed


class TurnHook:
    """How ``play`` acts beyond sampling; the defaults are the acting loop's own conventions.

    ``before_step`` is called once per turn after the responses are projected and before the live envs are
    stepped. ``episodes[j]`` (an ``Episode``: transcript, latest info, task) is about to take ``actions[j]``
    (``valids[j]``); the hook may label those states (DAgger asks the expert through
    ``pool.call([slot], "expert_response", info, style)``) and may replace entries of ``actions`` / ``valids`` in
    place (DAgger's expert mixing). ``seed_fn(task, copy, turn)``, if set, replaces ``sample_seed`` (the warm
    start's DAgger keeps the seeds its cached models were built with); ``invalid_text`` is the history's text for
    an invalid step; ``after_chunk(episodes)`` is called after each chunk of the task list (progress bars)."""

    seed_fn: SeedFn | None = None
    invalid_text: str = INVALID_ACTION_TEXT

    def before_step(self, pool, episodes: list[Episode], actions: list[str], valids: list[bool], turn: int) -> None:
        return None

    def after_chunk(self, episodes: list[Episode]) -> None:
        return None


class ExpertShare(TurnHook):
    """A scripted policy: the episodes whose (split, task index, copy) hash below ``share`` act by the env's expert
    (``pool.call([slot], "expert_response", info, "none")``) instead of the model's response, which still fills the
    row. Which episodes is fixed by the task and copy, so it does not depend on the pool, the chunk or the rank.
    The rehearsal uses it so that some episodes are won and end early (``rollout.expert_share``)."""

    def __init__(self, share: float):
        if not 0 <= share <= 1:
            raise ValueError(f"ExpertShare share={share!r} must be in [0, 1]")
        self.share = float(share)

    def chooses(self, task: Any, copy: int) -> bool:
        key = f"{getattr(task, 'split', '')}:{getattr(task, 'index', task)}:{int(copy)}".encode()
        # blake2b, not crc32: crc32 of such short, similar keys clusters (all of 40 keys fell below 0.32)
        return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2 ** 64 < self.share

    def before_step(self, pool, episodes: list[Episode], actions: list[str], valids: list[bool], turn: int) -> None:
        for j, e in enumerate(episodes):
            if self.chooses(e.task, e.copy):
                actions[j] = str(pool.call([e.slot], "expert_response", e.info, "none")[0][1])
                valids[j] = True


def _family_key(family: Any) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(family)) or "unknown"


@dataclass
class Episode:
    """One episode of a rollout, as the acting loop keeps it (and as ``play`` returns it).

    slot / group / copy : env slot of the pool; prompt group (task) and copy within the group
    task : envs.pool.Task;  family : the task's family (``info["task_family"]``)
    transcript : what the agent has seen so far (``agents.prompts.Transcript``); info : the latest env info
    rows : indices of this episode's step rows in the loop's columns (turn-major); valids : per step
    won / score / live : outcome (``info["won"]``, ``info["raw_score"]``), still running
    key : the order of the episode's rows in the batch (default: its slot)
    """

    slot: int
    group: int
    copy: int
    task: Any
    family: str
    transcript: Transcript
    info: dict
    rows: list[int] = field(default_factory=list)
    valids: list[bool] = field(default_factory=list)
    won: bool = False
    score: float | None = None
    live: bool = True
    key: int = -1

    def __post_init__(self) -> None:
        if self.key < 0:
            self.key = self.slot


@dataclass(kw_only=True)
class Agent:
    """What every acting call on one set of envs shares (``collect``, ``play``, ``evaluate``; the warm start's
    ``play`` and ``evaluate`` too); what varies per call (tasks, sampling, seed) is passed to the call.

    pool : ``envs.pool.EnvPool``, enough slots for the calls' tasks x copies
    engine : an ``agents.engines.RolloutEngine`` (HF or vLLM); prompts go to it in ascending slot order
    tokenizer : the model's tokenizer (chat template); None = ``engine.tokenizer``
    prompt_config : ``agents.prompts.PromptConfig`` (history length, soft length bound); see ``prompt_config_for``.
        None = the builder's defaults
    max_prompt_tokens : hard bound on prompt ids (last-resort cut, ``encode_prompt``)
    env_name : prompt wording ("alfworld", "textcraft", "webshop"); None = ``pool.env_name``
    prompt_format : "bipace" (this repo's wording) or "verl_agent" (verl-agent's ALFWorld and WebShop prompts);
        ``agents.prompts.get_prompt_builder``
    max_turns : stop after this many turns (rows of still-live envs get ``done=True``); None = run until every
        episode ends (the envs' ``max_steps`` horizon guarantees it)
    hook : the ``TurnHook`` of calls that pass none (e.g. ``ExpertShare``); None = the loop's own conventions
    """

    pool: Any
    engine: RolloutEngine
    tokenizer: Any = None
    prompt_config: PromptConfig | None = None
    max_prompt_tokens: int
    env_name: str | None = None
    prompt_format: str = "bipace"
    max_turns: int | None = None
    hook: TurnHook | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_prompt_tokens, int) or self.max_prompt_tokens < 1:
            raise ValueError(f"max_prompt_tokens={self.max_prompt_tokens!r} must be a positive integer")
        if self.max_turns is not None and (not isinstance(self.max_turns, int) or self.max_turns < 1):
            raise ValueError(f"max_turns={self.max_turns!r} must be a positive integer or None")
        if self.prompt_format not in PROMPT_FORMATS:
            raise ValueError(f"prompt_format={self.prompt_format!r} must be one of {', '.join(PROMPT_FORMATS)}")
        if self.tokenizer is None:
            self.tokenizer = getattr(self.engine, "tokenizer", None)
        if self.tokenizer is None:
            raise ValueError("Agent: no tokenizer given and the engine has none; pass tokenizer=...")

    @property
    def env(self) -> str:
        """The prompt wording in use: ``env_name`` or the pool's."""
        return self.env_name or self.pool.env_name


@dataclass
class _Rows:
    """The step rows of one rollout in the order they were played (turn-major), one typed list per field."""

    episode: list[int] = field(default_factory=list)  # Episode.key of the row's episode
    step: list[int] = field(default_factory=list)
    prompt_ids: list[list[int]] = field(default_factory=list)
    response_ids: list[list[int]] = field(default_factory=list)
    response_text: list[str] = field(default_factory=list)
    action: list[str] = field(default_factory=list)
    reward: list[float] = field(default_factory=list)
    valid: list[bool] = field(default_factory=list)
    done: list[bool] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)
    anchor_obs: list[str] = field(default_factory=list)
    state_key: list[Any] = field(default_factory=list)
    logprobs: list[list[float] | None] = field(default_factory=list)
    hidden: list[torch.Tensor | None] = field(default_factory=list)
    prompt_cut: list[bool] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.episode)

    def append(self, e: Episode, prompt_ids: list[int], g: Generation, action: str, reward: float, valid: bool,
               done: bool, truncated: bool, prompt_cut: bool) -> int:
        """Add the row of episode ``e``'s next step (its prompt, generation and outcome); returns its index."""
        self.episode.append(e.key)
        self.step.append(len(e.rows))
        self.prompt_ids.append(prompt_ids)
        self.response_ids.append(list(g.token_ids))
        self.response_text.append(str(g.text))
        self.action.append(action)
        self.reward.append(float(reward))
        self.valid.append(valid)
        self.done.append(done)
        self.truncated.append(truncated)
        self.anchor_obs.append(str(e.info.get("anchor_obs", e.transcript.observation)))
        self.state_key.append(e.info.get("state_key"))
        self.logprobs.append(g.logprobs)
        self.hidden.append(g.hidden)
        self.prompt_cut.append(prompt_cut)
        return len(self.episode) - 1

    def to_batch(self, eps: list[Episode], group_offset: int = 0) -> RolloutBatch:
        """A RolloutBatch sorted by (group, trajectory, step)."""
        n = len(self)
        key_ep = {e.key: e for e in eps}
        order = sorted(range(n), key=lambda i: (self.episode[i], self.step[i]))
        ep_of = [key_ep[self.episode[i]] for i in order]
        have_lp = n > 0 and all(self.logprobs[i] is not None for i in order)
        have_hidden = n > 0 and all(self.hidden[i] is not None for i in order)
        batch = RolloutBatch(
            prompt_ids=[torch.tensor(self.prompt_ids[i], dtype=torch.long) for i in order],
            response_ids=[torch.tensor(self.response_ids[i], dtype=torch.long) for i in order],
            group_id=torch.tensor([e.group + group_offset for e in ep_of], dtype=torch.long),
            traj_id=torch.tensor([e.copy for e in ep_of], dtype=torch.long),
            step=torch.tensor([self.step[i] for i in order], dtype=torch.long),
            reward=torch.tensor([self.reward[i] for i in order], dtype=torch.float32),
            valid=torch.tensor([self.valid[i] for i in order], dtype=torch.bool),
            done=torch.tensor([self.done[i] for i in order], dtype=torch.bool),
            won=torch.tensor([e.won for e in ep_of], dtype=torch.bool),
            response_truncated=torch.tensor([self.truncated[i] for i in order], dtype=torch.bool),
            anchor_obs=[self.anchor_obs[i] for i in order],
            response_text=[self.response_text[i] for i in order],
            action=[self.action[i] for i in order],
            state_key=[self.state_key[i] for i in order],
            task_family=[e.family for e in ep_of],
            task_id=[e.task.task_id for e in ep_of],
            rollout_logprobs=([torch.tensor(self.logprobs[i], dtype=torch.float32) for i in order]
                              if have_lp else None),
            rollout_hidden=torch.stack([self.hidden[i] for i in order]).float() if have_hidden else None,
        )
        batch.validate()
        return batch

    def episode_stats(self, eps: list[Episode]) -> dict[str, Any]:
        fam: dict[str, list[bool]] = {}
        for e in eps:
            fam.setdefault(_family_key(e.family), []).append(e.won)
        return {
            "won": [e.won for e in eps],
            "lengths": [len(e.rows) for e in eps],
            "families": fam,
            "scores": [e.score for e in eps],
            "returns": [sum(self.reward[i] for i in e.rows) for e in eps],
            "valid": self.valid,
            "truncated": self.truncated,
            "prompt_tokens": [len(p) for p in self.prompt_ids],
            "response_tokens": [len(r) for r in self.response_ids],
        }


def _prompts(agent: Agent, builder, prompted: list[Episode], seed: int,
             seed_fn: SeedFn | None) -> tuple[list[list[int]], list[bool], list[int]]:
    """``(prompt ids, cut flags, sampling seeds)`` of the prompted episodes, each at its own turn (its step count:
    the rollout's turn for episodes that started together)."""
    tokenizer = agent.tokenizer
    messages = [_messages(builder, e.transcript, agent.prompt_config) for e in prompted]
    texts = [_render(tokenizer, m) for m in messages]
    ids_all = _encode(tokenizer, texts)
    prompt_ids, cut = [], []
    for m, text, ids in zip(messages, texts, ids_all):
        p, c = encode_prompt(tokenizer, m, agent.max_prompt_tokens, text=text, ids=ids)
        prompt_ids.append(p)
        cut.append(c)
    if seed_fn is None:
        seeds = [sample_seed(seed, e.task.split, e.task.index, e.task.seed, e.copy, len(e.rows)) for e in prompted]
    else:
        seeds = [int(seed_fn(e.task, e.copy, len(e.rows))) for e in prompted]
    return prompt_ids, cut, seeds


def _turn(agent: Agent, builder, hook: TurnHook, rows: _Rows, live: list[Episode], sampling: SamplingConfig,
          seed: int, turn: int, trace: RolloutTrace, n_envs: int) -> None:
    """One turn of the live episodes (ascending slot order): prompts, one batched generation, projection, the hook,
    one step of their envs, their rows. An episode whose step ends it gets ``live = False``."""
    pool, engine, times = agent.pool, agent.engine, trace.time
    trace.prompts_per_turn.append([e.slot for e in live])
    trace.generations_avoided += n_envs - len(live)

    # ---- prompts of the live envs
    t0 = time.perf_counter()
    prompt_ids, cut, seeds = _prompts(agent, builder, live, seed, hook.seed_fn)
    times["prompt"] += time.perf_counter() - t0

    # ---- one batched generation
    t0 = time.perf_counter()
    gens: list[Generation] = engine.generate(prompt_ids, sampling, seeds=seeds)
    times["generate"] += time.perf_counter() - t0
    if len(gens) != len(prompt_ids):
        raise RuntimeError(f"engine {getattr(engine, 'name', engine)!r} returned {len(gens)} generations for "
                           f"{len(prompt_ids)} prompts")

    # ---- project, step the live envs
    actions, valids, truncs = [], [], []
    for g in gens:
        trunc = bool(g.truncated)
        proj = project(g.text)
        valid = proj.valid and not trunc
        actions.append(proj.action if valid else NOOP_ACTION)
        valids.append(valid)
        truncs.append(trunc)
    hook.before_step(pool, live, actions, valids, turn)
    t0 = time.perf_counter()
    results = pool.step([e.slot for e in live], actions)
    times["env"] += time.perf_counter() - t0

    for j, (e, action, valid, trunc, res) in enumerate(zip(live, actions, valids, truncs, results)):
        info = res.info if isinstance(res.info, dict) else {}
        error = info.get("error")
        done = bool(res.terminated or res.truncated or error)
        reward = _finite_reward(res.reward, agent, e, len(rows), len(e.rows))
        e.rows.append(rows.append(e, prompt_ids[j], gens[j], action, reward, valid, done, trunc, cut[j]))
        e.valids.append(valid)
        e.won = e.won or bool(info.get("won", False))
        if info.get("raw_score") is not None:
            e.score = float(info["raw_score"])
        if error:
            trace.env_errors += 1
        if cut[j]:
            trace.prompt_truncated += 1
        if done:
            e.live = False
        else:
            e.transcript.record(action if valid else hook.invalid_text, res.obs, info)
            e.info = dict(info)


def _start(agent: Agent, sampling: SamplingConfig, hook: TurnHook | None, trace: RolloutTrace):
    """What a rollout sets up first, after checking ``sampling``: its hook (the call's, the agent's, or the loop's own
    conventions), its prompt builder, its phase timers (``trace.time``) and its start time."""
    if not isinstance(sampling, SamplingConfig):
        raise TypeError(f"sampling must be an agents.engines.SamplingConfig, got {type(sampling).__name__}")
    hook = hook if hook is not None else (agent.hook if agent.hook is not None else TurnHook())
    times = trace.time
    for k in ("reset", "prompt", "generate", "env", "total"):
        times.setdefault(k, 0.0)
    return hook, get_prompt_builder(agent.env, agent.prompt_format), times, time.perf_counter()


def _run(agent: Agent, tasks, group_size: int, sampling: SamplingConfig, seed: int, trace: RolloutTrace,
         hook: TurnHook | None = None) -> tuple[_Rows, list[Episode]]:
    """One group rollout on ``agent.pool``; returns the rows (turn-major) and the episodes (slot order).
    ``hook``: a ``TurnHook`` (default: the loop's own conventions, ``sample_seed`` of the run seed)."""
    if not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size={group_size!r} must be a positive integer")
    hook, builder, times, t_start = _start(agent, sampling, hook, trace)
    pool, max_turns = agent.pool, agent.max_turns

    t0 = time.perf_counter()
    obs, infos = pool.reset(list(tasks), group_size=group_size)
    times["reset"] += time.perf_counter() - t0
    eps = []
    for s, (o, info) in enumerate(zip(obs, infos)):
        task = tasks[s // group_size]
        eps.append(Episode(slot=s, group=s // group_size, copy=s % group_size, task=task,
                            family=str(info.get("task_family", "")), transcript=Transcript.start(o, info),
                            info=dict(info)))
    n_envs = len(eps)
    rows = _Rows()

    turn = 0
    while True:
        live = [e for e in eps if e.live]
        if not live:
            break
        if max_turns is not None and turn >= max_turns:  # safety bound for envs without a horizon
            for e in live:
                if e.rows:
                    rows.done[e.rows[-1]] = True
                e.live = False
            break
        _turn(agent, builder, hook, rows, live, sampling, seed, turn, trace, n_envs)
        turn += 1
    trace.turns += turn
    times["total"] += time.perf_counter() - t_start
    return rows, eps


def _run_refill(agent: Agent, tasks, episodes_per_task: int, sampling: SamplingConfig, seed: int,
                trace: RolloutTrace, hook: TurnHook | None = None) -> tuple[_Rows, list[Episode]]:
    """Play every (task, copy) of ``tasks`` once on ``agent.pool`` with the pool kept full [choice]: the episodes
    start in (task, copy) order on the free slots (ascending), and when an episode ends its slot takes the next
    (task, copy) before the next turn, so each generate call holds up to ``pool.num_envs`` prompts until the list
    runs out, instead of a chunk's survivors. Each episode is prompted at its own turn (its step count), so its
    sampling seeds are those of ``play``'s chunks; ``agent.max_turns`` bounds each episode. Returns the rows and the
    episodes in (task, copy) order (``Episode.key``; ``group`` = the task's index in ``tasks``). ``hook``: as in
    ``play``; its ``after_chunk`` gets the episodes that ended at each turn. ``before_step``'s ``turn`` counts the
    call's turns (an episode's own turn is ``len(episode.rows)``)."""
    explicit = hook
    hook, builder, times, t_start = _start(agent, sampling, hook, trace)
    pool, max_turns = agent.pool, agent.max_turns
    units = [(g, c) for g in range(len(tasks)) for c in range(episodes_per_task)]
    n_envs = pool.num_envs
    at: list[Episode | None] = [None] * n_envs  # the episode each slot holds (live or ended)
    eps: list[Episode] = []
    rows = _Rows()
    t0 = time.perf_counter()
    pool.reset([])  # every slot idle, whatever an earlier rollout left
    times["reset"] += time.perf_counter() - t0

    turn = 0
    while True:
        free = [s for s in range(n_envs) if at[s] is None or not at[s].live]
        take = units[len(eps):len(eps) + len(free)]
        if take:
            t0 = time.perf_counter()
            obs, infos = pool.refill([(s, tasks[g]) for s, (g, _) in zip(free, take)])
            times["reset"] += time.perf_counter() - t0
            for s, (g, c), o, info in zip(free, take, obs, infos):
                e = Episode(slot=s, group=g, copy=c, task=tasks[g], family=str(info.get("task_family", "")),
                            transcript=Transcript.start(o, info), info=dict(info), key=len(eps))
                eps.append(e)
                at[s] = e
        live = [e for e in at if e is not None and e.live]
        if not live:
            break
        over = [e for e in live if max_turns is not None and len(e.rows) >= max_turns]
        if over:  # the safety bound for envs without a horizon, per episode
            for e in over:
                if e.rows:
                    rows.done[e.rows[-1]] = True
                e.live = False
            pool.release([e.slot for e in over])
            if explicit is not None:
                explicit.after_chunk(over)
            continue
        _turn(agent, builder, hook, rows, live, sampling, seed, turn, trace, n_envs)
        ended = [e for e in live if not e.live]
        if ended and explicit is not None:
            explicit.after_chunk(ended)
        turn += 1
    trace.turns += turn
    times["total"] += time.perf_counter() - t_start
    return rows, eps


def _mean(xs) -> float:
    xs = list(xs)
    return float(sum(xs) / len(xs)) if xs else 0.0


# ====================================================================== public API
def collect(agent: Agent, tasks, *, group_size: int, sampling: SamplingConfig, seed: int,
            trace: RolloutTrace | None = None) -> tuple[RolloutBatch, dict[str, float]]:
    """Roll out ``len(tasks)`` prompt groups x ``group_size`` copies on ``agent.pool`` (see the module docstring).

    Args:
        agent: the ``Agent`` (pool with at least ``len(tasks) * group_size`` slots, engine, prompt settings).
        tasks: ``list[envs.pool.Task]``, one per prompt group (P).
        group_size: G, copies per task (same task and env seed).
        sampling: ``SamplingConfig`` (temperature, top-p, max response tokens, stop strings).
        seed: run seed of the per-sample seeds (``sample_seed``).
        trace: a ``RolloutTrace`` to fill (prompts per turn, times).

    Returns:
        ``(batch, metrics)``: the step rows (``RolloutBatch``, N rows sorted by group, trajectory, step) and
        metrics named ``rollout/...`` and ``perf/...`` (listed in agents/README.md, "Rollout").
    """
    trace = trace if trace is not None else RolloutTrace()
    tasks = list(tasks)
    if not tasks:
        raise ValueError("collect: no tasks given; pass one envs.pool.Task per prompt group")
    rows, eps = _run(agent, tasks, group_size, sampling, seed, trace)
    batch = rows.to_batch(eps)
    st = rows.episode_stats(eps)
    t = trace.time
    gen_tokens = sum(st["response_tokens"])
    n_rows = len(batch)
    metrics: dict[str, float] = {
        "rollout/success_rate": _mean(st["won"]),
        "rollout/episode_length": _mean(st["lengths"]),
        "rollout/valid_action_rate": _mean(st["valid"]),
        "rollout/response_truncated_frac": _mean(st["truncated"]),
        "rollout/prompt_truncated_frac": trace.prompt_truncated / max(n_rows, 1),
        "rollout/prompt_tokens_mean": _mean(st["prompt_tokens"]),
        "rollout/response_tokens_mean": _mean(st["response_tokens"]),
        "rollout/gen_tokens": float(gen_tokens),
        "rollout/num_rows": float(n_rows),
        "rollout/num_trajectories": float(len(eps)),
        "rollout/turns": float(trace.turns),
        "rollout/env_errors": float(trace.env_errors),
        "rollout/generations_avoided": float(trace.generations_avoided),
        "rollout/reward_mean": _mean(batch.reward.tolist()),
        "rollout/return_mean": _mean(st["returns"]),
        "perf/rollout_s": t["total"],
        "perf/rollout_reset_s": t["reset"],
        "perf/rollout_prompt_s": t["prompt"],
        "perf/rollout_generate_s": t["generate"],
        "perf/rollout_env_s": t["env"],
        "perf/gen_tokens_per_s": gen_tokens / t["generate"] if t["generate"] > 0 else 0.0,
        "perf/env_steps_per_s": n_rows / t["total"] if t["total"] > 0 else 0.0,
    }
    for fam, won in sorted(st["families"].items()):
        metrics[f"rollout/family/{fam}/success_rate"] = _mean(won)
    scores = [s for s in st["scores"] if s is not None]
    if scores or agent.env == "webshop":
        metrics["rollout/score"] = _mean(s if s is not None else 0.0 for s in st["scores"])
    for k, v in metrics.items():
        if not math.isfinite(v):
            raise FloatingPointError(f"rollout metric {k} is {v}")
    return batch, metrics


class NonFiniteReward(FloatingPointError):
    """An environment returned a NaN/Inf (or non-numeric) reward; the message names the row, task and env."""


def _finite_reward(reward, agent: Agent, e: Episode, row: int, step: int) -> float:
    """``reward`` as a finite float, or ``NonFiniteReward`` naming the row, the task and the environment."""
    try:
        value = float(reward)
    except (TypeError, ValueError):
        value = float("nan")
    if not math.isfinite(value):
        raise NonFiniteReward(
            f"the {agent.env} environment returned reward {reward!r} for row {row} (task {e.task}, group {e.group}, "
            f"copy {e.copy}, step {step}, env slot {e.slot}); rewards must be finite numbers: fix the environment "
            "(its reward or data for this task), then rerun the same command to resume from the last checkpoint")
    return value


def play(agent: Agent, tasks, *, sampling: SamplingConfig, seed: int, episodes_per_task: int = 1,
         hook: TurnHook | None = None, refill: bool = False) -> tuple[RolloutBatch, list[Episode]]:
    """Play a task list, ``episodes_per_task`` episodes per task, in chunks of the pool's size: the acting loop
    that RL rollouts, evaluation, the SFT warm start's DAgger rounds and its evaluation all share.

    Rows, prompts, seeds and invalid responses are handled as in ``collect`` (module docstring). ``hook``: a
    ``TurnHook`` (labelling, action mixing, the seed and history conventions, a call after each chunk).
    ``refill``: instead of chunks, a slot whose episode ended takes the next (task, copy) at once, so the pool
    stays full (``_run_refill``): fewer generate calls and turns when episode lengths differ, the same episodes and
    seeds (equal results with an engine whose output does not depend on the batch; HF's batched generation can
    round differently in another batch) [choice: ``eval.refill``].

    Returns ``(batch, episodes)``: group ids number the tasks in list order (group k = ``tasks[k]``); episodes in
    task order (copies of a task together). Per-sample seeds depend on the task, not on its chunk, so the result
    does not depend on the pool size.
    """
    tasks = list(tasks)
    if not tasks:
        raise ValueError("play: no tasks given (an empty task list)")
    if not isinstance(episodes_per_task, int) or episodes_per_task < 1:
        raise ValueError(f"play: episodes_per_task={episodes_per_task!r} must be a positive integer")
    per_chunk = agent.pool.num_envs // episodes_per_task
    if per_chunk < 1:
        raise ValueError(f"play: episodes_per_task={episodes_per_task} exceeds the pool's {agent.pool.num_envs} envs")
    if refill:
        rows, eps = _run_refill(agent, tasks, episodes_per_task, sampling, seed, RolloutTrace(), hook=hook)
        return rows.to_batch(eps), eps
    batches, all_eps = [], []
    for start in range(0, len(tasks), per_chunk):
        trace = RolloutTrace()
        chunk = tasks[start:start + per_chunk]
        rows, eps = _run(agent, chunk, episodes_per_task, sampling, seed, trace, hook=hook)
        batches.append(rows.to_batch(eps, group_offset=start))
        for e in eps:
            e.group += start
        all_eps.extend(eps)
        if hook is not None:
            hook.after_chunk(eps)
    return RolloutBatch.concat(batches), all_eps


def evaluate(agent: Agent, tasks, *, sampling: SamplingConfig, seed: int, episodes_per_task: int = 1,
             refill: bool = False) -> tuple[dict[str, float], RolloutBatch]:
    """Play a fixed task list (e.g. ``envs.pool.eval_tasks``) with ``play`` and score it; tasks may come from
    several splits. ``refill``: ``play``'s refilling mode (the pool kept full across the whole list, splits
    included).

    Metrics, per split of the list (``<env>`` = ``agent.env``)::

        eval/<env>/<split>/success_rate                  won episodes / episodes
        eval/<env>/<split>/family/<family>/success_rate  the same per task family
        eval/<env>/<split>/score                         mean raw score (graded envs: WebShop; 0 if nothing bought)
        eval/<env>/<split>/episode_length                mean steps per episode
        eval/<env>/<split>/valid_action_rate             valid rows / rows
        eval/<env>/<split>/num_episodes
        perf/eval_s                                      wall time of the whole evaluation

    Returns ``(metrics, batch)``: group ids number the tasks in list order (group k = ``tasks[k]``).
    """
    tasks = list(tasks)
    if not tasks:
        raise ValueError("evaluate: no tasks given (an empty evaluation list)")
    env = agent.env
    t_start = time.perf_counter()
    batch, all_eps = play(agent, tasks, sampling=sampling, seed=seed, episodes_per_task=episodes_per_task,
                          refill=refill)
    metrics: dict[str, float] = {}
    splits = list(dict.fromkeys(t.split for t in tasks))
    graded = env == "webshop" or any(e.score is not None for e in all_eps)
    for split in splits:
        eps = [e for e in all_eps if e.task.split == split]
        pre = f"eval/{env}/{split}"
        metrics[f"{pre}/success_rate"] = _mean(e.won for e in eps)
        fams: dict[str, list[bool]] = {}
        for e in eps:
            fams.setdefault(_family_key(e.family), []).append(e.won)
        for fam, won in sorted(fams.items()):
            metrics[f"{pre}/family/{fam}/success_rate"] = _mean(won)
        if graded:
            metrics[f"{pre}/score"] = _mean(e.score if e.score is not None else 0.0 for e in eps)
        metrics[f"{pre}/episode_length"] = _mean(len(e.rows) for e in eps)
        metrics[f"{pre}/valid_action_rate"] = _mean(v for e in eps for v in e.valids)
        metrics[f"{pre}/num_episodes"] = float(len(eps))
    metrics["perf/eval_s"] = time.perf_counter() - t_start
    return metrics, batch
