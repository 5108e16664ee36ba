"""The ground-truth benchmark's HGPO rows again, under both HGPO rules, on the committed study's own batches.

    python -m benchmarks.hgpo_rescore                  # results/estimator-bench: hgpo_rule.md + two CSV files
    python -m benchmarks.hgpo_rescore --seeds 2 --learn-seeds 2 --out OUT   # a subset, to time it

``results/estimator-bench/`` was made when HGPO's only rule was ``start_marker``; the default is now
``verl_agent`` (``docs/method.md``, "HGPO"). Every (family, seed) batch of that benchmark is drawn from the seed
alone and every method of its learning comparison trains on its own random streams (``groundtruth.bench``,
``groundtruth.learning``), so HGPO can be scored and trained again without the other methods or the language
model: this module rebuilds each batch from the study's ``config.json`` and scores ``hgpo`` under both rules
(advantage quality: every scenario's full batch and the LM sub-batch's text rows; learning: every run of the
comparison). The ``start_marker`` results are checked against the committed ``bench_rows.csv.gz`` and
``learning_runs.csv.gz`` (their 4 significant digits): they reproduce them, so the ``verl_agent`` rows stand on the
same batches and starts as every other committed row. Writes, beside the committed files (which stay as they are):

* ``hgpo_rows.csv.gz``: ``bench_rows``' columns plus ``hgpo_rule``, one row per (family, scenario, source, seed, rule);
* ``hgpo_learning_runs.csv.gz``: ``learning_runs``' columns, methods ``hgpo`` (``verl_agent``) and
  ``hgpo@start_marker``;
* ``hgpo_rule.md``: the tables, with the other methods' committed rows for the ranks, gaps and comparisons.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import defaultdict  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from analysis.stats import format_ci, t_ci  # noqa: E402
from common.tables import read_csv, write_csv  # noqa: E402
from groundtruth.bench import BenchConfig, Scenario, estimate, seed_setup  # noqa: E402
from groundtruth.learning import LearnConfig, train_one  # noqa: E402
from groundtruth.metrics import METRIC_NAMES, batch_metrics  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
STUDY = REPO / "results" / "estimator-bench"
RULES = ("start_marker", "verl_agent")
#: the estimators HGPO is ranked among (registered ones; the hidden-state ones at the headline proxy and ε)
RANKED = ("grpo", "rloo", "gigpo", "hgpo", "bigpo", "bipace_v", "bipace_q")
HEADLINE_EPS = 0.05
#: relative tolerance of the reproduction check: the committed CSVs keep 4 significant digits
TOLERANCE = 1e-3
#: the largest difference in success a recomputed ``start_marker`` learning curve may show (exit status 1 beyond it)
LEARNING_TOLERANCE = 0.01

__all__ = ["configs", "bench_rows", "learning_curves", "check_rows", "check_curves", "report", "main"]


def configs(config_json: Path) -> tuple[BenchConfig, LearnConfig]:
    """The benchmark's settings as the committed study recorded them."""
    raw = json.loads(Path(config_json).read_text())
    b, learn = dict(raw["bench"]), dict(raw["learning"])
    b["scenarios"] = tuple(Scenario(**s) for s in b["scenarios"])
    learn["scenarios"] = tuple(Scenario(**s) for s in learn["scenarios"])
    for d in (b, learn):
        for k, v in d.items():
            if isinstance(v, list):
                d[k] = tuple(v)
    return BenchConfig(**b), LearnConfig(**learn)


def _row(common: dict, batch, rule: str, su, sel, grads, source: str, cfg: BenchConfig) -> dict:
    true_adv = su.truth.true_adv[sel]
    adv, step, cl, secs = estimate(batch, "hgpo", float("nan"), cfg.norm_mode, true_adv, su.state_vecs,
                                   options={"hgpo_rule": rule})
    m = batch_metrics(adv, step, cl, true_adv, su.ro.group[sel], su.ro.state[sel], su.ro.action[sel], su.pi, *grads)
    return {**common, "n_rows": len(batch), "source": source, "method": "hgpo", "epsilon": float("nan"),
            "seconds": secs, **m, "hgpo_rule": rule}


