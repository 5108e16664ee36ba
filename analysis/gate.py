"""The learning gate: does RL in a given recipe raise success on held-out goals above the warm start?

Declared before any run (``results/gate-textcraft/README.md``); this module is the whole analysis, run by
``python -m experiments.reanalyse gate-textcraft``.

* **Arm** = one recipe (a run method: ``gigpo`` at the preset's lr, ``gigpo-lr3e-5``, ...), several seeds.
* **Warm start** = success of the unchanged warm start on the same held-out goals, measured once with more episodes
  than a run's evaluation (``warmstart_eval.json``, written by ``python -m experiments.evaluate --json``).
* **Gain of a seed** = its run's held-out success at its last evaluation (which must be the run's last iteration)
  minus the warm start's success, in points.
* **Verdict per arm**: PASS when the mean gain over its seeds is >= ``MIN_MEAN_GAIN`` (4 points) **and** every seed's
  gain is > 0 **and** it has at least ``MIN_SEEDS`` (3) finished seeds; otherwise FAIL (or INCOMPLETE while seeds
  are missing). The gate passes when one arm passes.
* **Power** (``detectable_difference``, ``false_pass_probability``): from episode sampling alone (binomial, an upper
  bound for a fixed goal list), the smallest true gain the protocol detects with 80% power at two-sided 5%, per seed
  and for the mean over seeds, and the chance that an arm with no true change passes. Seed-to-seed variation of
  training adds to both and is only known after the runs (reported beside them).
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np

from .runs import Run, final_eval, find_runs, packed_file, series

__all__ = ["MIN_MEAN_GAIN", "MIN_SEEDS", "WARMSTART_FILE", "gate_rows", "verdict", "detectable_difference",
           "false_pass_probability", "read_warmstart", "warmstart_file", "gate_report"]

MIN_MEAN_GAIN = 0.04
"""Mean gain over seeds (fraction; 0.04 = 4 points) an arm needs to pass [choice]."""
MIN_SEEDS = 3
"""Finished seeds an arm needs for a verdict; every one of them must gain [choice: 3 of 3]."""
WARMSTART_FILE = "warmstart_eval.json"
"""The warm start's held-out evaluation in the study folder (``experiments.evaluate --json``)."""

_Z_ALPHA = 1.959963984540054  # two-sided 5%
_Z_POWER = 0.8416212335729143  # 80% power


def warmstart_file(folder: Path, arm: str | None = None) -> Path:
    """The warm-start evaluation an arm is read against: ``warmstart_eval.<arm>.json`` when the arm starts from a
    warm start of its own (a study variant with ``sft.warmstart.*`` overrides) and that file exists, else
    ``warmstart_eval.json`` (the study's warm start)."""
    own = Path(folder) / f"{Path(WARMSTART_FILE).stem}.{arm}.json"
    return own if arm and own.is_file() else Path(folder) / WARMSTART_FILE


def read_warmstart(folder: Path, split: str, arm: str | None = None) -> tuple[float, int] | None:
    """(success, episodes) of the warm start on ``split`` from ``warmstart_file(folder, arm)``; None when absent."""
    p = warmstart_file(folder, arm)
    if not p.is_file():
        return None
    row = (json.loads(p.read_text()).get("splits") or {}).get(split)
    if not row:
        return None
    return float(row["success"]), int(row["episodes"])


def gate_rows(runs: list[Run], warm: float, key: str, warm_by_arm: dict[str, float] | None = None) -> list[dict]:
    """Per arm (run method), sorted by name: its seeds' final held-out success and gain over ``warm`` (over
    ``warm_by_arm[arm]`` for an arm that starts from a warm start of its own).

    A run counts only when its last evaluation is at its last iteration (a run still going, or one whose final
    evaluation is missing, is listed under ``unfinished``)."""
    arms: dict[str, dict] = {}
    for r in sorted(runs, key=lambda r: (r.method, r.seed)):
        w = (warm_by_arm or {}).get(r.method, warm)
        a = arms.setdefault(r.method, {"arm": r.method, "warm": w, "per_seed": {}, "unfinished": []})
        f = final_eval(r, key)
        if f is None:
            a["unfinished"].append(r.seed)
            continue
        a["per_seed"][r.seed] = {"success": f[0], "episodes": f[1] or 0, "iteration": f[2], "gain": f[0] - w}
    out = []
    for m in sorted(arms):
        a = arms[m]
        gains = [v["gain"] for v in a["per_seed"].values()]
        a["seeds"] = len(gains)
        a["mean_gain"] = float(np.mean(gains)) if gains else float("nan")
        a["above"] = sum(g > 0 for g in gains)
        a["verdict"] = verdict(gains)
        out.append(a)
    return out


