"""The ground truth of a training batch in a finite world, and every estimator scored against it.

A run on ``FiniteCraft-v0`` / ``FiniteRooms-v0`` returns rows whose ``state_key`` is the MDP state. For such a
batch ``batch_truth`` computes, under the actor being trained, the exact ``A^π_t(s, a)`` of each row
(``groundtruth.onpolicy``), and ``score_estimators`` runs every registered estimator on the same step batch and
reports how close each comes (Pearson, Spearman, sign agreement, rows with zero signal, singleton rate and pair
precision/recall of its state groups against ``state_key``; the same correlations and sign agreement for the
estimator's step term alone, ``*_step``, since the episode term is common to every group-based estimator). One
estimator trains; all are scored on identical data, which costs one scoring forward and the estimators' own
(vectorised) work. Each is scored with its own arm's settings (``arm_configs``): a variant run's settings of one
estimator's formula (``FORMULA_FIELDS``, e.g. ``pace_norm``) apply to the variant only, which is scored under its
own name beside the registered estimators. ``TruthProbe`` fills the cells the batch did not visit with the policy
at the canonical prompt of every reachable cell (``groundtruth.cells``; a second scoring forward, over those
prompts), and logs that fill's residual, the ceiling (``ceiling_metrics``) and every estimator against the earlier,
uniform-fill truth too.

Row → MDP action: the env's own parser, ``TabularMDP.action_of`` (whitespace collapsed, lower case), on the
projected action of a valid row; a valid row naming no action of the world and every invalid row take the malformed
action, the "not understood" no-op the env plays for both. Only invalid rows are charged λ, as the estimators charge
them (``onpolicy``, "Responses that name no action").

Each row's context for the scoring forward [choice]: its prompt, then its own response up to the first
``<action>`` (the thought it produced); for a response without ``<action>``, up to the end of ``</think>`` when
present, else nothing. Every action is scored as ``<action>{a}</action>`` followed by the end-of-sequence token.
The model's tokenisation of its own response may differ at the cut from the re-tokenised text; the difference
is in the conditioning only.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch

from envs.finite.mdp import TabularMDP
from estimators.config import HGPO_RULES

from .metrics import advantage_metrics
from .onpolicy import OnPolicyTruth, action_token_ids, exact_row_advantages, row_thought, score_actions

#: how ``TruthProbe`` fills the cells the batch did not visit: ``reachable`` scores the canonical prompt of every
#: reachable cell (``groundtruth.cells``); ``visited`` leaves them uniform (the probe before that; cheap, not the
#: sampling policy's truth)
CELL_FILLS = ("reachable", "visited")

#: the gymnasium ids whose rows carry an MDP state: a trainer on one of them logs ``groundtruth/...`` every iteration
WORLD_IDS = ("FiniteCraft-v0", "FiniteRooms-v0")

#: the ``EstimatorConfig`` fields that change one estimator's formula rather than the run's protocol. A study's
#: variant that sets one of them (``llm-gt-halves``' ``bipace_q-cluster_std``: ``pace_norm``) is an arm of its own;
#: the registered estimators its runs also score take these at their defaults, as the study's plain arms do [choice:
#: no committed study sets them for every arm; ``tests/groundtruth/test_live.py`` checks the study files]
FORMULA_FIELDS = ("step_weight", "pace_key", "pace_key_tokens", "pace_fallback", "pace_norm", "hgpo_levels",
                  "hgpo_alpha", "hgpo_rule")
#: the formula fields only HGPO reads (``arm_configs``)
HGPO_FIELDS = ("hgpo_levels", "hgpo_alpha", "hgpo_rule")

__all__ = ["WORLD_IDS", "TruthProbe", "probe_for", "BatchTruth", "row_actions", "row_contexts", "batch_truth",
           "advantage_metrics", "score_estimators", "oracle_epsilon", "PROBE_EPSILONS", "CELL_FILLS",
           "ceiling_metrics", "fill_residuals", "FORMULA_FIELDS", "arm_configs", "PROBE_HGPO_RULES"]


@dataclass
class BatchTruth:
    """The truth of one batch: per-row arrays (N,) and the DP result."""

    step: np.ndarray
    state: np.ndarray
    action: np.ndarray
    truth: OnPolicyTruth
    logprobs: np.ndarray | None = None
    """(N, A) the rows' scored action log-probs, to recompute the truth under another fill without rescoring"""
    invalid: np.ndarray | None = None
    """(N,) bool: the rows the estimators charge λ"""

    @property
    def advantages(self) -> np.ndarray:
        return self.truth.A