def bench_rows(cfg: BenchConfig, rules=RULES, lm_rows: bool = True, log=print) -> list[dict]:
    """HGPO's rows of ``groundtruth.bench.run_bench`` under each rule: every (family, seed, scenario) full batch
    (source ``text``) and, with ``lm_rows``, the LM sub-batch's (``text (LM rows)``), built as ``bench_seed`` and
    ``bench_seed_lm`` build them (the LM itself is not needed: HGPO reads the text)."""
    from groundtruth.policy import exact_gradient, occupancy, start_distribution
    from groundtruth.sampling import render_observations, to_step_batch

    rows: list[dict] = []
    for fi, family in enumerate(cfg.families):
        for seed in range(cfg.seeds):
            t0 = time.perf_counter()
            su = seed_setup(cfg, family, fi, seed)
            grads = (su.truth.g_target, su.truth.g_objective)
            for si, sc in enumerate(cfg.scenarios):
                mdp = su.mdps[sc.name]
                obs = render_observations(mdp, su.ro, np.random.default_rng([seed, fi, 1, si]))
                batch = to_step_batch(mdp, su.ro, obs)
                common = dict(family=family, scenario=sc.name, seed=seed)
                rows += [_row(common, batch, r, su, slice(None), grads, "text", cfg) for r in rules]
                if lm_rows and cfg.lm and sc.name == cfg.lm_scenario and seed < cfg.lm_seeds:
                    sub = np.flatnonzero((su.ro.group < cfg.lm_groups) & (su.ro.traj < cfg.lm_trajectories))
                    d_sub, _ = occupancy(su.mdp0, su.pi, start_distribution(su.mdp0, su.tasks[: cfg.lm_groups]))
                    g_sub = (exact_gradient(su.mdp0, su.pi, su.truth.values, d_sub, "target"),
                             exact_gradient(su.mdp0, su.pi, su.truth.values, d_sub, "objective"))
                    sb = batch.select(sub.tolist())
                    rows += [_row(common, sb, r, su, sub, g_sub, "text (LM rows)", cfg) for r in rules]
            log(f"[bench] {family} seed {seed}: {time.perf_counter() - t0:.1f}s")
    return rows


def learning_curves(cfg: LearnConfig, rules=RULES, log=print) -> dict[str, dict[str, np.ndarray]]:
    """{task: {rule: (seeds, E) exact success}} of HGPO trained as ``groundtruth.learning.learn_seed`` trains
    every method (same start, task draws and proxy), under each rule."""
    from groundtruth.bench import calibrated_logits, make_mdp
    from groundtruth.embed import ProxyConfig, ProxyEmbedder

    out: dict[str, dict[str, list]] = {}
    for fi, family in enumerate(cfg.families):
        kwargs = (cfg.family_kwargs or {}).get(family, {})
        for sc in cfg.scenarios:
            task = f"{family}/{sc.name}"
            out[task] = {r: [] for r in rules}
            t0 = time.perf_counter()
            for seed in range(cfg.seeds):
                mdp = make_mdp(family, sc, cfg.horizon, **kwargs)
                theta0, _ = calibrated_logits(mdp, cfg.start_success, cfg.policy_noise,
                                              np.random.default_rng([seed, fi, 5]))
                proxy = ProxyEmbedder(mdp.features, ProxyConfig(obs_noise=cfg.proxy_noise, spread=cfg.proxy_spread,
                                                                seed=seed))
                for r in rules:
                    out[task][r].append(train_one(mdp, "hgpo", theta0, cfg, seed, proxy, {"hgpo_rule": r}))
            log(f"[learn] {task}: {cfg.seeds} seeds, {time.perf_counter() - t0:.1f}s")
    return {t: {r: np.stack(v) for r, v in d.items()} for t, d in out.items()}


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= TOLERANCE * max(abs(a), abs(b)) + 1e-6


