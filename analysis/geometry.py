"""Hidden-state geometry of rollouts: exact anchors versus hidden-state clusters, against the true state.

The paper's claim [paper] is that greedy cosine clusters of the actor's hidden states are a better state
partition than GiGPO's exact anchor observations: fewer singletons (34.2% -> 17.3% on ALFWorld at iteration
10, 50.3% -> 22.4% on TextCraft, Qwen2.5-7B). This module measures, for one batch of step rows and the hidden
states of one or more layers, over a grid of epsilon:

* the grouping statistics of docs/method.md, "Diagnostics": singleton rate, number of groups, mean / P90 / max size;
* the PACE row mix the grouping would give (PACE formula / leave-one-out fallback / singleton; multi-key
  clusters; keys per cluster) with the action key of ``EstimatorConfig.pace_key``;
* purity against the true state (``StepBatch.state_key``; per prompt group, as every grouping is), over
  pairs of rows of one prompt group::

      precision = |{same group AND same state}| / |{same group}|     (same-group pairs that are truly one state)
      recall    = |{same group AND same state}| / |{same state}|     (truly-same pairs that share a group)

  plus ``mixed_frac``, the share of multi-member groups that hold two or more true states.

Groupings (rows of the report): ``anchor`` (exact anchor observation, GiGPO), ``state`` (the true state
itself: the floor any abstraction could reach, precision = recall = 1), and ``hidden`` at each epsilon of
the grid for each layer (``estimators.cluster.greedy_cosine_clusters`` with the config's centroid and
backend, exactly the clustering training uses).

``match_epsilon`` finds, by bisection, the epsilon at which a layer's singleton rate crosses a target (e.g.
the paper's hidden-state rate), and reports the full row at that epsilon (what purity costs there).

Symbols: N step rows, P prompt groups, G trajectories per group, D hidden size. This module reads
``estimators`` only (no model, no environment): the hidden states come from ``analysis.hidden_capture`` or
from a saved batch.
"""
from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from estimators import EstimatorConfig, StepBatch
from estimators.algorithms import pace_metrics, step_returns
from estimators.cluster import greedy_cosine_clusters
from estimators.grouping import anchor_groups
from estimators.ops import action_keys, dense_ids, factorize
from estimators.pace import pace_step_advantages

__all__ = [
    "PAPER",
    "DEFAULT_EPS_GRID",
    "GeometryConfig",
    "GeometryReport",
    "pair_counts",
    "grouping_row",
    "geometry_report",
    "match_epsilon",
    "paper_targets",
    "plot_geometry",
]

#: Singleton rates the paper reports (Qwen2.5-7B; docs/method.md, "Diagnostics"), as fractions.
PAPER: dict[str, dict[str, float]] = {
    "alfworld": {"anchor": 0.342, "hidden": 0.173, "iteration": 10, "epsilon": 0.10, "layer": -8},
    "textcraft": {"anchor": 0.503, "hidden": 0.224, "iteration": -1, "epsilon": 0.10, "layer": -8},
}

DEFAULT_EPS_GRID = (0.0, 0.01, 0.02, 0.03, 0.05, 0.075, 0.10, 0.15, 0.20)

#: report columns, in order (CSV and Markdown)
COLUMNS = (
    "layer", "grouping", "epsilon", "singleton_rate", "groups", "size_mean", "size_p90", "size_max",
    "precision", "recall", "mixed_frac", "pairs_group", "pairs_state", "pairs_both",
    "pace_frac_pace", "pace_frac_fallback", "pace_frac_singleton", "pace_multikey_cluster_frac",
    "pace_keys_per_cluster", "action_parse_rate",
)


