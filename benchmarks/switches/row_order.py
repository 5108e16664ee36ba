"""Benchmark: token positions of the trainer's passes with rows in prompt order vs length order, on rollout rows,
at a preset's batch shape.

    python -m benchmarks.switches row-order  # generated ALFWorld, the 7B preset's shape
    python -m benchmarks.switches row-order --init-from DIR --batches 2 --out results/benchmarks/row_order.md
    python -m benchmarks.switches row-order --shape configs/paper/webshop_qwen2.5-7b.yaml --nproc 4

A pass cuts a rank's rows into forwards (``logprob_batch_rows`` rows per log-prob forward; in the update,
``mini_batch_rows`` / ``--nproc`` rows per mini-batch cut into micro-batches of ``micro_batch_rows``). Each
forward packs its rows right-padded to its longest row unless shared prompt prefixes are computed once
(``PPOActor.sharing_allowed``). Where sharing is refused (ZeRO-3 on several ranks, every paper preset; gradient
checkpointing in the update) rows packed in prompt order mix long and short rows in one forward; length order
(``PPOActor.row_order``) groups rows of similar length.

Rows: ``--batches`` rollouts of ``--preset``'s trainer (generated ALFWorld by default) from ``--init-from`` (a warm
start), else from the preset's untrained model (its responses run near the token cap: the table says which). Per
pass the table gives the token positions computed (padding included) of three variants: prompt order packed
unshared (the order before the fix, wherever sharing was refused), length order packed unshared (now), prompt order
with shared prefixes (what a pass gets where sharing is allowed); ratios are to length order. No model runs on the
rows: the counts are exact for the packing the engine does (``trainer.forward.pack_rows`` / ``pack_rows_shared``).
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile

PRESET = "configs/cpu/alfworld_tiny_sft.yaml"
SHAPE = "configs/paper/alfworld_qwen2.5-7b.yaml"
VARIANTS = ("prompt order, unshared", "length order, unshared", "prompt order, shared")

PROG = "python -m benchmarks.switches row-order"


def forwards_positions(prompt_ids, response_ids, groups: list[list[int]], variant: str,
                       suffix_buckets: int = 1) -> int:
    """Token positions (padding included) of one forward per group of row indices, each group ordered and packed
    as ``variant`` says."""
    from benchmarks.iteration_phases import batch_work
    from trainer.forward import pack_rows, pack_rows_shared

    pos = 0
    for rows in groups:
        ps, rs = [prompt_ids[i] for i in rows], [response_ids[i] for i in rows]
        if variant == VARIANTS[2]:
            packed = pack_rows_shared(ps, rs, suffix_buckets=suffix_buckets)
        else:
            packed = pack_rows(ps, rs)
        pos += batch_work(packed)[0]
    return pos


def pass_groups(prompt_ids, response_ids, rows: list[int], per_forward: int, variant: str) -> list[list[int]]:
    """``rows`` ordered as ``variant`` orders them, cut as the engine cuts a pass: the log-prob pass into forwards
    of ``per_forward`` rows, a mini-batch into ``ceil(len / per_forward)`` even micro-batches (``split_even``)."""
    from trainer.forward import length_order, prefix_order

    ps, rs = [prompt_ids[i] for i in rows], [response_ids[i] for i in rows]
    order = length_order(ps, rs) if variant == VARIANTS[1] else prefix_order(ps)
    return [[rows[k] for k in order[i: i + per_forward]] for i in range(0, len(order), per_forward)]


def micro_groups(prompt_ids, response_ids, mb: list[int], micro: int, variant: str) -> list[list[int]]:
    from trainer.forward import length_order, prefix_order
    from trainer.ppo_actor import split_even

    ps, rs = [prompt_ids[i] for i in mb], [response_ids[i] for i in mb]
    order = length_order(ps, rs) if variant == VARIANTS[1] else prefix_order(ps)
    return split_even([mb[k] for k in order], max(1, math.ceil(len(mb) / micro)))


def batch_positions(prompt_ids, response_ids, shape: dict) -> dict:
    """{pass: {variant: token positions}} of one rank's rows at ``shape`` (``shape_of``)."""
    from trainer.ppo_actor import split_even

    n = len(prompt_ids)
    out: dict = {"log-prob pass": {}, "update": {}}
    # the update: this rank's rows in rollout order (shuffle_minibatches=false), n_mb mini-batches over all ranks
    n_mb = max(1, math.ceil(n * shape["nproc"] / shape["mini_batch_rows"]))
    minis = split_even(list(range(n)), n_mb)
    for v in VARIANTS:
        out["log-prob pass"][v] = forwards_positions(
            prompt_ids, response_ids, pass_groups(prompt_ids, response_ids, list(range(n)),
                                                  shape["logprob_batch_rows"], v), v, shape["suffix_buckets"])
        out["update"][v] = sum(forwards_positions(prompt_ids, response_ids,
                                                  micro_groups(prompt_ids, response_ids, mb, shape["micro_batch_rows"],
                                                               v), v, shape["suffix_buckets"]) for mb in minis)
    return out


def shape_of(path: str, nproc: int) -> dict:
    from trainer.config import config_from_argv

    t = config_from_argv(["--config", path], prog=PROG).trainer
    return {"preset": path, "nproc": nproc, "mini_batch_rows": t.mini_batch_rows,
            "micro_batch_rows": t.micro_batch_rows, "logprob_batch_rows": t.logprob_batch_rows,
            "suffix_buckets": t.suffix_buckets}