def check_rows(new: list[dict], committed: list[dict]) -> tuple[int, list[str]]:
    """(rows compared, mismatches) of the ``start_marker`` rows against the committed ``hgpo`` rows."""
    ref = {(r["family"], r["scenario"], r["source"], int(r["seed"])): r for r in committed if r["method"] == "hgpo"}
    bad, n = [], 0
    for r in new:
        if r["hgpo_rule"] != "start_marker":
            continue
        c = ref.get((r["family"], r["scenario"], r["source"], r["seed"]))
        if c is None:
            bad.append(f"{r['family']}/{r['scenario']}/{r['source']}/seed {r['seed']}: no committed row")
            continue
        n += 1
        for m in METRIC_NAMES:
            if m in c and not _close(float(r[m]), float(c[m]) if c[m] not in ("", "nan") else math.nan):
                bad.append(f"{r['family']}/{r['scenario']}/{r['source']}/seed {r['seed']}: {m} {r[m]:.4g} "
                           f"against {c[m]}")
    return n, bad


def _committed_curves(rows: list[dict]) -> dict[str, dict[str, np.ndarray]]:
    """{task: {method: (seeds, E)}} of ``learning_runs.csv.gz``."""
    acc: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(dict)))
    for r in rows:
        acc[r["task"]][r["method"]][int(r["seed"])][int(r["iteration"])] = float(r["success"])
    return {t: {m: np.array([[its[i] for i in sorted(its)] for _, its in sorted(seeds.items())])
                for m, seeds in ms.items()} for t, ms in acc.items()}


def check_curves(new: dict, committed: dict) -> tuple[int, list[str], float]:
    """(runs compared, the runs whose ``start_marker`` curve differs from the committed ``hgpo`` one beyond its 4
    digits, the largest absolute difference in success over all runs and iterations)."""
    bad, n, worst = [], 0, 0.0
    for task, d in new.items():
        ref = committed.get(task, {}).get("hgpo")
        got = d.get("start_marker")
        if got is None:
            continue
        if ref is None or ref.shape[1] != got.shape[1]:
            bad.append(f"{task}: no committed hgpo curves of this length")
            worst = math.inf
            continue
        for seed, run in enumerate(got[:len(ref)]):
            n += 1
            diff = np.abs(run - ref[seed])
            worst = max(worst, float(diff.max()))
            if not all(_close(float(a), float(b)) for a, b in zip(run, ref[seed])):
                first = int(np.flatnonzero([not _close(float(a), float(b)) for a, b in zip(run, ref[seed])])[0])
                bad.append(f"{task} seed {seed} (from iteration {first}; final {run[-1]:.4g} against "
                           f"{ref[seed][-1]:.4g})")
    return n, bad, worst


# ---------------------------------------------------------------------------------------------------------- report


def _fmt(values, digits: int = 3, signed: bool = False) -> str:
    """Mean over seeds and its 95% Student-t interval."""
    return format_ci(t_ci(values), digits=digits, signed=signed)


def _per_seed(rows: list[dict], metric: str) -> dict[int, float]:
    return {int(r["seed"]): float(r[metric]) for r in rows}


def _rank(means: dict[str, float], method: str) -> str:
    better = sum(1 for k, v in means.items() if k != method and v > means[method] + 1e-12)
    return f"{better + 1}/{len(means)}"