@dataclass
class GeometryConfig:
    """What the geometry report computes.

    grid: epsilons (cosine distances) of the hidden-state clustering, each in [0, 2].
    estimator: clustering and PACE settings (``centroid``, ``cluster_backend``, ``pace_key``,
        ``pace_fallback``, ``gamma``, ``invalid_penalty``) exactly as in training; its ``epsilon`` is unused.
    """

    grid: tuple[float, ...] = DEFAULT_EPS_GRID
    estimator: EstimatorConfig = field(default_factory=lambda: EstimatorConfig(name="bipace_q"))

    def __post_init__(self) -> None:
        grid = tuple(float(e) for e in self.grid)
        if not grid:
            raise ValueError("GeometryConfig.grid is empty: give at least one epsilon, e.g. 0,0.05,0.1")
        bad = [e for e in grid if not (math.isfinite(e) and 0.0 <= e <= 2.0)]
        if bad:
            raise ValueError(f"GeometryConfig.grid holds {bad}: every epsilon must be a cosine distance in [0, 2]")
        self.grid = tuple(sorted(set(grid)))


def pair_counts(group_of_row: torch.Tensor, state_of_row: torch.Tensor) -> tuple[float, float, float]:
    """(same-group pairs, same-state pairs, pairs in both) over unordered pairs of rows.

    group_of_row, state_of_row: LongTensor (N,) ids; a pair counts as same-group / same-state when the ids are
    equal, so ids must already be local to a prompt group (as every grouping here is).
    """

    def pairs(ids: torch.Tensor) -> float:
        c = torch.bincount(ids).double()
        return float((c * (c - 1) / 2).sum())

    return pairs(dense_ids(group_of_row)), pairs(dense_ids(state_of_row)), pairs(dense_ids(group_of_row, state_of_row))


def _nan_div(a: float, b: float) -> float:
    return a / b if b > 0 else float("nan")


@dataclass
class _Context:
    """What every grouping row of one batch shares: true states, returns, action keys."""

    states: torch.Tensor | None  # (N,) dense (prompt group, state) ids, or None without state_key
    returns: torch.Tensor  # (N,) float64 step returns R
    keys: torch.Tensor  # (N,) dense action-key ids
    parsed: torch.Tensor  # (N,) bool


def _context(batch: StepBatch, est: EstimatorConfig) -> _Context:
    states = None
    if batch.state_key is not None:
        states = dense_ids(batch.group_id, factorize([repr(s) for s in batch.state_key], device=batch.device))
    keys, parsed = action_keys(batch.response_text, batch.response_ids, batch.response_mask, est.pace_key,
                               est.pace_key_tokens, batch.device)
    return _Context(states, step_returns(batch, est), keys, parsed)


def grouping_row(gid: torch.Tensor, ctx: _Context, est: EstimatorConfig) -> dict[str, float]:
    """The statistics of one grouping (LongTensor (N,) ids local to prompt groups): sizes, purity, PACE mix."""
    gid = dense_ids(gid)
    counts = torch.bincount(gid)  # (K,)
    sizes = counts.double()
    row: dict[str, float] = {
        "singleton_rate": float((counts[gid] == 1).double().mean()),
        "groups": float(sizes.numel()),
        "size_mean": float(sizes.mean()),
        "size_p90": float(torch.quantile(sizes, 0.9)),
        "size_max": float(sizes.max()),
    }
    if ctx.states is not None:
        same_group, same_state, both = pair_counts(gid, ctx.states)
        row.update(precision=_nan_div(both, same_group), recall=_nan_div(both, same_state),
                   pairs_group=same_group, pairs_state=same_state, pairs_both=both)
        states_per_group = _distinct_per_group(dense_ids(gid, ctx.states), gid)  # (K,) true states per group
        multi = counts > 1
        row["mixed_frac"] = float((states_per_group[multi] >= 2).double().mean()) if bool(multi.any()) else float("nan")
    else:
        row.update(precision=float("nan"), recall=float("nan"), mixed_frac=float("nan"),
                   pairs_group=float("nan"), pairs_state=float("nan"), pairs_both=float("nan"))
    pace = pace_step_advantages(ctx.returns, gid, ctx.keys, "q", est.pace_fallback, "none")
    m = pace_metrics(pace, gid, ctx.parsed)
    row.update({k.split("/", 1)[1]: v for k, v in m.items()})
    return row