def row_actions(mdp: TabularMDP, actions, valid) -> np.ndarray:
    """(N,) MDP action index of each row: its projected action, or the malformed one (module docstring)."""
    m = mdp.malformed_action
    out = np.empty(len(actions), dtype=np.int64)
    for i, (a, v) in enumerate(zip(actions, valid)):
        j = mdp.action_of(a) if bool(v) else None
        if j is None:
            if m is None:
                raise ValueError(f"row {i}: action {a!r} is not one of the MDP's actions and the MDP has no "
                                 "malformed action to stand for it")
            j = m
        out[i] = j
    return out


def row_contexts(tokenizer, prompt_ids, response_text) -> list[torch.Tensor]:
    """Each row's prompt tokens followed by the tokens of its thought (module docstring)."""
    out = []
    for p, text in zip(prompt_ids, response_text):
        t = row_thought(text or "")
        ids = tokenizer(t, add_special_tokens=False)["input_ids"] if t else []
        out.append(torch.cat([p.to(torch.long), torch.tensor(ids, dtype=torch.long)]))
    return out


def batch_truth(mdp: TabularMDP, batch, model, tokenizer, *, temperature: float = 1.0, fallback=None,
                pad_id: int = 0, max_rows: int = 64) -> BatchTruth:
    """The exact advantage of each row of a ``RolloutBatch`` under ``model`` (a causal LM, or a scoring function:
    ``onpolicy.score_actions``) (module docstring)."""
    state = np.asarray([int(s) if s is not None else -1 for s in batch.state_key], dtype=np.int64)
    if (state < 0).any():
        i = int(np.flatnonzero(state < 0)[0])
        raise ValueError(f"row {i} has no state_key: the ground truth needs a finite world (FiniteCraft-v0 or "
                         "FiniteRooms-v0)")
    step = batch.step.numpy().astype(np.int64)
    action = row_actions(mdp, batch.action, batch.valid.tolist())
    contexts = row_contexts(tokenizer, batch.prompt_ids, batch.response_text)
    acts = action_token_ids(tokenizer, mdp)
    lp = score_actions(model, contexts, acts, pad_id=pad_id, temperature=temperature, max_rows=max_rows)
    invalid = ~batch.valid.numpy().astype(bool)
    truth = exact_row_advantages(mdp, step, state, action, lp, fallback=fallback, invalid=invalid)
    return BatchTruth(step=step, state=state, action=action, truth=truth, logprobs=lp, invalid=invalid)


def ceiling_metrics(group: np.ndarray, truth: BatchTruth, norm_mode: str) -> dict[str, float]:
    """Two readings of the rows' *exact* expected returns Q^π_{t_i}(s_i, a_i) against A^π, logged beside every
    estimator's figure: ``groundtruth/ceiling/pearson_q``, Q itself (the "exact expected returns" of the issue that
    asked for it); and ``groundtruth/ceiling/pearson_step`` (with ``spearman_step``, ``sign_agree_step``), Q seen as
    GiGPO sees its returns: normalised inside (prompt group, true state) groups (``norm_mode``, one-row groups 0),
    i.e. GiGPO's step term with exact state groups and noise-free returns. What keeps that below 1 is the baseline
    (the group's mean of Q over the sampled actions, not V^π), the per-group scaling and the one-row groups. It is
    the ceiling of a return-normalising, state-grouped step term, not a bound on every estimator: an
    action-conditioned baseline (PACE) can exceed it. group : (N,) the rows' prompt groups."""
    from estimators.ops import dense_ids, group_normalize

    q = truth.truth.Q
    if q is None:
        raise ValueError("ceiling_metrics needs the rows' exact Q (an OnPolicyTruth from exact_row_advantages)")
    group = np.asarray(group, dtype=np.int64)
    gid = dense_ids(torch.as_tensor(group, dtype=torch.long), torch.as_tensor(truth.state, dtype=torch.long))
    step_term = group_normalize(torch.as_tensor(q), gid, norm_mode, unbiased=True, singleton="zero").numpy()
    m = advantage_metrics(step_term, truth.advantages, group, truth.state, None, step=step_term)
    out = {f"groundtruth/ceiling/{k}": m[k] for k in ("pearson_step", "spearman_step", "sign_agree_step")}
    out["groundtruth/ceiling/pearson_q"] = advantage_metrics(q, truth.advantages, group, truth.state, None)["pearson"]
    return out


