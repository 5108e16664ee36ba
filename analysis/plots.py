"""Plots of run folders (matplotlib, Agg backend): success curves per seed with mean and bootstrap band,
and the grouping diagnostics of docs/method.md over training."""
from __future__ import annotations

import io
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .runs import CONTROL_METHOD, Run, series  # noqa: E402
from .stats import curve_band, interp_curves  # noqa: E402

__all__ = ["plot_curves", "plot_diagnostics", "plot_intervals", "METHOD_ORDER", "method_color", "method_linestyle",
           "save_png"]

METHOD_ORDER = ["grpo", "rloo", "gigpo", "hgpo", "bigpo", "bipace_v", "bipace_q"]
_COLORS = {"grpo": "#7f7f7f", "rloo": "#bcbd22", "gigpo": "#1f77b4", "hgpo": "#9467bd", "bigpo": "#17becf",
           "bipace_v": "#ff7f0e", "bipace_q": "#d62728"}
#: one marker shape per method (in plotting order) on its mean line: two methods whose curves coincide stay visible
_MARKERS = "os^Dv<>PX*"


def save_png(fig, out: Path, dpi: int) -> None:
    """``fig`` as a PNG at ``dpi``: matplotlib's pixels, stored as RGB when the image is opaque (it is, on the white
    figure background) and written with Pillow's ``optimize``: the same image in ~11% fewer bytes than
    ``fig.savefig`` (the figures are most of what a study commits). The text chunks (matplotlib's "Software") and the
    resolution are kept."""
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    buf = io.BytesIO()
    fig.savefig(buf, dpi=dpi, format="png", bbox_inches="tight")  # keeps legends placed outside the axes
    buf.seek(0)
    im = Image.open(buf)
    im.load()
    if im.mode == "RGBA" and im.getextrema()[3] == (255, 255):
        im = im.convert("RGB")
    info = PngInfo()
    for k, v in im.info.items():
        if isinstance(v, str):
            info.add_text(k, v)
    im.save(out, format="PNG", optimize=True, pnginfo=info, dpi=im.info.get("dpi", (dpi, dpi)))


def method_color(method: str, i: int = 0) -> str:
    if method == CONTROL_METHOD:  # black, first
        return "#000000"
    base = re.split("[-@]", method)[0]  # bipace_q-eps0.05 (a variant), bipace_q@oracle (scored at another epsilon)
    return _COLORS.get(base, plt.rcParams["axes.prop_cycle"].by_key()["color"][i % 10])


def method_linestyle(method: str) -> str:
    """Solid for an estimator (and the control), dashed for a variant of one (``gigpo-lr3e-5``, ``bipace_q@oracle``),
    which shares its estimator's colour: the two stay apart in one panel."""
    if method == CONTROL_METHOD:
        return "-"
    return "-" if re.split("[-@]", method)[0] == method else "--"


def method_sort_key(method: str) -> tuple[int, str]:
    if method == CONTROL_METHOD:  # black, first
        return (-1, method)
    base = re.split("[-@]", method)[0]
    return (METHOD_ORDER.index(base) if base in METHOD_ORDER else len(METHOD_ORDER), method)


