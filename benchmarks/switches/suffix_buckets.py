"""Benchmark: the trainer's forwards with their suffixes in length buckets (``trainer.suffix_buckets``), on real
rollout batches, against one suffix forward and against the compute floor.

    python -m benchmarks.switches suffix-buckets  # demo preset, cached warm start
    python -m benchmarks.switches suffix-buckets --batches 4 --out results/benchmarks/buckets.md
    python -m benchmarks.switches suffix-buckets --preset configs/cpu/finite_rooms_gt.yaml --init-from DIR

With ``trainer.prefix_sharing`` a forward runs the rows' shared prompt prefixes once, then the rest of every row
(its "suffix": the last prompt tokens and the response) as one batch right-padded to the longest suffix. Suffix
lengths vary by an order of magnitude within a batch, so much of that batch is padding. With ``suffix_buckets``
= B the suffixes run in up to B forwards of rows of similar length (``agents.prefixes.plan_length_buckets``),
each over its own copy of the prefixes' KV cache.

The preset's trainer plays ``--batches`` real rollouts from the warm start. On each batch, every variant (the
values of ``--buckets``, in an order that rotates from batch to batch) runs the old-log-prob pass (with the hidden
state), the reference pass and the PPO update from the same weights and optimizer state; the run then goes on
from the ``suffix_buckets=1`` update. Per variant the table gives the median wall and CPU seconds, the token
positions computed (padding included), the GFLOP, the floor (each distinct prompt prefix once plus every response
token, causal attention, timed at the matmul rate measured in the same process; as in
``benchmarks.iteration_phases``), the speed-up over one suffix forward, and the largest difference of its
log-probs and hidden states from one suffix forward's.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile

PRESET = "configs/cpu/textcraft_demo.yaml"

PROG = "python -m benchmarks.switches suffix-buckets"


def pass_work(prompt_ids, response_ids, bsz: int, suffix_buckets: int) -> tuple[int, int]:
    """(token positions, attended keys) of a pass over these rows as the engine runs it with prefix sharing: rows
    in prompt order, ``bsz`` per forward, each packed by ``pack_rows_shared`` with ``suffix_buckets``."""
    from benchmarks.iteration_phases import batch_work
    from trainer.forward import pack_rows_shared, prefix_order

    order = prefix_order(prompt_ids)
    pos = att = 0
    for k in range(0, len(order), bsz):
        idx = order[k: k + bsz]
        p_, a_, _ = batch_work(pack_rows_shared([prompt_ids[i] for i in idx], [response_ids[i] for i in idx],
                                                suffix_buckets=suffix_buckets))
        pos, att = pos + p_, att + a_
    return pos, att


def run(preset: str, init_from: str, batches: int, variants: list[int]) -> dict:
    import torch

    from benchmarks.iteration_phases import bench_trainer, floor_work, forward_flops, timed

    tmp_dir = tempfile.TemporaryDirectory(prefix="suffix_buckets-")
    tmp = tmp_dir.name
    tr, shape, rate = bench_trainer(preset, init_from, batches, f"{tmp}/run", f"{tmp}/runs", prog=PROG,
                                    extra=("trainer.prefix_sharing=true",))
    eng = tr.ppo_actor
    rec: dict = {"threads": torch.get_num_threads(), "matmul_gflops": rate, "shape": shape, "batches": []}
    try:
        for it in range(1, batches + 1):
            batch = tr.rollout(it)[0]
            ps, rs = batch.prompt_ids, batch.response_ids
            n_resp = sum(int(r.numel()) for r in rs)
            fl_tok, fl_att = floor_work(ps, rs)
            floor = forward_flops(shape, fl_tok, fl_att, n_resp) / 1e9
            state = ({k: v.detach().clone() for k, v in eng.lm.state_dict().items()},
                     copy.deepcopy(eng.optimizer_state()), copy.deepcopy(eng.counters_state()))
            shift = (it - 1) % len(variants)
            turn = variants[shift:] + variants[:shift]
            if 1 in turn:  # the run goes on from one suffix forward's update: it runs last
                turn.remove(1)
                turn.append(1)
            row: dict = {"rows": len(ps)}
            outs = {}
            adv = None
            for v in turn:
                eng.cfg.suffix_buckets = v
                eng.lm.load_state_dict(state[0])
                eng.load_optimizer_state(*copy.deepcopy(state[1]))
                eng.load_counters_state(copy.deepcopy(state[2]))
                old, w1, c1 = timed(eng.compute_logprobs, ps, rs, pad_id=tr.pad_id)
                ref, w2, c2 = timed(eng.compute_logprobs, ps, rs, reference=True, hidden=False,
                                    pad_id=tr.pad_id)
                if adv is None:
                    adv, _ = tr.advantages(batch.to_step_batch(hidden=old.hidden), it)
                gen = torch.Generator().manual_seed(1000 + it)
                _, w3, c3 = timed(eng.update, ps, rs, adv, old.logprobs, ref.logprobs, generator=gen,
                                  pad_id=tr.pad_id)
                outs[v] = old
                lp_pos, lp_att = pass_work(ps, rs, eng.cfg.logprob_batch_rows, v)
                up_pos, up_att = pass_work(ps, rs, eng.cfg.micro_batch_rows, v)
                lp_gf = forward_flops(shape, lp_pos, lp_att, n_resp) / 1e9
                up_gf = 3 * forward_flops(shape, up_pos, up_att, n_resp) / 1e9
                row[v] = {"logprobs": {"wall": w1 + w2, "cpu": c1 + c2, "positions": 2 * lp_pos, "gflop": 2 * lp_gf,
                                       "floor_gflop": 2 * floor},
                          "update": {"wall": w3, "cpu": c3, "positions": up_pos, "gflop": up_gf,
                                     "floor_gflop": 3 * floor}}
            base = outs[1]
            for v in variants:
                row[v]["max_dlogp"] = float((outs[v].logprobs - base.logprobs)[base.mask].abs().max())
                row[v]["max_dhidden"] = (float((outs[v].hidden - base.hidden).abs().max())
                                         if base.hidden is not None else float("nan"))
            eng.cfg.suffix_buckets = 1
            tr.sync_weights()
            rec["batches"].append(row)
            print(f"[suffix-buckets] batch {it}: " + ", ".join(
                f"B={v} {row[v]['logprobs']['wall'] + row[v]['update']['wall']:.1f}s" for v in variants),
                file=sys.stderr, flush=True)
    finally:
        tr.close()
        tmp_dir.cleanup()
    return rec


def summarise(rec: dict, variants: list[int], cmd: str, machine: str, load_txt: str) -> str:
    rate = rec["matmul_gflops"]
    lines = ["# The trainer's forwards with suffixes in length buckets (`trainer.suffix_buckets`)", "",
             f"Command: `{cmd}`.", f"Machine: {machine}; {load_txt}.", "",
             "Median over the batches. 'log-prob passes' = the old-log-prob pass (with the hidden state) + the "
             "reference pass; 'positions' are the token positions computed, padding included (the update's are "
             "counted as if its micro-batches were the batch's prefix-ordered rows); 'floor' = the unavoidable "
             "FLOPs at the matmul rate measured in the same process; 'x floor' = wall / floor time. The last "
             "columns: the largest difference from B = 1 over the batches.", "",
             "| pass | B | wall s | CPU s | positions | GFLOP | % of matmul rate | x floor | speed-up vs B = 1 | "
             "max abs. diff. log-prob | max abs. diff. hidden |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    its = rec["batches"]
    totals = {}
    for ph, name in (("logprobs", "log-prob passes"), ("update", "update")):
        base_wall = statistics.median(r[1][ph]["wall"] for r in its)
        for v in variants:
            def med(f, v=v, ph=ph):
                return statistics.median(r[v][ph][f] for r in its)
            wall, cpu, gf, floor = med("wall"), med("cpu"), med("gflop"), med("floor_gflop")
            totals[v] = totals.get(v, 0.0) + wall
            dlp = max(r[v]["max_dlogp"] for r in its)
            dh = max(r[v]["max_dhidden"] for r in its)
            lines.append(f"| {name} | {v} | {wall:.2f} | {cpu:.2f} | {med('positions'):,.0f} | {gf:.1f} | "
                         f"{100 * gf / wall / rate:.1f} | {wall / (floor / rate):.1f} | {base_wall / wall:.2f}x | "
                         f"{dlp:.1e} | {dh:.1e} |")
    lines += ["", "| B | log-prob passes + update, s | speed-up vs B = 1 |", "|---|---|---|"]
    lines += [f"| {v} | {totals[v]:.2f} | {totals[1] / totals[v]:.2f}x |" for v in variants]
    lines += ["", f"Matmul rate (1024^3 fp32): {rate:.0f} GFLOP/s; torch threads {rec['threads']}; model "
              f"{rec['shape']}; rows per batch {[r['rows'] for r in its]}.", ""]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    """The options of ``python -m benchmarks.switches suffix-buckets``."""
    from . import batch_parser

    ap = batch_parser(PROG, __doc__.split("\n\n")[0], PRESET)
    ap.add_argument("--buckets", default="1,2,4,8", help="comma list of trainer.suffix_buckets values (1 included)")
    return ap


def main(argv: list[str]) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    try:
        variants = sorted({int(x) for x in args.buckets.split(",") if x.strip()} | {1})
    except ValueError:
        print(f"--buckets {args.buckets!r}: give integers >= 1, e.g. 1,2,4,8", file=sys.stderr)
        return 2
    if min(variants) < 1 or args.batches < 1:
        print("--buckets values and --batches must be >= 1", file=sys.stderr)
        return 2
    from benchmarks.iteration_phases import warmstart_for

    init = warmstart_for(args.preset, args.init_from)
    if init is None:
        return 2
    from common.machine import describe, loadavg
    from common.tables import emit_table

    load0 = loadavg()
    rec = run(args.preset, init, args.batches, variants)
    shown = [PROG, f"--batches {args.batches}", f"--buckets {args.buckets}"]
    if args.preset != PRESET:
        shown.append(f"--preset {args.preset}")
    emit_table(summarise(rec, variants, " ".join(shown), describe(threads=True),
                         f"load average before / after: {load0} / {loadavg()}"), args.out)
    return 0