def verdict(gains: list[float], min_mean: float = MIN_MEAN_GAIN, min_seeds: int = MIN_SEEDS) -> str:
    """PASS / FAIL / INCOMPLETE for one arm's per-seed gains (fractions), by the rule declared before the runs. A
    finished seed that is not above the warm start decides FAIL before the other seeds finish: the rule needs every
    seed above, so no later seed can make the arm pass (a search may then move on)."""
    if any(g <= 0 for g in gains):
        return "FAIL"
    if len(gains) < min_seeds:
        return "INCOMPLETE"
    ok = float(np.mean(gains)) >= min_mean - 1e-12 and all(g > 0 for g in gains)
    return "PASS" if ok else "FAIL"


def detectable_difference(p: float, n_run: int, n_warm: int, seeds: int) -> tuple[float, float]:
    """(per seed, mean over ``seeds``): the smallest true gain (fraction) that a two-sided 5% test detects with 80%
    power, from episode sampling alone: a run's success over ``n_run`` episodes against the warm start's over
    ``n_warm`` episodes, both binomial at rate ``p`` (an upper bound on the variance for a fixed goal list)."""
    v = p * (1 - p)
    per_seed = (_Z_ALPHA + _Z_POWER) * math.sqrt(v / n_run + v / n_warm)
    mean = (_Z_ALPHA + _Z_POWER) * math.sqrt(v / (seeds * n_run) + v / n_warm)
    return per_seed, mean


def false_pass_probability(p: float, n_run: int, n_warm: int, seeds: int, reps: int = 200_000,
                           seed: int = 0) -> float:
    """Chance that an arm with no true change passes the gate, from episode sampling alone: the warm start's and
    each seed's success drawn binomially at rate ``p`` (Monte Carlo, ``reps`` draws, seeded)."""
    rng = np.random.default_rng(seed)
    warm = rng.binomial(n_warm, p, size=reps) / n_warm  # (reps,)
    runs = rng.binomial(n_run, p, size=(reps, seeds)) / n_run  # (reps, seeds)
    gains = runs - warm[:, None]
    ok = (gains.mean(axis=1) >= MIN_MEAN_GAIN - 1e-12) & (gains > 0).all(axis=1)
    return float(ok.mean())


def _grad_clip(run: Run) -> float:
    """``trainer.grad_clip`` of the run's resolved config (1.0, the default, when it cannot be read)."""
    import yaml

    text = run.read_text("config.yaml")
    cfg = yaml.safe_load(text) if text else None
    return float(((cfg or {}).get("trainer") or {}).get("grad_clip", 1.0))


def _pts(x: float, signed: bool = True) -> str:
    return "–" if not math.isfinite(x) else (f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}")


def _curve(run: Run, key: str) -> str:
    xs, ys = series(run.evals, key)
    return ", ".join(f"{x}: {100 * y:.1f}" for x, y in zip(xs, ys))


def _halves(run: Run, key: str) -> tuple[float, float]:
    """Mean of ``key`` over the first and the second half of the run's logged iterations (with epoch sampling over a
    pool played twice, each half is one pass over the same goals)."""
    _, ys = series(run.metrics, key)
    h = len(ys) // 2
    if h == 0:
        return float("nan"), float("nan")
    return float(np.mean(ys[:h])), float(np.mean(ys[h:2 * h]))


def _mean_of(run: Run, key: str, first: bool, k: int = 5) -> float:
    _, ys = series(run.metrics, key)
    ys = ys[:k] if first else ys[-k:]
    return float(np.mean(ys)) if ys else float("nan")


