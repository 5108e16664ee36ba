"""Tables, plots and the Markdown summary of the ground-truth benchmark (read only the result dicts)."""
from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from analysis.stats import iqm, poi_ci, steps_to_threshold, stratified_bootstrap_ci
from common.tables import write_csv

from .metrics import METRIC_NAMES, mean_ci

__all__ = ["summarise_bench", "summarise_learning", "write_report"]

_ORDER = ["oracle", "gigpo|state", "bipace_q|state", "grpo", "rloo", "gigpo", "hgpo", "bigpo", "bipace_v", "bipace_q"]
_COLORS = {"grpo": "#7f7f7f", "rloo": "#bcbd22", "gigpo": "#1f77b4", "hgpo": "#17becf", "bigpo": "#2ca02c",
           "bipace_v": "#ff7f0e", "bipace_q": "#d62728", "oracle": "#000000", "gigpo|state": "#9467bd",
           "bipace_q|state": "#8c564b"}


def _key_order(m: str) -> int:
    return _ORDER.index(m) if m in _ORDER else len(_ORDER)


def _fmt(x: float, nd: int = 3) -> str:
    return "–" if x is None or not np.isfinite(x) else f"{x:.{nd}f}"


def _fmt_ci(m, lo, hi, nd: int = 2) -> str:
    if not np.isfinite(m):
        return "–"
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return f"{m:.{nd}f}"
    return f"{m:.{nd}f} [{lo:.{nd}f}, {hi:.{nd}f}]"


def _eps_key(e) -> float:
    return -1.0 if e is None or (isinstance(e, float) and math.isnan(e)) else float(e)