def _distinct_per_group(pair: torch.Tensor, gid: torch.Tensor) -> torch.Tensor:
    """LongTensor (K,): distinct values of ``pair`` (a refinement of ``gid``) per group of ``gid``."""
    k = int(gid.max()) + 1
    owner = torch.zeros(int(pair.max()) + 1, dtype=torch.long, device=gid.device).scatter(0, pair, gid)  # (M,)
    return torch.bincount(owner, minlength=k)


@dataclass
class GeometryReport:
    """rows: one dict per (layer, grouping) with ``COLUMNS``; matches: epsilon matches (``match_epsilon``);
    meta: what was measured (batch summary, config, command, ...)."""

    rows: list[dict]
    matches: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def layers(self) -> list:
        return list(dict.fromkeys(r["layer"] for r in self.rows if r["grouping"] == "hidden"))

    def row(self, grouping: str, layer=None, epsilon: float | None = None) -> dict:
        for r in self.rows:
            if r["grouping"] == grouping and (layer is None or r["layer"] == layer) and (
                    epsilon is None or math.isclose(r["epsilon"], epsilon, abs_tol=1e-12)):
                return r
        raise KeyError(f"no report row for grouping={grouping!r}, layer={layer!r}, epsilon={epsilon!r}")

    # ------------------------------------------------------------------ output
    def to_csv(self) -> str:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(COLUMNS), extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for r in self.rows:
            w.writerow({c: _csv_cell(r.get(c)) for c in COLUMNS})
        return buf.getvalue()

    def to_json(self) -> str:
        return json.dumps({"meta": self.meta, "rows": self.rows, "matches": self.matches}, indent=1,
                          default=_json_default, allow_nan=True)

    def markdown_table(self, layer) -> str:
        """One Markdown table: the anchor and true-state rows, then every epsilon of ``layer``."""
        head = ("grouping", "singletons", "groups", "mean size", "P90", "max", "pair precision", "pair recall",
                "mixed groups", "PACE / fallback / singleton", "multi-key", "keys/cluster")
        lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
        picked = [r for r in self.rows if r["grouping"] in ("anchor", "state")]
        picked += [r for r in self.rows if r["grouping"] == "hidden" and r["layer"] == layer]
        for r in picked:
            name = {"anchor": "exact anchor obs", "state": "true state (floor)"}.get(r["grouping"],
                                                                                    f"hidden eps={r['epsilon']:g}")
            lines.append("| " + " | ".join([
                name, _pct(r["singleton_rate"]), f"{r['groups']:.0f}", f"{r['size_mean']:.2f}", f"{r['size_p90']:.1f}",
                f"{r['size_max']:.0f}", _pct(r["precision"]), _pct(r["recall"]), _pct(r["mixed_frac"]),
                f"{_pct(r['pace_frac_pace'])} / {_pct(r['pace_frac_fallback'])} / {_pct(r['pace_frac_singleton'])}",
                _pct(r["pace_multikey_cluster_frac"]), f"{r['pace_keys_per_cluster']:.2f}",
            ]) + " |")
        return "\n".join(lines)

    def markdown_matches(self) -> str:
        if not self.matches:
            return "(no epsilon targets)"
        head = ("layer", "target", "target singletons", "epsilon", "singletons there", "pair precision",
                "pair recall", "PACE / fallback / singleton", "vs anchor: precision", "vs anchor: recall")
        lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
        anchor = self.row("anchor")
        for m in self.matches:
            r = m.get("row")
            if r is None:
                lines.append(f"| {m['layer']} | {m['target_name']} | {_pct(m['target'])} | not reached for "
                             f"eps <= {m['eps_max']:g} | | | | | | |")
                continue
            lines.append("| " + " | ".join([
                str(m["layer"]), m["target_name"], _pct(m["target"]), f"{m['epsilon']:.3g}", _pct(r["singleton_rate"]),
                _pct(r["precision"]), _pct(r["recall"]),
                f"{_pct(r['pace_frac_pace'])} / {_pct(r['pace_frac_fallback'])} / {_pct(r['pace_frac_singleton'])}",
                _pct(anchor["precision"]), _pct(anchor["recall"]),
            ]) + " |")
        return "\n".join(lines)

    def save(self, out_dir: Path) -> dict[str, Path]:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = {"csv": out_dir / "geometry.csv", "json": out_dir / "geometry.json"}
        paths["csv"].write_text(self.to_csv())
        paths["json"].write_text(self.to_json() + "\n")
        return paths