def gate_report(root: Path, split: str = "eval_depth2") -> str:
    """The gate's reading of ``root`` (a study folder): the warm start, per arm and seed the final held-out success
    and gain, the verdicts, the power of the protocol, and the training diagnostics the issue names."""
    root = Path(root)
    has_runs = (root / "runs").exists() or packed_file(root / "runs") is not None
    runs = find_runs(root / "runs") if has_runs else []
    ws = read_warmstart(root, split)
    md: list[str] = []
    if ws is None:
        return (f"No warm-start evaluation yet ({root.name}/{WARMSTART_FILE}): run the README's "
                "`python -m experiments.evaluate ... --json` command first.\n")
    warm, n_warm = ws
    keys = sorted({k for r in runs for row in r.evals for k in row
                   if re.match(rf"^eval/[^/]+/{re.escape(split)}/success_rate$", k)})
    md += [f"Warm start on `{split}`: **{100 * warm:.1f}%** over {n_warm} episodes (`{WARMSTART_FILE}`).", ""]
    if not runs or not keys:
        return "\n".join(md + ["No runs with a held-out evaluation yet.", ""])
    key = keys[0]
    own: dict[str, tuple[float, int]] = {}  # arms read against a warm start of their own
    for m in sorted({r.method for r in runs}):
        f = warmstart_file(root, m)
        if f.name != WARMSTART_FILE:
            got = read_warmstart(root, split, m)
            if got is not None:
                own[m] = got
    for m, (w, n) in own.items():
        md += [f"Arm `{m}` starts from a warm start of its own: **{100 * w:.1f}%** over {n} episodes "
               f"(`{warmstart_file(root, m).name}`); its gains are read against that.", ""]
    rows = gate_rows(runs, warm, key, {m: w for m, (w, _) in own.items()})
    n_run = max((v["episodes"] for a in rows for v in a["per_seed"].values()), default=0)
    if n_run:
        for label, (w, n_w) in [("the warm start's rate", (warm, n_warm)),
                                *((f"arm `{m}`'s warm start's rate", v) for m, v in own.items())]:
            per_seed, mean = detectable_difference(w, n_run, n_w, MIN_SEEDS)
            fp = false_pass_probability(w, n_run, n_w, MIN_SEEDS)
            md += [f"Power of the protocol at {label} (episode sampling only): a seed's gain is detectable "
                   f"from {100 * per_seed:.1f} points, the mean of {MIN_SEEDS} seeds from {100 * mean:.1f} points "
                   f"({n_run} episodes per run evaluation, 80% power, two-sided 5%); an arm with no true change "
                   f"passes with probability {fp:.3f}.", ""]
    md += ["### Verdict (rule: mean gain >= +4.0 points and every seed above the warm start, >= 3 seeds)", "",
           "| arm | seeds | final held-out success per seed (%) | gain per seed (points) | mean gain | seeds above "
           "| verdict |", "|---|---|---|---|---|---|---|"]
    for a in rows:
        ps = a["per_seed"]
        succ = ", ".join(f"{s}: {100 * v['success']:.1f}" for s, v in sorted(ps.items())) or "–"
        gain = ", ".join(f"{s}: {_pts(v['gain'])}" for s, v in sorted(ps.items())) or "–"
        extra = f" (unfinished: seeds {a['unfinished']})" if a["unfinished"] else ""
        md.append(f"| {a['arm']} | {a['seeds']} | {succ} | {gain} | {_pts(a['mean_gain'])} | {a['above']}/{a['seeds']}"
                  f" | **{a['verdict']}**{extra} |")
    passed = [a["arm"] for a in rows if a["verdict"] == "PASS"]
    open_arms = [a["arm"] for a in rows if a["verdict"] == "INCOMPLETE"]
    failed = [a["arm"] for a in rows if a["verdict"] == "FAIL"]
    md += ["", ("**The gate passes** (" + ", ".join(passed) + ")." if passed else
                "**The gate does not pass**: no arm meets the rule." if not open_arms else
                f"**The gate does not pass** so far: no finished arm meets the rule; still incomplete: "
                f"{', '.join(open_arms)}." if failed else
                "The gate is not decided yet (arms incomplete)."), ""]
    md += ["### Curves and diagnostics per run (secondary)", "",
           "| run | held-out success by iteration (%) | training success, first 5 → last 5 iterations | training "
           "success, first half → second half of the iterations | KL to reference, last 5 | entropy, first 5 → last 5 "
           "| episode length, first 5 → last 5 | grad norm > clip |",
           "|---|---|---|---|---|---|---|---|"]
    for r in sorted(runs, key=lambda r: (r.method, r.seed)):
        _, gn = series(r.metrics, "loss/grad_norm")
        clip = _grad_clip(r)
        frac = f"{np.mean([g > clip for g in gn]):.2f}" if gn else "–"
        md.append(f"| {r.method} seed {r.seed} | {_curve(r, key)} | "
                  f"{_mean_of(r, 'rollout/success_rate', True):.3f} → {_mean_of(r, 'rollout/success_rate', False):.3f}"
                  " | {:.3f} → {:.3f}".format(*_halves(r, "rollout/success_rate")) +
                  f" | {_mean_of(r, 'loss/kl', False):.4f} | "
                  f"{_mean_of(r, 'loss/entropy', True):.3f} → {_mean_of(r, 'loss/entropy', False):.3f} | "
                  f"{_mean_of(r, 'rollout/episode_length', True):.2f} → "
                  f"{_mean_of(r, 'rollout/episode_length', False):.2f} | {frac} |")
    for arms_of, (w, _), fname in [(lambda m: m not in own, ws, WARMSTART_FILE),
                                   *((lambda m, a=a: m == a, v, warmstart_file(root, a).name) for a, v in own.items())]:
        it0 = [row.get(key) for r in runs if arms_of(r.method) for row in r.evals
               if row.get("iteration") == 0 and key in row]
        if it0:
            md += ["", f"Protocol check: the runs' own iteration-0 evaluation (their warm start, {len(it0)} runs, the "
                       f"same evaluation seed) gives {', '.join(sorted({f'{100 * v:.1f}%' for v in it0}))}, against "
                       f"{100 * w:.1f}% from `{fname}` (other sampling seeds)."]
    return "\n".join(md) + "\n"