def rollout_rows(preset: str, init_from: str | None, batches: int) -> tuple[list, str]:
    """``batches`` rollouts (lists of (prompt ids, response ids)) of ``preset``'s trainer, and what played them."""
    from trainer.config import config_from_argv
    from trainer.loop import Trainer
    from trainer.run_folder import RunFolder

    model = ["sft.enabled=false"] if init_from is None else [f"sft.init_from={init_from}"]
    with tempfile.TemporaryDirectory(prefix="row_order-") as tmp:
        cfg = config_from_argv(["--config", preset, *model, f"trainer.iterations={batches}", "eval.at_start=false",
                                "eval.every=100000", f"output_dir={tmp}/run", "trainer.resume=false",
                                "logging.tensorboard=false"], prog=PROG)
        folder = RunFolder(cfg, f"{tmp}/runs")
        folder.start_fresh()
        tr = Trainer(cfg, folder)
        tr.setup()
        try:
            out = []
            for it in range(1, batches + 1):
                b = tr.rollout(it)[0]
                out.append((list(b.prompt_ids), list(b.response_ids)))
                print(f"[row-order] rollout {it}: {len(b.prompt_ids)} rows", file=sys.stderr, flush=True)
        finally:
            tr.close()
    who = f"warm start {init_from}" if init_from else f"the untrained `{cfg.model.path}` (responses near the cap)"
    return out, who


def summarise(recs: list[dict], rows: list[tuple], shape: dict, who: str, cmd: str, machine: str,
              rate: float, load_txt: str) -> str:
    lines = ["# Token positions of the trainer's passes: rows in prompt order vs length order", "",
             f"Command: `{cmd}`.", f"Machine: {machine}; 1024^3 fp32 matmul {rate:.0f} GFLOP/s; {load_txt}.", "",
             f"Rows: {len(rows)} rollout(s) of `{PRESET}`'s generated ALFWorld played by {who}; "
             f"rows per rollout {[len(p) for p, _ in rows]}; response tokens per row: median "
             f"{_median([int(r.numel()) for _, rs in rows for r in rs])}, max "
             f"{max(int(r.numel()) for _, rs in rows for r in rs)}; prompt tokens: median "
             f"{_median([int(p.numel()) for ps, _ in rows for p in ps])}.",
             f"Batch shape of `{shape['preset']}` on {shape['nproc']} ranks, each rollout as one rank's rows: "
             f"{shape['logprob_batch_rows']} rows per log-prob forward, mini-batches of "
             f"{shape['mini_batch_rows']} / {shape['nproc']} rows per rank in micro-batches of "
             f"{shape['micro_batch_rows']}, suffix_buckets {shape['suffix_buckets']}.", "",
             "Token positions (padding included) summed over the rollouts; ratio = positions / length order's.", "",
             "| pass | " + " | ".join(VARIANTS) + " |", "|---|" + "---|" * len(VARIANTS)]
    for ph in ("log-prob pass", "update"):
        tot = {v: sum(r[ph][v] for r in recs) for v in VARIANTS}
        base = tot[VARIANTS[1]]
        lines.append(f"| {ph} | " + " | ".join(f"{tot[v]:,} ({tot[v] / base:.2f}x)" for v in VARIANTS) + " |")
    lines.append("")
    return "\n".join(lines)


def _median(xs: list[int]) -> float:
    import statistics

    return statistics.median(xs)


def parser() -> argparse.ArgumentParser:
    """The options of ``python -m benchmarks.switches row-order``."""
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default=PRESET, help="the preset whose trainer plays the rollouts")
    ap.add_argument("--init-from", default=None, help="warm start the rollouts play from (default: untrained)")
    ap.add_argument("--shape", default=SHAPE, help="the preset whose batch shape the passes take")
    ap.add_argument("--nproc", type=int, default=4, help="ranks of --shape's run (mini-batch rows per rank)")
    ap.add_argument("--batches", type=int, default=1)
    ap.add_argument("--matmul-threads", type=int, default=2, help="torch threads of the matmul rate printed")
    ap.add_argument("--out", default=None, help="also write the table to this markdown file")
    return ap


def main(argv: list[str]) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.nproc < 1 or args.batches < 1:
        print("--nproc and --batches must be >= 1", file=sys.stderr)
        return 2
    import torch

    from benchmarks.iteration_phases import matmul_gflops
    from common.machine import describe, loadavg
    from common.tables import emit_table

    load0 = loadavg()
    shape = shape_of(args.shape, args.nproc)
    rows, who = rollout_rows(args.preset, args.init_from, args.batches)
    recs = [batch_positions(ps, rs, shape) for ps, rs in rows]
    threads = torch.get_num_threads()
    torch.set_num_threads(args.matmul_threads)
    rate = matmul_gflops()
    torch.set_num_threads(threads)
    shown = [PROG, f"--batches {args.batches}"]
    for flag, val, default in (("--preset", args.preset, PRESET), ("--init-from", args.init_from, None),
                               ("--shape", args.shape, SHAPE), ("--nproc", args.nproc, 4)):
        if val != default:
            shown.append(f"{flag} {val}")
    machine = describe(threads=False) + f", matmul at {args.matmul_threads} thread(s)"
    emit_table(summarise(recs, rows, shape, who, " ".join(shown), machine, rate,
                         f"load average before / after: {load0} / {loadavg()}"), args.out)
    return 0