def fill_residuals(mdp: TabularMDP, truth: BatchTruth, fill: np.ndarray) -> dict[str, float]:
    """How much the canonical-prompt fill differs from what the batch's own rows say (``groundtruth.cells``):
    ``groundtruth/canonical_tv`` the mean total-variation distance between the fill and the rows' mean policy
    over the visited cells; ``groundtruth/canonical_pearson`` the Pearson of the truth with the truth under the
    fill in every cell (visited ones included); ``groundtruth/visited_only_pearson`` the Pearson of the truth
    with the one whose unvisited cells are uniform (the probe before every reachable cell was scored)."""
    vis = truth.truth.visited
    tv = 0.5 * np.abs(truth.truth.pi[vis] - fill[vis]).sum(-1)
    canon = exact_row_advantages(mdp, truth.step, truth.state, truth.action, truth.logprobs, invalid=truth.invalid)
    canon_all = exact_row_advantages(mdp, truth.step, truth.state, truth.action, truth.logprobs,
                                     invalid=truth.invalid, policy=fill).A
    a = truth.advantages
    return {"groundtruth/canonical_tv": float(tv.mean()) if tv.size else math.nan,
            "groundtruth/canonical_pearson": advantage_metrics(canon_all, a, a, a, None)["pearson"],
            "groundtruth/visited_only_pearson": advantage_metrics(canon.A, a, a, a, None)["pearson"]}


def arm_configs(method: str, cfg):
    """(the ``EstimatorConfig`` every registered estimator is scored with, ``(method, cfg)`` for the trained arm when
    it must be scored under its own name, else None) for a run of ``method`` (``RunConfig.method``: the variant or
    the estimator's name) trained with ``cfg``. A plain arm (``method`` is ``cfg.name``) shares its config with the
    study's other plain arms. A variant that changes a ``FORMULA_FIELDS`` setting is an arm of its own: the
    registered estimators take those fields' defaults, the variant is scored with ``cfg`` as ``method``. Other
    settings (ε, γ, λ, ``norm_mode``, the clustering's) stay the run's for every estimator."""
    import dataclasses

    if method == cfg.name:
        return cfg, None
    fields = {f.name: f for f in dataclasses.fields(cfg)}
    # HGPO's own fields are a variant's change only in a variant of HGPO; elsewhere they are the study's setting for
    # every arm (the finite-world studies pin the HGPO rule their runs were made with) and stay as they are
    reset = [k for k in FORMULA_FIELDS if cfg.name == "hgpo" or k not in HGPO_FIELDS]
    plain = dataclasses.replace(cfg, **{k: fields[k].default for k in reset})
    return (plain, None) if plain == cfg else (plain, (method, cfg))