def _bench_md(new: list[dict], committed: list[dict]) -> list[str]:
    by: dict = defaultdict(list)
    for r in new:
        by[(r["family"], r["scenario"], r["source"], r["hgpo_rule"])].append(r)
    others: dict = defaultdict(list)
    for r in committed:
        eps = r["epsilon"]
        no_eps = eps in ("", "nan")
        headline = r["source"].startswith("proxy σ=0.2") and not no_eps and abs(float(eps) - HEADLINE_EPS) < 1e-9
        if r["method"] in RANKED and r["method"] != "hgpo" and (no_eps or headline):
            src = "text (LM rows)" if r["source"].endswith("(LM rows)") else "text"
            others[(r["family"], r["scenario"], src, r["method"])].append(r)
    md = ["### Advantage quality: HGPO under each rule on the committed batches", "",
          "Mean over the seeds [95% t-interval]; `→`: `start_marker` (committed) → `verl_agent`. Δ: the paired "
          "difference `verl_agent − start_marker` over the seeds. Gap to GiGPO: HGPO's Pearson minus GiGPO's on the "
          "same batch (GiGPO's committed rows). Rank: HGPO's place by mean whole-advantage Pearson among the 7 "
          "registered estimators (`bigpo`, `bipace_v`, `bipace_q` at the headline proxy σ = 0.2, ε = 0.05; the LM "
          "sub-batch ranks among those recomputed on its rows); ties share the better place. Zero rows: the share "
          "of rows whose HGPO advantage is 0 (no level kept).", "",
          "| family | scenario | rows | seeds | Pearson | Δ Pearson | Spearman | sign agree | grad cos g* | "
          "zero rows | gap to GiGPO (Pearson) | rank |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(f, s, src) for f, s, src, _ in by}, key=lambda k: (k[0], k[2] != "text", k[1]))
    for fam, scen, src in keys:
        sm, va = by[(fam, scen, src, "start_marker")], by[(fam, scen, src, "verl_agent")]
        gi = _per_seed(others[(fam, scen, src, "gigpo")], "pearson")
        seeds = sorted(_per_seed(sm, "pearson"))

        def arrow(metric, rows_a=sm, rows_b=va, seeds=seeds):
            a, b = _per_seed(rows_a, metric), _per_seed(rows_b, metric)
            return f"{_fmt([a[s] for s in seeds], 2)} → {_fmt([b[s] for s in seeds], 2)}"

        p_sm, p_va = _per_seed(sm, "pearson"), _per_seed(va, "pearson")
        delta = _fmt([p_va[s] - p_sm[s] for s in seeds], 3, signed=True)
        gap = (f"{_fmt([p_sm[s] - gi[s] for s in seeds], 3, signed=True)} → "
               f"{_fmt([p_va[s] - gi[s] for s in seeds], 3, signed=True)}") if gi else "–"
        ranks = []
        for rule_rows in (sm, va):
            means = {m: float(np.mean([float(r["pearson"]) for r in others[(fam, scen, src, m)]]))
                     for m in RANKED if m != "hgpo" and others[(fam, scen, src, m)]}
            means["hgpo"] = float(np.mean([float(r["pearson"]) for r in rule_rows]))
            ranks.append(_rank(means, "hgpo"))
        rows_label = "full batch" if src == "text" else "LM sub-batch"
        md.append(f"| {fam} | {scen} | {rows_label} | {len(seeds)} | {arrow('pearson')} | {delta} | "
                  f"{arrow('spearman')} | {arrow('sign_agree')} | {arrow('grad_cos')} | {arrow('zero_step')} | "
                  f"{gap} | {ranks[0]} → {ranks[1]} |")
    return md + [""]


def _learning_md(new: dict, committed: dict, reps: int, its: np.ndarray) -> list[str]:
    from analysis.reanalysis import _p, _stratified_perm_p
    from analysis.stats import holm, probability_of_improvement, steps_to_threshold

    tasks = sorted(new)
    auc = {t: {r: c.mean(axis=1) for r, c in new[t].items()} for t in tasks}
    final = {t: {r: c[:, -1] for r, c in new[t].items()} for t in tasks}
    md = ["### Tabular learning: HGPO trained under each rule", "",
          "Mean over the seeds [95% t-interval] of `auc` (mean exact success over the logged iterations) and of the "
          "final success; `→`: `start_marker` → `verl_agent`. Iterations to 0.5 / 0.8: median over the seeds (∞ when "
          "fewer than half reach it), as in `summary.md`.", "",
          "| task | seeds | auc | Δ auc | final | iterations to 0.5 | iterations to 0.8 | GiGPO's auc (committed) |",
          "|---|---|---|---|---|---|---|---|"]
    for t in tasks:
        n = len(auc[t]["verl_agent"])

        def thr(rule, level, t=t):
            hits = np.array([np.inf if (k := steps_to_threshold(its, run, level)) is None else k
                             for run in new[t][rule]], dtype=float)
            reached = np.isfinite(hits)
            med = f"{np.median(hits):.0f}" if reached.mean() >= 0.5 and np.isfinite(np.median(hits)) else "∞"
            return f"{med} ({reached.mean():.0%} reach)"

        gi = committed.get(t, {}).get("gigpo")
        md.append(f"| {t} | {n} | {_fmt(auc[t]['start_marker'])} → {_fmt(auc[t]['verl_agent'])} | "
                  f"{_fmt(auc[t]['verl_agent'] - auc[t]['start_marker'], signed=True)} | "
                  f"{_fmt(final[t]['start_marker'])} → {_fmt(final[t]['verl_agent'])} | "
                  f"{thr('start_marker', 0.5)} → {thr('verl_agent', 0.5)} | "
                  f"{thr('start_marker', 0.8)} → {thr('verl_agent', 0.8)} | "
                  f"{'–' if gi is None else _fmt(gi[:n].mean(axis=1))} |")
    # the comparison table of reanalysis.md, with HGPO's scores under each rule
    score = {m: {t: committed[t][m].mean(axis=1) for t in tasks} for m in committed[tasks[0]] if m != "hgpo"}
    n = len(auc[tasks[0]]["verl_agent"])
    score = {m: {t: v[:n] for t, v in ts.items()} for m, ts in score.items()}
    pairs = [(x, y) for x in ("bipace_q", "bipace_v") for y in ("grpo", "rloo", "gigpo", "hgpo", "bigpo",
                                                               "bipace_v", "bipace_q") if x != y]
    tables = {}
    for rule in RULES:
        sc = {**score, "hgpo": {t: auc[t][rule] for t in tasks}}
        res, seen = [], set()
        for x, y in pairs:
            if x in sc and y in sc and frozenset((x, y)) not in seen:
                seen.add(frozenset((x, y)))
                poi = float(np.mean([probability_of_improvement(sc[x][t], sc[y][t]) for t in tasks]))
                res.append((x, y, poi, _stratified_perm_p(sc[x], sc[y], reps=reps)))
        tables[rule] = (res, holm([r[3] for r in res]))
        # HGPO against GiGPO (not in reanalysis.md's table; its own permutation p, no correction)
        tables[rule + "/gigpo"] = (float(np.mean([probability_of_improvement(sc["hgpo"][t], sc["gigpo"][t])
                                                  for t in tasks])), _stratified_perm_p(sc["hgpo"], sc["gigpo"],
                                                                                        reps=reps))
    md += ["", f"P(X > Y) on auc, mean over the {len(tasks)} tasks; p: permutation test with the labels permuted "
           f"within each task ({reps:,} permutations); Holm over the {len(tables['verl_agent'][0])} comparisons of "
           "`reanalysis.md`'s table, recomputed with HGPO's scores under each rule (the rows without HGPO change "
           "only through the correction).", "",
           "| comparison | P(X > Y) start_marker → verl_agent | Holm p start_marker → verl_agent |",
           "|---|---|---|"]
    (res_a, adj_a), (res_b, adj_b) = tables["start_marker"], tables["verl_agent"]
    for (x, y, pa, _), aa, (_, _, pb, _), ab in zip(res_a, adj_a, res_b, adj_b):
        md.append(f"| {x} vs {y} | {pa:.3f} → {pb:.3f} | {_p(aa)} → {_p(ab)} |")
    (pa, qa), (pb, qb) = tables["start_marker/gigpo"], tables["verl_agent/gigpo"]
    md.append(f"| hgpo vs gigpo (uncorrected p) | {pa:.3f} → {pb:.3f} | {_p(qa)} → {_p(qb)} |")
    return md + [""]


def report(new_rows: list[dict], committed_rows: list[dict], new_curves: dict, committed_curves: dict,
           header: list[str], reps: int = 2000, iterations: np.ndarray | None = None) -> str:
    """``hgpo_rule.md``; ``iterations``: the logged iterations of the curves (default 0, 1, ...)."""
    md = ["# HGPO under both rules on the committed benchmark", "",
          "Generated by `python -m benchmarks.hgpo_rescore` (`benchmarks/hgpo_rescore.py`); do not edit by hand. "
          "`start_marker`: the rule `summary.md`, `reanalysis.md` and the CSV tables were made with; `verl_agent`: "
          "HGPO's published code, the default since 2026-12-06 (`docs/method.md`, \"HGPO\"). Every other method's "
          "row is the committed one.", "", *header, ""]
    if new_rows:
        md += _bench_md(new_rows, committed_rows)
    if new_curves:
        its = (np.arange(next(iter(new_curves.values()))["verl_agent"].shape[1]) if iterations is None
               else np.asarray(iterations))
        md += _learning_md(new_curves, committed_curves, reps, its)
    return "\n".join(md)


def _curve_rows(curves: dict) -> list[dict]:
    out = []
    for task, d in curves.items():
        for rule, label in (("verl_agent", "hgpo"), ("start_marker", "hgpo@start_marker")):
            for seed, run in enumerate(d.get(rule, [])):
                out += [{"task": task, "method": label, "seed": seed, "iteration": it, "success": float(v)}
                        for it, v in enumerate(run)]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.hgpo_rescore", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--study", type=Path, default=STUDY,
                   help="the committed benchmark (default results/estimator-bench)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: the study)")
    p.add_argument("--seeds", type=int, default=None, help="benchmark seeds (default: the study's)")
    p.add_argument("--learn-seeds", type=int, default=None, help="learning seeds (default: the study's)")
    p.add_argument("--skip-bench", action="store_true")
    p.add_argument("--skip-learning", action="store_true")
    p.add_argument("--reps", type=int, default=2000, help="permutations of the learning comparisons")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    out = args.out or args.study
    out.mkdir(parents=True, exist_ok=True)
    bench_cfg, learn_cfg = configs(args.study / "config.json")
    if args.seeds:
        bench_cfg = replace(bench_cfg, seeds=args.seeds, lm_seeds=min(args.seeds, bench_cfg.lm_seeds))
    if args.learn_seeds:
        learn_cfg = replace(learn_cfg, seeds=args.learn_seeds)
    command = "python -m benchmarks.hgpo_rescore" + "".join(
        " " + shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    t0 = time.perf_counter()
    rows = [] if args.skip_bench else bench_rows(bench_cfg)
    t1 = time.perf_counter()
    curves = {} if args.skip_learning else learning_curves(learn_cfg)
    t2 = time.perf_counter()
    committed_rows = read_csv(args.study / "bench_rows.csv.gz")
    committed_curves = _committed_curves(read_csv(args.study / "learning_runs.csv.gz"))
    n_rows, bad_rows = check_rows(rows, committed_rows)
    n_runs, bad_runs, worst = check_curves(curves, committed_curves)
    for line in (bad_rows + bad_runs)[:20]:
        print("[check] " + line, file=sys.stderr)
    header = [f"Command: `{command}`", "",
              f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores visible, torch {torch.__version__} "
              f"(1 thread), numpy {np.__version__}, Python {platform.python_version()}; benchmark rows "
              f"{t1 - t0:.0f} s, learning {t2 - t1:.0f} s.", "",
              f"Check: HGPO recomputed under `start_marker` against the committed rows (relative tolerance "
              f"{TOLERANCE:g}, the CSVs' 4 significant digits): {n_rows} benchmark rows, {len(bad_rows)} differ; "
              f"{n_runs} learning runs, {len(bad_runs)} differ"
              + (f" ({'; '.join(bad_runs)}), by at most {worst:.4f} in success: training amplifies "
                 "rounding-size differences from one update to the next" if bad_runs else "") + "."]
    if rows:
        write_csv(out / "hgpo_rows.csv.gz", rows, digits=4)
    if curves:
        write_csv(out / "hgpo_learning_runs.csv.gz", _curve_rows(curves), digits=4)
    (out / "hgpo_rule.md").write_text(report(rows, committed_rows, curves, committed_curves, header, args.reps,
                                             learn_cfg.eval_iterations()))
    print(f"[hgpo_rescore] wrote {out} (benchmark rows {t1 - t0:.0f} s, learning {t2 - t1:.0f} s); "
          f"check: {len(bad_rows)} of {n_rows} rows and {len(bad_runs)} of {n_runs} runs differ")
    return 1 if bad_rows or worst > LEARNING_TOLERANCE else 0


if __name__ == "__main__":
    raise SystemExit(main())
