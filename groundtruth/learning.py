"""Learning comparison: tabular softmax policies trained with each estimator from the same start.

Per iteration (one batch, one update, as one PPO epoch whose first mini-batch step has ratio 1) [choice]::

    sample P groups × G trajectories (P distinct tasks drawn at random)
    Â = compute_advantages(batch, EstimatorConfig(name, ε))          (``oracle``: Â = A^π, the true advantage)
    ĝ = (1/N) Σ_i Â_i ∇_θ log π(a_i|s_i)                              (row mean, as a token-mean loss)
    θ ← Adam(θ, ascent direction ĝ, lr)

Adam, as in the real trainer, also makes the comparison insensitive to the different scales of the
estimators (normalised GiGPO terms versus PACE's reward-scale step term). The success rate is exact:
P(won within H) under the current policy, averaged over all tasks (no evaluation noise). Every method of a
seed starts from the same logits θ₀ (expert strength calibrated to ``start_success``) and sees the same
task draws; trajectories differ once the policies do.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from envs.finite.mdp import TabularMDP

from .bench import HIDDEN_ESTIMATORS, Scenario, calibrated_logits, estimate, make_mdp, map_tasks
from .embed import ProxyConfig, ProxyEmbedder
from .policy import evaluate_policy, score_gradient, softmax, start_distribution, success_probability
from .sampling import render_observations, sample_rollout, to_step_batch

__all__ = ["LearnConfig", "train_one", "learn_seed", "run_learning", "TEXT_FREE"]

#: methods that read neither the anchor observation nor hidden states: their batches skip rendering
TEXT_FREE = ("grpo", "rloo", "oracle")


@dataclass
class LearnConfig:
    """Settings of the learning comparison."""

    methods: tuple[str, ...] = ("grpo", "rloo", "gigpo", "hgpo", "bigpo", "bipace_v", "bipace_q", "oracle")
    """Registry keys trained (plus ``oracle``: the true advantage, an upper reference)."""
    families: tuple[str, ...] = ("craft", "rooms")
    """MDP families; each one is a task of the (runs × tasks) score matrix."""
    family_kwargs: dict | None = None
    """Per-family config overrides."""
    scenarios: tuple[Scenario, ...] = (Scenario("varied+aliased", "high", 0.5), Scenario("plain", "none", 0.0))
    """Observation functions of the training runs; each (family, scenario) is one task of the score matrix.
    ``plain`` is where exact-match anchors work as intended (no surface variation, no hidden facts)."""
    seeds: int = 20
    """Runs per method and family."""
    iterations: int = 30
    """Training iterations (one batch and one update each)."""
    groups: int = 4
    """P groups per batch."""
    group_size: int = 8
    """G trajectories per group."""
    horizon: int = 50
    """Max steps per episode."""
    lr: float = 0.1
    """Adam learning rate on the tabular logits [choice]: one value for every method, set so that the oracle
    (true advantages) converges within about 20 iterations; not tuned per method."""
    start_success: float = 0.15
    """Exact success rate of the common starting policy."""
    policy_noise: float = 1.0
    """Std of the random part of the starting logits."""
    epsilon: float = 0.05
    """Clustering threshold of bigpo / bipace_* [paper: 0.05 for Qwen2.5-1.5B]; not tuned here."""
    proxy_noise: float = 0.2
    """σ_obs of the proxy hidden states used by the clustering estimators."""
    proxy_spread: float = 0.3
    """κ of the proxy."""
    norm_mode: str = "mean_std_norm"
    """GiGPO normalisation [GiGPO scripts for ALFWorld / TextCraft]."""
    eval_every: int = 1
    """Exact evaluation every k iterations (and at the start and the end)."""
    thresholds: tuple[float, ...] = (0.5, 0.8)
    """Success levels for iterations-to-threshold."""

    def __post_init__(self) -> None:
        if self.iterations < 1 or self.seeds < 1:
            raise ValueError(f"LearnConfig needs iterations >= 1 and seeds >= 1 (got {self.iterations}, {self.seeds})")
        if self.lr <= 0:
            raise ValueError(f"LearnConfig.lr={self.lr} must be > 0")
        if not 0.0 < self.start_success < 1.0:
            raise ValueError(f"LearnConfig.start_success={self.start_success} must lie in (0, 1)")
        if self.eval_every < 1:
            raise ValueError(f"LearnConfig.eval_every={self.eval_every} must be >= 1")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["scenarios"] = [asdict(sc) for sc in self.scenarios]
        return d

    def eval_iterations(self) -> np.ndarray:
        its = list(range(0, self.iterations + 1, self.eval_every))
        if its[-1] != self.iterations:
            its.append(self.iterations)
        return np.array(its)


def train_one(mdp: TabularMDP, method: str, theta0: np.ndarray, cfg: LearnConfig, seed: int,
              proxy: ProxyEmbedder | None, options: dict | None = None) -> np.ndarray:
    """Exact success rate at ``cfg.eval_iterations()`` for one method and seed (``options``: further
    ``EstimatorConfig`` fields, as in ``groundtruth.bench.estimate``)."""
    rng = np.random.default_rng([seed, 7])  # same task draws for every method (first draws of this stream)
    task_rng = np.random.default_rng([seed, 8])
    theta = torch.tensor(theta0, dtype=torch.float64)
    opt = torch.optim.Adam([theta], lr=cfg.lr)
    rho_all = start_distribution(mdp, np.arange(mdp.num_tasks))
    evals = set(cfg.eval_iterations().tolist())
    curve = []
    for it in range(cfg.iterations + 1):
        pi = softmax(theta.numpy())
        if it in evals:
            curve.append(success_probability(mdp, pi, rho_all))
        if it == cfg.iterations:
            break
        tasks = task_rng.choice(mdp.num_tasks, size=min(cfg.groups, mdp.num_tasks), replace=False)
        ro = sample_rollout(mdp, pi, tasks, cfg.group_size, rng)
        if method in TEXT_FREE:  # these read no observation; rendering is the costliest step of an iteration
            rng.integers(2**63)  # keep the random stream aligned with the methods that render
            obs = [""] * len(ro)
        else:
            obs = render_observations(mdp, ro, rng)
        hidden = proxy.embed(ro.state, obs) if (proxy is not None and method in HIDDEN_ESTIMATORS) else None
        batch = to_step_batch(mdp, ro, obs, hidden)
        true_adv = evaluate_policy(mdp, pi).A[ro.step, ro.state, ro.action] if method == "oracle" else None
        adv, _, _, _ = estimate(batch, method, cfg.epsilon, cfg.norm_mode, true_adv, options=options)
        g = score_gradient(pi, ro.state, ro.action, adv) / len(ro)  # (S, A) ascent direction
        opt.zero_grad()
        theta.grad = torch.as_tensor(-g)
        opt.step()
    return np.array(curve)


def learn_seed(cfg: LearnConfig, family: str, fi: int, seed: int, scenario: Scenario | None = None) -> dict:
    """Every method of ``cfg.methods`` trained from the same start on one (family, scenario, seed).

    The start, the task draws and the proxy depend on (family, seed) only, so scenarios are paired.
    """
    t0 = time.perf_counter()
    kwargs = (cfg.family_kwargs or {}).get(family, {})
    mdp = make_mdp(family, scenario or cfg.scenarios[0], cfg.horizon, **kwargs)
    theta0, s0 = calibrated_logits(mdp, cfg.start_success, cfg.policy_noise, np.random.default_rng([seed, fi, 5]))
    proxy = ProxyEmbedder(mdp.features, ProxyConfig(obs_noise=cfg.proxy_noise, spread=cfg.proxy_spread, seed=seed))
    curves = {m: train_one(mdp, m, theta0, cfg, seed, proxy) for m in cfg.methods}
    return {"curves": curves, "start": s0, "seconds": time.perf_counter() - t0}


def _learn_task(args):
    cfg, family, fi, seed, scenario = args
    return learn_seed(cfg, family, fi, seed, scenario)


def run_learning(cfg: LearnConfig, log=print, workers: int = 1) -> dict:
    """Train every method on every (family, scenario) for every seed; returns curves and metadata.

    Result: {"iterations": (E,), "curves": {"<family>/<scenario>": {method: (seeds, E)}}, "start": {...: [success]}}.
    Seeds run in ``workers`` processes (results do not depend on it).
    """
    tasks = [(cfg, family, fi, seed, sc) for fi, family in enumerate(cfg.families) for sc in cfg.scenarios
             for seed in range(cfg.seeds)]
    keys = [f"{family}/{sc.name}" for family in cfg.families for sc in cfg.scenarios]
    curves: dict = {k: {m: [] for m in cfg.methods} for k in keys}
    start: dict = {k: [] for k in keys}
    for (_, family, _, seed, sc), res in zip(tasks, map_tasks(_learn_task, tasks, workers)):
        k = f"{family}/{sc.name}"
        start[k].append(res["start"])
        for m in cfg.methods:
            curves[k][m].append(res["curves"][m])
        finals = " ".join(f"{m}={res['curves'][m][-1]:.2f}" for m in cfg.methods)
        log(f"[learn] {k} seed {seed} ({res['seconds']:.1f}s): start {res['start']:.2f} -> {finals}")
    return {"iterations": cfg.eval_iterations(),
            "curves": {f: {m: np.stack(v) for m, v in c.items()} for f, c in curves.items()}, "start": start}