def score_estimators(step_batch, truth: BatchTruth, base_cfg, names=None,
                     extra_epsilons: dict[str, float] | None = None,
                     references: dict[str, np.ndarray] | None = None,
                     own: tuple[str, object] | None = None) -> dict[str, float]:
    """``groundtruth/<estimator>/<metric>`` for every registered estimator (or ``names``) on ``step_batch``.

    ``base_cfg`` is the ``EstimatorConfig`` of the study's plain arms (its ε, weights and backend; ``arm_configs``);
    each estimator takes it with its own name, and the extra scorings below also with their own ε. ``own``
    ``(label, cfg)``: the trained arm, when it is a variant of its own (``arm_configs``), scored with ``cfg`` as
    ``groundtruth/<label>/<metric>`` (and against ``references``). An estimator that needs hidden states is
    skipped when the batch has none. ``extra_epsilons`` ``{label: ε}``: the
    hidden-state estimators are also scored at each of these ε, as ``groundtruth/<estimator>@<label>/<metric>``.
    HGPO is also scored under each rule of ``PROBE_HGPO_RULES`` other than ``base_cfg``'s, as
    ``groundtruth/hgpo@<rule>/<metric>`` (and against ``references``).
    Also ``groundtruth/true_abs_mean``, ``groundtruth/true_zero`` (rows whose true advantage is 0) and
    ``groundtruth/visited_cells`` (the (step, state) cells whose policy came from the batch's own rows).
    ``references`` ``{label: (N,) advantages}``: other truths of the same rows; each estimator at the run's ε is also
    scored against them, as ``groundtruth/<label>/<estimator>/pearson`` and ``.../pearson_step``.
    """
    import dataclasses

    from estimators import compute_advantages
    from estimators.registry import ESTIMATORS

    group = step_batch.group_id.numpy()
    out: dict[str, float] = {
        "groundtruth/true_abs_mean": float(np.abs(truth.advantages).mean()),
        "groundtruth/true_zero": float((np.abs(truth.advantages) <= 1e-9).mean()),
        "groundtruth/visited_cells": float(truth.truth.visited.sum()),
    }
    jobs = []  # (metric label, config, scored against the references too)
    for name in names or sorted(ESTIMATORS):
        if ESTIMATORS[name].needs_hidden and step_batch.hidden is None:
            continue
        jobs.append((name, dataclasses.replace(base_cfg, name=name), True))
        if name == "hgpo":  # HGPO under its other rules too, on the very same batch (``PROBE_HGPO_RULES``)
            jobs += [(f"hgpo@{rule}", dataclasses.replace(base_cfg, name="hgpo", hgpo_rule=rule), True)
                     for rule in PROBE_HGPO_RULES if rule != base_cfg.hgpo_rule]
        if ESTIMATORS[name].needs_hidden:
            jobs += [(f"{name}@{label}", dataclasses.replace(base_cfg, name=name, epsilon=float(eps)), False)
                     for label, eps in (extra_epsilons or {}).items()]
    if own is not None:
        label, cfg = own
        if label in ESTIMATORS:
            raise ValueError(f"score_estimators: own arm label {label!r} would overwrite another estimator's metrics")
        if not (ESTIMATORS[cfg.name].needs_hidden and step_batch.hidden is None):
            jobs.append((label, cfg, True))
    for key, cfg, with_refs in jobs:
        res = compute_advantages(step_batch, cfg, diagnostics=False)
        cluster = res.cluster_id.numpy() if res.cluster_id is not None else None
        m = advantage_metrics(res.advantages.double().numpy(), truth.advantages, group, truth.state, cluster,
                              step=res.step.double().numpy())
        out.update({f"groundtruth/{key}/{k}": v for k, v in m.items()})
        if with_refs:
            for label, ref in (references or {}).items():
                r = advantage_metrics(res.advantages.double().numpy(), ref, group, truth.state, None,
                                      step=res.step.double().numpy())
                out[f"groundtruth/{label}/{key}/pearson"] = r["pearson"]
                out[f"groundtruth/{label}/{key}/pearson_step"] = r["pearson_step"]
    return out


#: fixed ε the probe also scores the hidden-state estimators at: the paper's (Qwen2.5-1.5B). ``TruthProbe`` adds
#: ``oracle``, the ε that best recovers this batch's true states (``estimators.calibrate``'s ``state_f1`` rule,
#: rescanned per batch; ``oracle_epsilon``)
PROBE_EPSILONS = {"eps0.05": 0.05}

#: the HGPO rules (``EstimatorConfig.hgpo_rule``) every batch scores HGPO under, besides the run's own: both, so a
#: run gives the two rules' scores on its very batches whichever one it was made with (``docs/method.md``, "HGPO")
PROBE_HGPO_RULES = HGPO_RULES