def _csv_cell(v):
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.6g}"
    return "" if v is None else v


def _json_default(o):
    if isinstance(o, torch.Tensor):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _pct(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{100 * x:.1f}%"


def _check_hidden(batch: StepBatch, hidden: Mapping) -> dict:
    if not hidden:
        raise ValueError("geometry_report: no hidden states given; pass {layer: FloatTensor (N, D)} (e.g. from "
                         "analysis.hidden_capture.capture_prompt_states) or a StepBatch with .hidden")
    n = len(batch)
    out = {}
    for layer, h in hidden.items():
        if not isinstance(h, torch.Tensor) or h.ndim != 2 or not h.dtype.is_floating_point:
            raise ValueError(f"hidden[{layer!r}] must be a float tensor (N, D), got "
                             f"{type(h).__name__} {tuple(getattr(h, 'shape', ()))}")
        if h.shape[0] != n:
            raise ValueError(f"hidden[{layer!r}] has {h.shape[0]} rows but the batch has {n}: hidden states must be "
                             "captured for exactly the batch's rows, in its order")
        if not bool(torch.isfinite(h).all()):
            bad = torch.nonzero(~torch.isfinite(h).all(dim=1)).flatten()[:5].tolist()
            raise ValueError(f"hidden[{layer!r}] holds NaN/Inf at rows {bad}")
        out[layer] = h.to(batch.device)
    return out


def geometry_report(batch: StepBatch, hidden: Mapping | None = None, cfg: GeometryConfig | None = None,
                    targets: Mapping[str, float] | None = None, match_tol: float = 1e-3) -> GeometryReport:
    """The geometry report of ``batch`` (N rows) for hidden states ``{layer: FloatTensor (N, D)}``.

    ``hidden`` None uses ``batch.hidden`` (layer named ``"batch"``). ``targets`` maps a name to a singleton rate
    (a fraction); for each layer and target, ``match_epsilon`` finds the crossing epsilon (within
    ``match_tol``) on [0, max(grid)]. Deterministic: the clustering visits rows in (group, trajectory, step)
    order whatever the row order of ``batch``.
    """
    cfg = cfg or GeometryConfig()
    if not (math.isfinite(match_tol) and match_tol > 0):
        raise ValueError(f"geometry_report: match_tol={match_tol} must be a positive epsilon tolerance, e.g. 1e-3")
    batch.validate()
    if hidden is None:
        if batch.hidden is None:
            raise ValueError("geometry_report: the batch has no hidden states and none were given")
        hidden = {"batch": batch.hidden}
    hidden = _check_hidden(batch, hidden)
    est = cfg.estimator
    ctx = _context(batch, est)
    rows: list[dict] = []

    def add(layer, grouping, eps, gid):
        rows.append({"layer": layer, "grouping": grouping, "epsilon": eps, **grouping_row(gid, ctx, est)})

    add(None, "anchor", float("nan"), anchor_groups(batch.group_id, batch.anchor_obs))
    if ctx.states is not None:
        add(None, "state", float("nan"), ctx.states)
    for layer, h in hidden.items():
        for eps in cfg.grid:
            cl = greedy_cosine_clusters(h, batch.group_id, batch.traj_id, batch.step, eps, est.centroid,
                                        est.cluster_backend)
            add(layer, "hidden", eps, cl.cluster_id)
    report = GeometryReport(rows=rows)
    for name, target in (targets or {}).items():
        for layer, h in hidden.items():
            report.matches.append(match_epsilon(batch, h, target, est, eps_max=max(cfg.grid), tol=match_tol,
                                                ctx=ctx) | {"layer": layer, "target_name": name})
    report.meta = {
        "rows": len(batch), "groups": batch.num_groups, "match_tol": float(match_tol),
        "trajectories": int(dense_ids(batch.group_id, batch.traj_id).max()) + 1,
        "max_step": int(batch.step.max()), "hidden_size": {str(k): int(v.shape[1]) for k, v in hidden.items()},
        "valid_rate": float(batch.valid.double().mean()), "reward_sum": float(batch.reward.sum()),
        "distinct_states": None if ctx.states is None else int(ctx.states.max()) + 1,
        "distinct_anchors": int(anchor_groups(batch.group_id, batch.anchor_obs).max()) + 1,
        "grid": list(cfg.grid), "estimator": asdict(est),
    }
    return report


def match_epsilon(batch: StepBatch, hidden: torch.Tensor, target: float, est: EstimatorConfig | None = None,
                  eps_max: float = 0.3, tol: float = 1e-3, ctx: _Context | None = None) -> dict:
    """The smallest epsilon (to ``tol``) in [0, eps_max] whose hidden-state singleton rate is <= ``target``.

    Bisection on the singleton rate of ``greedy_cosine_clusters`` (non-increasing in epsilon in practice; the
    greedy pass does not guarantee it, so the answer is a crossing, checked at its end points). Returns
    ``{"target", "epsilon", "eps_max", "row"}``: ``row`` is the full ``grouping_row`` at that epsilon, or
    None (and ``epsilon`` None) when even ``eps_max`` leaves more singletons than ``target``.
    """
    est = est or EstimatorConfig(name="bipace_q")
    if not 0.0 <= target <= 1.0:
        raise ValueError(f"match_epsilon: target singleton rate {target} must be a fraction in [0, 1]")
    ctx = ctx or _context(batch, est)

    def clusters(eps: float) -> torch.Tensor:
        return greedy_cosine_clusters(hidden, batch.group_id, batch.traj_id, batch.step, eps, est.centroid,
                                      est.cluster_backend).cluster_id

    def rate(gid: torch.Tensor) -> float:
        counts = torch.bincount(gid)
        return float((counts[gid] == 1).double().mean())

    out = {"target": float(target), "eps_max": float(eps_max), "epsilon": None, "row": None}
    if rate(clusters(eps_max)) > target:
        return out
    lo, hi = 0.0, float(eps_max)
    if rate(clusters(0.0)) <= target:
        hi = 0.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if rate(clusters(mid)) <= target:
            hi = mid
        else:
            lo = mid
    out["epsilon"] = hi
    out["row"] = {"layer": None, "grouping": "hidden", "epsilon": hi, **grouping_row(clusters(hi), ctx, est)}
    return out


def paper_targets(env_name: str, anchor_rate: float | None = None) -> dict[str, float]:
    """Singleton-rate targets for ``match_epsilon`` from the paper's figures for ``env_name``.

    ``paper hidden``: the paper's hidden-state rate itself; ``paper ratio``: this batch's anchor rate times the
    paper's hidden/anchor ratio (the same relative reduction). Empty for an env the paper gives no figure for.
    """
    key = env_name.lower().split("-")[0]
    ref = PAPER.get(key)
    if ref is None:
        return {}
    out = {"paper hidden": ref["hidden"]}
    if anchor_rate is not None:
        out["paper ratio"] = anchor_rate * ref["hidden"] / ref["anchor"]
    return out


def plot_geometry(report: GeometryReport, out_dir: Path, title: str = "", paper: Mapping[str, float] | None = None
                  ) -> list[Path]:
    """Two PNGs: singleton rate vs epsilon per layer (anchor, true-state and paper lines), and pair
    precision / recall vs epsilon per layer. Returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    layers = report.layers()
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    anchor = report.row("anchor")
    state = next((r for r in report.rows if r["grouping"] == "state"), None)
    paths = []
    positive = [e for e in report.meta.get("grid", ()) if e > 0] or [
        r["epsilon"] for r in report.rows if r["grouping"] == "hidden" and r["epsilon"] > 0]

    def eps_axis(ax) -> None:  # a grid over decades (small models: 1e-4 .. 0.2) reads on a symlog axis [choice]
        ax.set_xlabel("epsilon (cosine distance)")
        if positive and max(positive) / min(positive) >= 20:
            ax.set_xscale("symlog", linthresh=min(positive))
            ax.set_xlim(left=0, right=max(positive) * 1.3)
            ax.set_xlabel("epsilon (cosine distance, symlog axis)")

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, layer in enumerate(layers):
        rs = [r for r in report.rows if r["grouping"] == "hidden" and r["layer"] == layer]
        ax.plot([r["epsilon"] for r in rs], [100 * r["singleton_rate"] for r in rs], "o-", color=colors[i % 10],
                label=f"hidden, layer {layer}")
    ax.axhline(100 * anchor["singleton_rate"], color="k", ls="--", label="exact anchor obs")
    if state is not None:
        ax.axhline(100 * state["singleton_rate"], color="grey", ls=":", label="true state (floor)")
    if paper:
        ax.axhline(100 * paper["anchor"], color="tab:red", ls="--", lw=0.8, alpha=0.6, label="paper: anchor (7B)")
        ax.axhline(100 * paper["hidden"], color="tab:red", ls="-.", lw=0.8, alpha=0.6, label="paper: hidden (7B)")
    eps_axis(ax)
    ax.set_ylabel("singleton rate (%)")
    ax.set_ylim(bottom=0)
    ax.set_title(title or "singleton rate vs epsilon")
    ax.legend(fontsize=7)
    fig.tight_layout()
    p = out_dir / "singleton_vs_eps.png"
    fig.savefig(p, dpi=120)
    plt.close(fig)
    paths.append(p)

    if state is not None:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
        for k, (ax, col, name) in enumerate(zip(axes, ("precision", "recall"), ("pair precision", "pair recall"))):
            for i, layer in enumerate(layers):
                rs = [r for r in report.rows if r["grouping"] == "hidden" and r["layer"] == layer]
                ax.plot([r["epsilon"] for r in rs], [100 * r[col] for r in rs], "o-", color=colors[i % 10],
                        label=f"layer {layer}")
            if not math.isnan(anchor[col]):
                ax.axhline(100 * anchor[col], color="k", ls="--", label="exact anchor obs")
            eps_axis(ax)
            ax.set_title(name + (" (same-cluster pairs that are one state)" if k == 0 else
                                 " (same-state pairs in one cluster)"), fontsize=9)
            ax.set_ylim(0, 102)
        axes[0].set_ylabel("%")
        axes[0].legend(fontsize=7)
        if title:
            fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        p = out_dir / "purity_vs_eps.png"
        fig.savefig(p, dpi=120)
        plt.close(fig)
        paths.append(p)
    return paths


def _csv(text: str, cast, what: str, example: str) -> list:
    """Comma-separated values of one type; ValueError naming the bad part and an example."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if part:
            try:
                out.append(cast(part))
            except ValueError:
                raise ValueError(f"{what} {part!r} is not {'an integer' if cast is int else 'a number'}; "
                                 f"pass e.g. {example}") from None
    return out


def layers_arg(text: str) -> list[int]:
    """``"-8,-4,-12"`` -> [-8, -4, -12]; ValueError naming the bad part."""
    out = _csv(text, int, "layer", "--layers -8,-4,-12")
    if not out:
        raise ValueError("no layers given; pass e.g. --layers -8,-4,-12")
    return list(dict.fromkeys(out))


def grid_arg(text: str) -> tuple[float, ...]:
    """``"0,0.05,0.1"`` -> (0.0, 0.05, 0.1); ValueError naming the bad part."""
    return tuple(_csv(text, float, "epsilon", "--eps 0,0.05,0.1"))


def summarize_layers(report: GeometryReport, eps_points: Sequence[float]) -> str:
    """A compact Markdown table: per layer, singleton rate and pair precision/recall at ``eps_points``."""
    layers = report.layers()
    head = ["layer"] + [f"eps={e:g}: singletons / prec / rec" for e in eps_points]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * len(eps_points)]
    for layer in layers:
        cells = [str(layer)]
        for e in eps_points:
            try:
                r = report.row("hidden", layer, e)
                cells.append(f"{_pct(r['singleton_rate'])} / {_pct(r['precision'])} / {_pct(r['recall'])}")
            except KeyError:
                cells.append("–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