def summarise_bench(rows: list[dict]) -> list[dict]:
    """Mean and 95% t-interval over seeds for every (family, scenario, source, method, ε) and metric."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["family"], r["scenario"], r["source"], r["method"], _eps_key(r["epsilon"]))].append(r)
    out = []
    for (fam, sc, src, meth, eps), rs in groups.items():
        row = {"family": fam, "scenario": sc, "source": src, "method": meth, "epsilon": eps if eps >= 0 else "",
               "seeds": len(rs), "rows_per_batch": float(np.mean([r["n_rows"] for r in rs])),
               "ms_per_batch": 1000 * float(np.mean([r["seconds"] for r in rs]))}
        for m in METRIC_NAMES:
            mu, lo, hi, _ = mean_ci([r[m] for r in rs])
            row[m], row[m + "_lo"], row[m + "_hi"] = mu, lo, hi
        out.append(row)
    out.sort(key=lambda r: (r["family"], r["scenario"], r["source"], _key_order(r["method"]),
                            _eps_key(r["epsilon"] if r["epsilon"] != "" else None)))
    return out


def summarise_learning(learn: dict, thresholds, reps: int = 2000) -> dict:
    """IQM / PoI / thresholds from the learning curves.

    Scores per run: ``auc`` = mean exact success over the evaluated iterations (sample efficiency) and
    ``final`` = success at the last iteration; score matrices are (seeds, families).
    """
    its = np.asarray(learn["iterations"])
    fams = list(learn["curves"])
    methods = list(next(iter(learn["curves"].values())))
    scores = {}
    for kind in ("auc", "final"):
        scores[kind] = {m: np.stack([(learn["curves"][f][m].mean(axis=1) if kind == "auc"
                                      else learn["curves"][f][m][:, -1])
                                     for f in fams], axis=1) for m in methods}  # (seeds, families)
    agg = []
    for m in methods:
        row = {"method": m}
        for kind in ("auc", "final"):
            x = scores[kind][m]
            row[f"iqm_{kind}"], row[f"iqm_{kind}_lo"], row[f"iqm_{kind}_hi"] = stratified_bootstrap_ci(x, iqm,
                                                                                                       reps=reps,
                                                                                                       seed=1)
            row[f"mean_{kind}"] = float(x.mean())
        agg.append(row)
    poi = []
    refs = [m for m in ("bipace_q", "bipace_v") if m in methods]
    for a in refs:
        for b in methods:
            if b == a:
                continue
            x, y = scores["auc"][a], scores["auc"][b]
            point, lo, hi = poi_ci(x, y, reps=reps, seed=2)
            poi.append({"x": a, "y": b, "score": "auc", "poi": point, "lo": lo, "hi": hi})
    thr = []
    for f in fams:
        for m in methods:
            c = learn["curves"][f][m]
            for t in thresholds:
                hits = np.array([np.inf if (k := steps_to_threshold(its, run, t)) is None else k for run in c],
                                dtype=float)
                reached = np.isfinite(hits)
                thr.append({"family": f, "method": m, "threshold": t, "reached": float(reached.mean()),
                            "median_iterations": float(np.median(hits)) if reached.mean() >= 0.5 else math.inf,
                            "mean_iterations_if_reached": float(hits[reached].mean()) if reached.any() else math.inf})
    per_task = []
    for j, f in enumerate(fams):
        row = {"task": f}
        for m in methods:
            mu, lo, hi, _ = mean_ci(scores["auc"][m][:, j])
            row[m], row[m + "_lo"], row[m + "_hi"] = mu, lo, hi
        for a, b in (("bipace_q", "gigpo"), ("bipace_q", "bigpo"), ("bipace_q", "grpo")):
            if a in methods and b in methods:
                row[f"poi_{a}_vs_{b}"], row[f"poi_{a}_vs_{b}_lo"], row[f"poi_{a}_vs_{b}_hi"] = poi_ci(
                    scores["auc"][a][:, j:j + 1], scores["auc"][b][:, j:j + 1], reps=reps, seed=3)
        per_task.append(row)
    runs = [{"task": f, "method": m, "seed": k, "iteration": int(it), "success": float(v)}
            for f in fams for m in methods for k, run in enumerate(learn["curves"][f][m]) for it, v in zip(its, run)]
    curves = []
    for f in fams:
        for m in methods:
            c = learn["curves"][f][m]  # (seeds, E)
            for j, it in enumerate(its):
                col = c[:, j]
                curves.append({"family": f, "method": m, "iteration": int(it), "iqm": float(iqm(col)),
                               "mean": float(col.mean()), "q25": float(np.quantile(col, 0.25)),
                               "q75": float(np.quantile(col, 0.75))})
    return {"aggregate": agg, "poi": poi, "thresholds": thr, "curves": curves, "families": fams, "methods": methods,
            "per_task": per_task, "runs": runs,
            "start": {f: float(np.mean(v)) for f, v in learn["start"].items()}}


# ============================================================================================ plots
def _plot_eps(summary, family, metric, ylabel, path, sources, scenarios, plain_methods):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(scenarios), figsize=(4.2 * len(scenarios), 3.4), sharey=True, squeeze=False)
    styles = ["-", "--", ":", "-."]
    for ax, sc in zip(axes[0], scenarios):
        rows = [r for r in summary if r["family"] == family and r["scenario"] == sc]
        eps_all = sorted({r["epsilon"] for r in rows if r["epsilon"] != ""})
        if not eps_all:
            continue
        xs = np.array(eps_all, dtype=float)
        xplot = np.where(xs == 0, xs[xs > 0].min() / 2 if (xs > 0).any() else 1e-3, xs)
        for si, src in enumerate(sources):
            for m in ("bigpo", "bipace_v", "bipace_q"):
                rs = sorted([r for r in rows if r["source"] == src and r["method"] == m], key=lambda r: r["epsilon"])
                if not rs:
                    continue
                y = np.array([r[metric] for r in rs])
                lo = np.array([r[metric + "_lo"] for r in rs])
                hi = np.array([r[metric + "_hi"] for r in rs])
                ax.plot(xplot[: len(y)], y, styles[si % len(styles)], color=_COLORS[m], marker="o", ms=3,
                        label=f"{m} ({src})")
                ax.fill_between(xplot[: len(y)], lo, hi, color=_COLORS[m], alpha=0.12)
        for m in plain_methods:
            rs = [r for r in rows if r["method"] == m and r["source"] in ("text", "truth")]
            if rs and np.isfinite(rs[0][metric]):
                ax.axhline(rs[0][metric], color=_COLORS.get(m, "k"), lw=1, ls=(0, (4, 2)) if "|" in m else "-",
                           alpha=0.8, label=m)
        ax.set_xscale("log")
        ax.set_title(f"{family} / {sc}", fontsize=9)
        ax.set_xlabel("ε (cosine distance; ε=0 plotted at the left edge)", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(ylabel)
    handles, labels = axes[0][-1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80, bbox_inches="tight")
    plt.close(fig)


def _plot_learning(ls, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fams = ls["families"]
    fig, axes = plt.subplots(1, len(fams), figsize=(5 * len(fams), 3.6), squeeze=False)
    for ax, f in zip(axes[0], fams):
        for m in sorted(ls["methods"], key=_key_order):
            rs = [r for r in ls["curves"] if r["family"] == f and r["method"] == m]
            x = [r["iteration"] for r in rs]
            ax.plot(x, [r["iqm"] for r in rs], color=_COLORS.get(m, "k"), label=m, lw=1.5 if "bipace" in m else 1.0,
                    ls="--" if m == "oracle" else "-")
            ax.fill_between(x, [r["q25"] for r in rs], [r["q75"] for r in rs], color=_COLORS.get(m, "k"), alpha=0.08)
        ax.set_title(f"{f}: exact success (IQM over seeds, band = IQR)", fontsize=9)
        ax.set_xlabel("iteration")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("success rate")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _plot_poi(ls, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = ls["poi"]
    if not rows:
        return
    xs = sorted({r["x"] for r in rows})
    fig, axes = plt.subplots(1, len(xs), figsize=(4.5 * len(xs), 3.2), squeeze=False)
    for ax, x in zip(axes[0], xs):
        rs = sorted([r for r in rows if r["x"] == x], key=lambda r: _key_order(r["y"]))
        ys = np.arange(len(rs))
        ax.errorbar([r["poi"] for r in rs], ys,
                    xerr=[[r["poi"] - r["lo"] for r in rs], [r["hi"] - r["poi"] for r in rs]],
                    fmt="o", color=_COLORS.get(x, "k"), capsize=3)
        ax.axvline(0.5, color="k", lw=0.8, ls="--")
        ax.set_yticks(ys, [f"vs {r['y']}" for r in rs], fontsize=8)
        ax.set_xlim(0, 1)
        ax.set_xlabel(f"P({x} > other), score = mean success over iterations", fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# ============================================================================================ markdown
def _md_table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def _headline(summary, family, scenario, source, eps) -> list[dict]:
    """Rows for one setting: plain estimators and references, and the hidden ones at (source, eps)."""
    rows = []
    for r in summary:
        if r["family"] != family or r["scenario"] != scenario:
            continue
        if r["source"] in ("text",
                           "truth") or (r["source"] == source and r["epsilon"] != ""
                                        and abs(r["epsilon"] - eps) < 1e-12):
            rows.append(r)
    return sorted(rows, key=lambda r: _key_order(r["method"]))


def write_report(out: Path, bench: dict | None, learn: dict | None, bench_cfg=None, learn_cfg=None,
                 command: str = "", machine: str = "", headline_source: str = "proxy σ=0.2", headline_eps: float = 0.05,
                 reps: int = 2000) -> dict:
    """Write CSV/JSON tables, PNG plots and ``summary.md`` under ``out``; return the summaries."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    md = ["# Ground-truth advantage benchmark", "", f"Command: `{command}`", "", f"Machine: {machine}", ""]
    result: dict = {}
    if bench is not None:
        summary = summarise_bench(bench["rows"])
        result["bench_summary"] = summary
        write_csv(out / "bench_summary.csv", summary)
        write_csv(out / "bench_rows.csv.gz", bench["rows"], digits=4)
        geo = defaultdict(list)
        for g in bench["geometry"]:
            geo[(g["family"], g["scenario"], g["source"])].append(g)
        geo_rows = []
        for (f, sc, src), gs in geo.items():
            row = {"family": f, "scenario": sc, "source": src}
            for k in gs[0]:
                if k not in ("family", "scenario", "seed", "source"):
                    row[k] = float(np.nanmean([g[k] for g in gs]))
            geo_rows.append(row)
        write_csv(out / "geometry.csv", geo_rows)
        result["geometry"] = geo_rows
        fams = list(dict.fromkeys(r["family"] for r in summary))
        scens = list(dict.fromkeys(r["scenario"] for r in summary))
        if bench_cfg is not None:  # the configured order (plain, varied, aliased, varied+aliased)
            scens = [sc.name for sc in bench_cfg.scenarios if sc.name in scens]
        proxy_sources = sorted({r["source"] for r in summary if r["source"].startswith("proxy")
                                and "LM rows" not in r["source"]})
        plain = [m for m in ("grpo", "rloo", "gigpo", "hgpo", "oracle", "gigpo|state", "bipace_q|state")]
        for f in fams:
            for metric, label in (("pearson", "Pearson(Â, A)"), ("grad_cos", "cos(ĝ, g*)"),
                                  ("singleton", "singleton rate"),
                                  ("pair_precision", "pair precision")):
                _plot_eps(summary, f, metric, label, out / f"{metric}_vs_eps_{f}.png", proxy_sources, scens, plain)
            lm_src = sorted({r["source"] for r in summary if r["family"] == f and r["source"].startswith("LM")})
            if lm_src:
                lm_scen = sorted({r["scenario"] for r in summary if r["family"] == f and r["source"] in lm_src})
                lm_rows = [dict(r, source=r["source"].replace(" (LM rows)", "")) for r in summary
                           if r["family"] == f and r["scenario"] in lm_scen
                           and (r["source"] in lm_src or "LM rows" in r["source"])]
                for metric, label in (("pearson", "Pearson(Â, A)"), ("grad_cos", "cos(ĝ, g*)"),
                                      ("singleton", "singleton rate")):
                    _plot_eps(lm_rows, f, metric, label, out / f"lm_{metric}_vs_eps_{f}.png",
                              lm_src + [s for s in proxy_sources if s == headline_source], lm_scen, plain)
        md += ["## 1. Advantage quality against the exact A^π", "",
               f"Setting of the headline tables: hidden states = {headline_source}, ε = {headline_eps}; mean over "
               "seeds with a 95% t-interval. `oracle` uses the true advantage; `gigpo|state` and `bipace_q|state` "
               "group rows by the true state (what exact bisimulation would give). grad_cos: cosine between "
               "Σ_i Â_i ∇log π(a_i|s_i) and the exact expected gradient with true advantages g*; grad_cos_obj: with "
               "the exact ∇J (γ^t-weighted).", ""]
        for f in fams:
            for sc in scens:
                hr = _headline(summary, f, sc, headline_source, headline_eps)
                if not hr:
                    continue
                md += [f"### {f} / {sc} ({hr[0]['rows_per_batch']:.0f} rows per batch, {hr[0]['seeds']} seeds)", ""]
                md.append(_md_table(
                    ["method", "Pearson", "Spearman", "Pearson step term", "sign agree", "zero step", "singleton",
                     "pair precision", "grad cos g*", "grad cos ∇J"],
                    [[r["method"], _fmt_ci(r["pearson"], r["pearson_lo"], r["pearson_hi"]),
                      _fmt_ci(r["spearman"], r["spearman_lo"], r["spearman_hi"]),
                      _fmt_ci(r["pearson_step"], r["pearson_step_lo"], r["pearson_step_hi"]),
                      _fmt_ci(r["sign_agree"], r["sign_agree_lo"], r["sign_agree_hi"]),
                      _fmt(r["zero_step"], 2), _fmt(r["singleton"], 2), _fmt(r["pair_precision"], 2),
                      _fmt_ci(r["grad_cos"], r["grad_cos_lo"], r["grad_cos_hi"]),
                      _fmt_ci(r["grad_cos_obj"], r["grad_cos_obj_lo"], r["grad_cos_obj_hi"])] for r in hr]))
                md.append("")
        # the LM sub-batches: every method on the same rows, LM hidden states at a few epsilons
        lm_sources = sorted({r["source"] for r in summary if r["source"].startswith("LM")})
        for f in fams:
            for src in lm_sources:
                lr = [r for r in summary if r["family"] == f and (r["source"] in ("text (LM rows)", "truth (LM rows)")
                      or (r["source"] == src and r["epsilon"] != "" and r["epsilon"] in (0.02, 0.05, 0.1))
                      or (r["source"] == headline_source + " (LM rows)" and r["epsilon"] == headline_eps))]
                if not lr:
                    continue
                lr.sort(key=lambda r: (0 if r["source"].startswith(("truth", "text")) else 1
                                       if r["source"].startswith("proxy") else 2,
                                       _key_order(r["method"]), _eps_key(r["epsilon"] if r["epsilon"] != "" else None)))
                md += [f"### {f} / {lr[0]['scenario']}: {src} hidden states ({lr[0]['rows_per_batch']:.0f} rows per "
                       f"sub-batch, {lr[0]['seeds']} seeds; every method recomputed on these rows)", ""]
                md.append(_md_table(
                    ["method", "source", "ε", "Pearson", "Pearson step term", "singleton", "pair precision",
                     "grad cos g*"],
                    [[r["method"], r["source"].replace(" (LM rows)", ""),
                      _fmt(r["epsilon"], 2) if r["epsilon"] != "" else "–",
                      _fmt_ci(r["pearson"], r["pearson_lo"], r["pearson_hi"]),
                      _fmt_ci(r["pearson_step"], r["pearson_step_lo"], r["pearson_step_hi"]),
                      _fmt(r["singleton"], 2), _fmt(r["pair_precision"], 2),
                      _fmt_ci(r["grad_cos"], r["grad_cos_lo"], r["grad_cos_hi"])] for r in lr]))
                md.append("")
        # best epsilon per hidden estimator and source
        md += ["### Best ε per estimator (by mean Pearson), main proxy and LM sources", ""]
        best_rows = []
        for f in fams:
            for sc in scens:
                for src in sorted({r["source"] for r in summary if r["family"] == f and r["scenario"] == sc}):
                    for m in ("bigpo", "bipace_v", "bipace_q"):
                        rs = [r for r in summary if r["family"] == f and r["scenario"] == sc and r["source"] == src
                              and r["method"] == m]
                        if not rs:
                            continue
                        b = max(rs, key=lambda r: r["pearson"])
                        best_rows.append([f, sc, src, m, f"{b['epsilon']:g}",
                                          _fmt_ci(b["pearson"], b["pearson_lo"], b["pearson_hi"]),
                                          _fmt_ci(b["grad_cos"], b["grad_cos_lo"], b["grad_cos_hi"]),
                                          _fmt(b["singleton"], 2)])
        md.append(_md_table(["family", "scenario", "source", "method", "best ε", "Pearson", "grad cos g*", "singleton"],
                            best_rows))
        md += ["", "### Hidden-state geometry (cosine distances of row pairs inside a group, mean over seeds)", ""]
        eps_cols = [k for k in geo_rows[0] if k.startswith("diff_le_")] if geo_rows else []
        md.append(_md_table(
            ["family", "scenario", "source", "median same-state", "median diff-state"]
            + [f"diff ≤ {k[8:]}" for k in eps_cols] + [f"same ≤ {k[8:]}" for k in eps_cols],
            [[g["family"], g["scenario"], g["source"], _fmt(g["same_state_median"]), _fmt(g["diff_state_median"])]
             + [_fmt(g[k], 2) for k in eps_cols] + [_fmt(g["same_le_" + k[8:]], 2) for k in eps_cols]
             for g in geo_rows]))
        md += ["", "Plots: `pearson_vs_eps_<family>.png`, `grad_cos_vs_eps_<family>.png`, "
               "`singleton_vs_eps_<family>.png`, "
               "`pair_precision_vs_eps_<family>.png`"
               + (", `lm_*_vs_eps_<family>.png` (LM source)" if any(r["source"].startswith("LM") for r in summary)
                  else "")
               + ". Tables: `bench_summary.csv` (all settings), `bench_rows.csv.gz` (per seed), `geometry.csv`.", ""]
        meta = bench.get("meta", {})
        md += ["Fixed policies: exact success of the calibrated policy per family (mean over seeds): "
               + ", ".join(f"{f} {np.mean(v['successes']):.2f} ({v['states']} states, {v['actions']} actions, "
                           f"{v['tasks']} tasks)"
                           for f, v in meta.get("families", {}).items()), ""]
        if meta.get("lm"):
            md += [f"LM source: {meta['lm']['model']}, hidden_states[{meta['lm']['layer']}] at the last prompt token; "
                   f"load {meta['lm'].get('load_s', 0):.0f} s, embedding {meta['lm'].get('embed_s', 0):.0f} s.", ""]
    if learn is not None:
        thresholds = learn_cfg.thresholds if learn_cfg is not None else (0.5, 0.8)
        ls = summarise_learning(learn, thresholds, reps=reps)
        result["learning"] = ls
        write_csv(out / "learning_aggregate.csv", ls["aggregate"])
        write_csv(out / "learning_poi.csv", ls["poi"])
        write_csv(out / "learning_thresholds.csv", ls["thresholds"])
        write_csv(out / "learning_curves.csv", ls["curves"])
        write_csv(out / "learning_per_task.csv", ls["per_task"])
        write_csv(out / "learning_runs.csv.gz", ls["runs"], digits=4)
        _plot_learning(ls, out / "learning_curves.png")
        _plot_poi(ls, out / "learning_poi.png")
        n_seeds = next(iter(next(iter(learn["curves"].values())).values())).shape[0]
        md += ["## 2. Learning comparison (tabular softmax, exact success)", "",
               f"{n_seeds} seeds per method and family; start success "
               + ", ".join(f"{f} {v:.2f}" for f, v in ls["start"].items())
               + ". Scores per run: `auc` = mean success over iterations, `final` = success at the last iteration. "
               "IQM with 95% stratified-bootstrap intervals over (seeds × families).", ""]
        md.append(_md_table(["method", "IQM auc", "IQM final", "mean auc", "mean final"],
                            [[r["method"], _fmt_ci(r["iqm_auc"], r["iqm_auc_lo"], r["iqm_auc_hi"], 3),
                              _fmt_ci(r["iqm_final"], r["iqm_final_lo"], r["iqm_final_hi"], 3),
                              _fmt(r["mean_auc"]), _fmt(r["mean_final"])]
                             for r in sorted(ls["aggregate"], key=lambda r: _key_order(r["method"]))]))
        md += ["", "Per task (family/scenario): mean auc over seeds [95% t-interval], and P(bipace_q > X) on auc [95% "
               "CI]:", ""]
        pt_methods = [m for m in sorted(ls["methods"], key=_key_order)]
        pois = [k for k in ("gigpo", "bigpo", "grpo") if f"poi_bipace_q_vs_{k}" in ls["per_task"][0]]
        md.append(_md_table(["task"] + pt_methods + [f"P(bipace_q > {k})" for k in pois],
                            [[r["task"]] + [_fmt_ci(r[m], r[m + "_lo"], r[m + "_hi"], 3) for m in pt_methods]
                             + [f"{_fmt(r[f'poi_bipace_q_vs_{k}'], 2)} [{_fmt(r[f'poi_bipace_q_vs_{k}_lo'], 2)}, "
                                f"{_fmt(r[f'poi_bipace_q_vs_{k}_hi'], 2)}]" for k in pois] for r in ls["per_task"]]))
        md += ["", "Probability of improvement over all tasks (score = auc; > 0.5 favours the first method):", ""]
        md.append(_md_table(["comparison", "P(X > Y)", "95% CI"],
                            [[f"{r['x']} vs {r['y']}", _fmt(r["poi"]), f"[{_fmt(r['lo'])}, {_fmt(r['hi'])}]"]
                             for r in ls["poi"]]))
        md += ["", "Iterations to reach a success threshold (median over seeds; ∞ when fewer than half reach it):", ""]
        thr_rows = []
        for f in ls["families"]:
            for m in sorted(ls["methods"], key=_key_order):
                cells = [f, m]
                for t in thresholds:
                    r = next(r for r in ls["thresholds"] if r["family"] == f and r["method"] == m
                             and r["threshold"] == t)
                    cells.append(f"{_fmt(r['median_iterations'], 0) if np.isfinite(r['median_iterations']) else '∞'} "
                                 f"({100 * r['reached']:.0f}% reach)")
                thr_rows.append(cells)
        md.append(_md_table(["family", "method"] + [f"≥ {t}" for t in thresholds], thr_rows))
        md += ["", "Plots: `learning_curves.png`, `learning_poi.png`. Tables: `learning_*.csv`; every run's curve: "
               "`learning_runs.csv.gz`.", ""]
    configs = {"bench": bench_cfg.to_dict() if bench_cfg is not None else None,
               "learning": learn_cfg.to_dict() if learn_cfg is not None else None}
    (out / "config.json").write_text(json.dumps(configs, indent=2, default=str))
    md += ["Configuration: `config.json`.", ""]
    (out / "summary.md").write_text("\n".join(md))
    return result
