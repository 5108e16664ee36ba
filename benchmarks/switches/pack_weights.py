"""Benchmark: how fast a decode step's matmuls stream a model's weights, ``F.linear`` (MKL) against oneDNN's packed
layout (``agents.engines.lean.LeanWeights``), by rows, beside the memory's own streaming rate.

    python -m benchmarks.switches pack-weights  # SmolLM2-135M's and the tiny model's shapes, one thread
    python -m benchmarks.switches pack-weights --out results/benchmarks/decode_linear.md

A decode step multiplies a few rows (a rollout's live rows) by every weight matrix of the model once. For a model
whose weights do not fit the CPU's cache (SmolLM2-135M: 540 MB in float32), the floor of that step is the time to
read the weights from memory, so the table reports GB of weights read per second: the rate of ``x.sum()`` over
a tensor of the same size is the reference (a pure read). Shapes: one set of the lean step's matrices per layer
(W_q|W_k|W_v, W_o, W_gate|W_up, W_down) and the LM head, random float32 values, for ``smollm2`` (30 layers,
width 576, 1,536 MLP, 3 key/value heads of 64, vocabulary 49,152) and ``tiny`` (the demo's 4 layers of width 128,
vocabulary 1,370), one table each (``--models``). Each cell: one untimed pass, then the median of ``--repeats``
timed passes over all matrices. The packed layout is the one ``LeanWeights`` builds (for ``PACK_ROWS_HINT`` rows);
each table's head gives the time it took to pack all its matrices.
"""
from __future__ import annotations

import argparse
import statistics
import time

SHAPES = {  # (layers, width, mlp, q heads, kv heads, head dim, vocabulary)
    "smollm2": (30, 576, 1536, 9, 3, 64, 49152),
    "tiny": (4, 128, 512, 4, 4, 32, 1370),
}

PROG = "python -m benchmarks.switches pack-weights"


def matrices(model: str) -> list[tuple[int, int]]:
    """(out, in) of every matrix one decode step multiplies by, in the lean step's order."""
    layers, d, mlp, hq, hk, hd, vocab = SHAPES[model]
    per_layer = [((hq + 2 * hk) * hd, d), (d, hq * hd), (2 * mlp, d), (d, mlp)]
    return per_layer * layers + [(vocab, d)]


def run(model: str, rows: list[int], repeats: int, threads: int) -> dict:
    import torch

    from agents.engines.lean import PACK_ROWS_HINT, packing_available

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    ws = [torch.randn(o, i, generator=g) for o, i in matrices(model)]
    nbytes = sum(w.numel() * w.element_size() for w in ws)

    def timed(fn) -> float:
        fn()
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    flat = torch.cat([w.reshape(-1) for w in ws])
    out = {"bytes": nbytes, "sum_gbs": nbytes / timed(flat.sum) / 1e9, "cells": {}, "pack_s": None}
    flat = None
    packed = None
    if packing_available():
        t = time.perf_counter()
        packed = [torch.ops.mkldnn._reorder_linear_weight(w, PACK_ROWS_HINT) for w in ws]
        out["pack_s"] = time.perf_counter() - t
    with torch.inference_mode():
        for b in rows:
            xs = {i: torch.randn(b, i, generator=g) for _, i in matrices(model)}

            def plain(xs=xs):
                return [torch.nn.functional.linear(xs[w.shape[1]], w) for w in ws]

            def oned(xs=xs):
                return [torch.ops.mkldnn._linear_pointwise(xs[w.shape[1]], p, None, "none", [], "")
                        for w, p in zip(ws, packed)]

            cell = {"linear": nbytes / timed(plain) / 1e9}
            if packed is not None:
                cell["packed"] = nbytes / timed(oned) / 1e9
            out["cells"][b] = cell
    return out


def table(res: dict, model: str) -> str:
    lines = [f"## {model}", "",
             f"Weights: {res['bytes'] / 1e6:.0f} MB of float32 matrices; a plain `sum` over as many bytes reads "
             f"**{res['sum_gbs']:.1f} GB/s** (a pure read of these bytes: from memory where they do not fit the "
             "cache, the floor of such a step)."
             + (f" Packing them all: {res['pack_s']:.2f} s." if res["pack_s"] is not None else
                " This torch build has no oneDNN packed linear."), "",
             "| rows | F.linear GB/s | packed GB/s | packed / F.linear | F.linear / sum | packed / sum |",
             "|---:|---:|---:|---:|---:|---:|"]
    for b, c in res["cells"].items():
        p = c.get("packed")
        lines.append(f"| {b} | {c['linear']:.1f} | {p:.1f} | {p / c['linear']:.2f}x | "
                     f"{c['linear'] / res['sum_gbs']:.2f} | {p / res['sum_gbs']:.2f} |" if p is not None else
                     f"| {b} | {c['linear']:.1f} | – | – | {c['linear'] / res['sum_gbs']:.2f} | – |")
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    """The options of ``python -m benchmarks.switches pack-weights``."""
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="smollm2,tiny", help=f"comma-separated, of {sorted(SHAPES)}")
    ap.add_argument("--rows", default="1,4,8,16,64", help="comma-separated row counts")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the demo's runs use 1)")
    ap.add_argument("--out", default=None, help="also write the table to this file")
    return ap


def main(argv: list[str]) -> int:
    ap = parser()
    a = ap.parse_args(argv)
    try:
        rows = [int(x) for x in a.rows.split(",")]
    except ValueError:
        ap.error(f"--rows {a.rows!r}: comma-separated integers, e.g. 1,8,16")
    if not rows or min(rows) < 1 or a.repeats < 1 or a.threads < 1:
        ap.error("--rows, --repeats and --threads must be >= 1")
    models = a.models.split(",")
    if not models or any(m not in SHAPES for m in models):
        ap.error(f"--models {a.models!r}: comma-separated, of {sorted(SHAPES)}")
    from common.machine import describe, loadavg
    from common.tables import emit_table

    load0 = loadavg()
    parts = [table(run(m, rows, a.repeats, a.threads), m) for m in models]
    cmd = PROG + "".join(f" {x}" for x in argv)
    head = ["# A decode step's matmuls: GB of weights read per second, F.linear against oneDNN's packed layout", "",
            f"Command: `{cmd}`. Machine: {describe(threads=True)}; load average before / after: {load0} / "
            f"{loadavg()}.", ""]
    emit_table("\n".join(head) + "\n" + "\n".join(parts), a.out, announce=True)
    return 0