def plot_curves(runs_by_method: dict[str, list[Run]], key: str | None, source: str, title: str, out: Path, ylabel: str,
                key_of=None, thin: bool = True) -> bool:
    """One panel: a line per seed, the bold mean with its method's marker, a light 95% bootstrap band, one colour
    per method (variants dashed), the legend outside the data. ``source`` is ``metrics`` or ``evals``.
    ``key_of(method)``: the key of each line instead of one ``key`` (the ground-truth curves: one estimator per line,
    all read from the same runs); ``thin=False`` draws no line per run. Returns False (and writes nothing) if no run
    has the key."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    drawn = False
    methods = sorted(runs_by_method, key=method_sort_key)
    for i, method in enumerate(methods):
        k = key_of(method) if key_of is not None else key
        curves = [series(getattr(r, source), k) for r in runs_by_method[method]]
        curves = [c for c in curves if c[0]]
        if not curves:
            continue
        color, style, marker = method_color(method, i), method_linestyle(method), _MARKERS[i % len(_MARKERS)]
        for xs, ys in curves if thin else ():
            ax.plot(xs, ys, color=color, alpha=0.45, linewidth=0.9, linestyle=style)
        its, mat = interp_curves(curves)
        if its.size:
            mean, lo, hi = curve_band(mat)
            ax.plot(its, mean, color=color, linewidth=2.2, linestyle=style, label=f"{method} (n={len(curves)})",
                    marker=marker, markersize=5, markevery=[])  # the legend shows the marker; the points come next
            # the markers dodged sideways by method (a fraction of the spacing of the points): methods whose means
            # coincide stay visible side by side instead of one hiding the others
            every = max(1, its.size // 12)
            span = float(its[-1] - its[0]) or 1.0
            step = float(its[every] - its[0]) if its.size > every else span
            dodge = (i - (len(methods) - 1) / 2) * min(0.018 * span, 0.4 * step / max(1, len(methods)))
            ax.plot(its[::every] + dodge, mean[::every], linestyle="none", marker=marker, markersize=5, color=color)
            if len(curves) > 1:
                ax.fill_between(its, lo, hi, color=color, alpha=0.10, linewidth=0)
        drawn = True
    if not drawn:
        plt.close(fig)
        return False
    ax.set_xlabel("training iteration")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
              title="mean over seeds; thin: seeds" if thin else None, title_fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    save_png(fig, out, dpi=110)
    plt.close(fig)
    return True


def plot_intervals(intervals: dict[str, dict], title: str, out: Path, unit: str) -> bool:
    """rliable-style interval plot: per method (rows), the IQM and the mean (two panels) as a point with its 95%
    stratified-bootstrap interval, from ``stats.aggregate_intervals`` (scores in [0, 1], drawn in %). ``unit`` says
    what one score is (e.g. "final held-out success of a run on a split"). False (nothing written) without methods."""
    if not intervals:
        return False
    methods = list(intervals)
    fig, axes = plt.subplots(1, 2, figsize=(8.0, 0.9 + 0.42 * len(methods)), sharey=True)
    for ax, (stat, name) in zip(axes, [("iqm", "IQM"), ("mean", "mean")]):
        for row, m in enumerate(methods):
            point, lo, hi = (100 * v for v in intervals[m][stat])
            color = method_color(m, row)
            ax.plot([lo, hi], [row, row], color=color, linewidth=6, solid_capstyle="butt",
                    alpha=0.45 if method_linestyle(m) == "-" else 0.25)  # a variant: lighter, its estimator's colour
            ax.plot([point], [row], marker="|", markersize=16, markeredgewidth=2.5, color=color)
        ax.set_title(f"{name} [95% CI]", fontsize=10)
        ax.set_xlabel("success rate (%)")
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(methods)), [f"{m} (n={intervals[m]['runs']})" for m in methods], fontsize=8)
    axes[0].set_ylim(-0.6, len(methods) - 0.4)
    axes[0].invert_yaxis()
    fig.suptitle(title, fontsize=10)
    fig.text(0.5, -0.02, f"one score = {unit}; intervals resample runs within each split", ha="center", fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    save_png(fig, out, dpi=110)
    plt.close(fig)
    return True


def plot_diagnostics(runs_by_method: dict[str, list[Run]], title: str, out: Path) -> bool:
    """Three panels over training: singleton rate (exact anchors dashed, hidden clusters solid), PACE row
    mix (PACE / fallback / singleton), and mean group size; means over seeds per method. Colour = method (one
    legend, right), line style = series (a legend per panel, in black)."""
    from matplotlib.lines import Line2D

    panels = [
        ("singleton rate", "fraction of steps in a group of one",
         [("group/singleton_rate_anchor", "--", "anchors"), ("group/singleton_rate_cluster", "-", "clusters")]),
        ("PACE row mix", "fraction of steps",
         [("group/pace_frac_pace", "-", "PACE"), ("group/pace_frac_fallback", "--", "fallback"),
          ("group/pace_frac_singleton", ":", "singleton")]),
        ("mean group size", "steps per group",
         [("group/cluster_size_mean", "-", "clusters"), ("group/anchor_size_mean", "--", "anchors")]),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    drawn, methods_drawn = False, {}
    for ax, (name, ylabel, keys) in zip(axes, panels):
        styles_drawn = {}
        for i, method in enumerate(sorted(runs_by_method, key=method_sort_key)):
            color = method_color(method, i)
            for key, style, label in keys:
                curves = [series(r.metrics, key) for r in runs_by_method[method]]
                curves = [c for c in curves if c[0]]
                if not curves:
                    continue
                its, mat = interp_curves(curves)
                if its.size == 0:
                    continue
                ax.plot(its, mat.mean(axis=0), style, color=color)
                styles_drawn[label] = style
                methods_drawn[method] = color
                drawn = True
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("training iteration")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if styles_drawn:  # a panel no method logs (e.g. GRPO only) gets no empty legend
            ax.legend([Line2D([], [], color="black", linestyle=st) for st in styles_drawn.values()],
                      list(styles_drawn), fontsize=7, title="series", title_fontsize=7)
    if not drawn:
        plt.close(fig)
        return False
    fig.legend([Line2D([], [], color=c, linewidth=2) for c in methods_drawn.values()], list(methods_drawn),
               loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, title="method (mean over seeds)",
               title_fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    save_png(fig, out, dpi=110)
    plt.close(fig)
    return True