class TruthProbe:
    """The trainer's batch probe on a finite world (``trainer.loop.Trainer(batch_probe=...)``): every row's exact
    advantage under the actor as it is now, and every registered estimator scored against it on this very batch;
    the finite ``groundtruth/...`` metrics. The scoring forward goes through the trainer's engine (its sharding and
    chunking), once per rank."""

    def __init__(self, env_id: str, env_kwargs: dict, gamma: float | None = None,
                 invalid_penalty: float | None = None, cells: str = "reachable"):
        if cells not in CELL_FILLS:
            raise ValueError(f"TruthProbe cells={cells!r} must be one of {CELL_FILLS}")
        self.cells = cells
        import gymnasium as gym

        import envs  # noqa: F401  (registers the ids)

        mdp = gym.make(env_id, **env_kwargs).unwrapped.mdp  # the pool's world, enumerated once for DP
        # the run's γ and λ (``estimator.gamma``, ``estimator.invalid_penalty``), so the truth is of the return the
        # estimators estimate; a value the MDP cannot honour is a ConfigError here, before any training
        self.mdp = mdp.with_returns(mdp.gamma if gamma is None else gamma,
                                    mdp.invalid_penalty if invalid_penalty is None else invalid_penalty)

    def __call__(self, trainer, batch, step_batch) -> dict[str, float]:
        """The ``groundtruth/...`` metrics of this training batch: ``batch`` the ``RolloutBatch``, ``step_batch`` the
        estimator's view of it that the trainer built for this iteration (``RolloutBatch.to_step_batch``, with the
        actor's hidden states or None); the hidden-state estimators are skipped when those hold NaN/Inf."""
        def scorer(prompts, responses):
            return trainer.ppo_actor.compute_logprobs(prompts, responses, hidden=False, pad_id=trainer.pad_id)

        head: dict[str, float] = {}
        fill = None
        if self.cells == "reachable":
            fill, head = self.canonical_policy(trainer, batch, scorer)
        bt = batch_truth(self.mdp, batch, scorer, trainer.tokenizer, pad_id=trainer.pad_id, max_rows=len(batch),
                         fallback=fill)
        hidden = step_batch.hidden
        if hidden is not None and not bool(torch.isfinite(hidden).all()):
            hidden = None  # the hidden-state estimators are skipped on this batch
            step_batch = dataclasses.replace(step_batch, hidden=None)
        base, own = arm_configs(trainer.cfg.method, trainer.estimator_cfg)
        references = {}
        if fill is not None:
            head.update(fill_residuals(self.mdp, bt, fill))
            references["visited_only"] = exact_row_advantages(self.mdp, bt.step, bt.state, bt.action, bt.logprobs,
                                                              invalid=bt.invalid).A
        head.update(ceiling_metrics(step_batch.group_id.numpy(), bt, base.norm_mode))
        extra = dict(PROBE_EPSILONS)
        if hidden is not None:
            oracle = oracle_epsilon(step_batch, base)
            if oracle is not None:
                extra["oracle"] = oracle
                head["groundtruth/oracle_epsilon"] = oracle
        metrics = {**head, **score_estimators(step_batch, bt, base, extra_epsilons=extra, references=references,
                                              own=own)}
        return {k: v for k, v in metrics.items() if math.isfinite(v)}

    def canonical_policy(self, trainer, batch, scorer) -> tuple[np.ndarray, dict[str, float]]:
        """(π (H, S, A) at the canonical prompt of every reachable cell, its cost metrics) (``groundtruth.cells``)."""
        import time

        from .cells import canonical_thought, cell_policy

        t0 = time.perf_counter()
        step0 = batch.step.numpy() == 0
        starts = [int(s) for s, first in zip(batch.state_key, step0) if first]
        weights = np.array([starts.count(int(s)) for s in self.mdp.start_states], dtype=np.float64)
        cp = cell_policy(self.mdp, scorer, trainer.tokenizer, env_name=trainer.agent.env,
                         prompt_config=trainer.prompt_config, max_prompt_tokens=trainer.cfg.rollout.max_prompt_tokens,
                         thought=canonical_thought(batch.response_text), pad_id=trainer.pad_id,
                         start_weights=weights if weights.sum() > 0 else None, max_rows=64)
        return cp.pi, {"groundtruth/reachable_cells": float(cp.reachable.sum()),
                       "groundtruth/cell_prompts": float(cp.prompts),
                       "groundtruth/cell_seconds": time.perf_counter() - t0}


def oracle_epsilon(step_batch, cfg) -> float | None:
    """The ε of ``estimators.calibrate.AUTO_GRID`` whose clusters best recover the batch's true states (pair F1;
    the ``state_f1`` rule), with the run's centroid, backend and centring; None when no prompt group holds two rows
    of one state."""
    from estimators.calibrate import choose_epsilon

    try:
        cal = choose_epsilon(step_batch, dataclasses.replace(cfg, epsilon_criterion="state_f1"))
    except ValueError as e:
        if "state_f1" not in str(e):
            raise
        return None
    return float(cal.epsilon)


def probe_for(cfg) -> TruthProbe | None:
    """The probe for a run config: a ``TruthProbe`` on a finite world (same kwargs and horizon as the run's pool, and
    the run's ``estimator.gamma`` and ``estimator.invalid_penalty``), else None."""
    if cfg.env.id not in WORLD_IDS:
        return None
    kwargs = dict(cfg.env.kwargs)
    if cfg.env.max_steps is not None:
        kwargs["max_steps"] = cfg.env.max_steps
    return TruthProbe(cfg.env.id, kwargs, gamma=cfg.estimator.gamma, invalid_penalty=cfg.estimator.invalid_penalty)
