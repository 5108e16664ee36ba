"""Benchmark: the PPO ratio's old log-probs and the BiGPO hidden states from the rollout instead of the trainer's
own pass (``trainer.old_logprobs: rollout`` against ``recompute``), on real rollout batches.

    python -m benchmarks.switches old-logprobs  # demo preset, cached warm start
    python -m benchmarks.switches old-logprobs --batches 5 --threads 1 --out results/benchmarks/old_logprobs.md
    python -m benchmarks.switches old-logprobs --preset configs/cpu/finite_rooms_gt.yaml --init-from DIR

The HF engine already computes each sampled token's ``log softmax(z / tau)``, and its prompt forward passes
through layer L at the last prompt token, where BiGPO reads its state. With ``recompute`` (verl's way, the
default) the trainer runs one more forward over every row's [prompt | response] to get both; with ``rollout``
it takes them from the rollout (``SamplingConfig.hidden_layer``) and skips that forward.

The preset's trainer plays ``--batches`` iterations from the warm start. In each, the rollout runs twice on the
same tasks and seeds, without and with the hidden state captured (the order alternates), and the rows whose
tokens differ are counted (0 expected). Then, on that batch: the old-log-prob pass as ``recompute`` runs it, the
reference pass and the PPO update (both the same arithmetic under either source: timed once). The iteration of
each variant adds its rollout, its old log-probs (the recompute pass, or building them from the rollout) and the
common reference pass and update. The last columns give the largest difference between the two sources'
log-probs and hidden states over all batches.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile

PRESET = "configs/cpu/textcraft_demo.yaml"
VARIANTS = ("recompute", "rollout")

PROG = "python -m benchmarks.switches old-logprobs"


def run(preset: str, init_from: str, batches: int, threads: int | None, extra: tuple[str, ...] = ()) -> dict:
    """The measurements of ``batches`` iterations (``extra``: more config overrides, e.g. a smaller batch)."""
    import copy

    import torch

    from benchmarks.iteration_phases import bench_trainer, floor_work, forward_flops, packed_work, timed
    from benchmarks.switches.suffix_buckets import pass_work
    from trainer.loop import old_from_rollout

    if threads:
        torch.set_num_threads(threads)
    tmp_dir = tempfile.TemporaryDirectory(prefix="old_logprobs-")
    tmp = tmp_dir.name
    tr, shape, rate = bench_trainer(preset, init_from, batches, f"{tmp}/run", f"{tmp}/runs", prog=PROG,
                                    extra=("trainer.old_logprobs=recompute", *extra))
    eng = tr.ppo_actor
    layer = tr.cfg.model.hidden_layer
    plain = dataclasses.replace(tr.train_sampling, hidden_layer=None)
    capture = dataclasses.replace(tr.train_sampling, hidden_layer=layer)
    rec: dict = {"threads": torch.get_num_threads(), "matmul_gflops": rate, "shape": shape, "batches": []}
    try:
        for it in range(1, batches + 1):
            sampler = copy.deepcopy(tr.sampler)  # both rollouts draw the same tasks, with the same seeds
            row: dict = {}
            got = {}
            order = VARIANTS if it % 2 else VARIANTS[::-1]
            for v in order:
                tr.sampler = copy.deepcopy(sampler)
                tr.train_sampling = capture if v == "rollout" else plain
                got[v], w, c = timed(lambda it=it: tr.rollout(it)[0])
                row[f"rollout/{v}"] = {"wall": w, "cpu": c}
            a, b = got["recompute"], got["rollout"]
            row["rows"] = len(a)
            row["rows_differing"] = (sum(x.tolist() != y.tolist() for x, y in zip(a.response_ids, b.response_ids))
                                     + abs(len(a) - len(b)))
            batch = b
            ps, rs = batch.prompt_ids, batch.response_ids
            old, w1, c1 = timed(eng.compute_logprobs, ps, rs, pad_id=tr.pad_id)
            mine, w0, c0 = timed(old_from_rollout, batch)
            ref, w2, c2 = timed(eng.compute_logprobs, ps, rs, reference=True, hidden=False, pad_id=tr.pad_id)
            adv, _ = tr.advantages(batch.to_step_batch(hidden=old.hidden), it)
            gen = torch.Generator().manual_seed(1000 + it)
            _, w3, c3 = timed(eng.update, ps, rs, adv, old.logprobs, ref.logprobs, generator=gen, pad_id=tr.pad_id)
            n_resp = sum(int(r.numel()) for r in rs)
            if eng.cfg.prefix_sharing:
                pos, att = pass_work(ps, rs, eng.cfg.logprob_batch_rows, eng.cfg.suffix_buckets)
            else:
                pos, att, _ = packed_work(ps, rs, eng.cfg.logprob_batch_rows, False)
            fl_tok, fl_att = floor_work(ps, rs)
            row["old/recompute"] = {"wall": w1, "cpu": c1, "positions": pos,
                                    "gflop": forward_flops(shape, pos, att, n_resp) / 1e9,
                                    "floor_gflop": forward_flops(shape, fl_tok, fl_att, n_resp) / 1e9}
            row["old/rollout"] = {"wall": w0, "cpu": c0, "positions": 0, "gflop": 0.0, "floor_gflop": 0.0}
            row["ref"] = {"wall": w2, "cpu": c2}
            row["update"] = {"wall": w3, "cpu": c3}
            row["max_dlogp"] = float((mine.logprobs - old.logprobs)[old.mask].abs().max())
            row["max_dhidden"] = (float((mine.hidden - old.hidden).abs().max())
                                  if old.hidden is not None and mine.hidden is not None else float("nan"))
            tr.sync_weights()
            tr.train_sampling = plain
            rec["batches"].append(row)
            print(f"[old-logprobs] batch {it}: {len(a)} rows, rollout {row['rollout/recompute']['wall']:.1f} / "
                  f"{row['rollout/rollout']['wall']:.1f} s, old pass {w1:.1f} s, ref {w2:.1f} s, update {w3:.1f} s",
                  file=sys.stderr, flush=True)
    finally:
        tr.close()
        tmp_dir.cleanup()
    return rec


def summarise(rec: dict, cmd: str, machine: str, load_txt: str) -> str:
    its = rec["batches"]
    rate = rec["matmul_gflops"]

    def med(key, f="wall"):
        return statistics.median(r[key][f] for r in its)

    lines = ["# Old log-probs and hidden states from the rollout (`trainer.old_logprobs`)", "",
             f"Command: `{cmd}`.", f"Machine: {machine}; {load_txt}.", "",
             "Median seconds per iteration over the batches (wall, and CPU of this process). `recompute` = the "
             "trainer's old-log-prob pass over [prompt | response] (the default); `rollout` = the HF engine's sampler "
             "log-probs and its prompt forward's layer-L state (the rollout captures the state; the pass is "
             "skipped). The reference pass and the update are the same arithmetic under both, timed once. 'x floor' "
             "= wall / (the pass's unavoidable FLOPs at the matmul rate measured in the same process).", "",
             "| phase | variant | wall s | CPU s | positions | x floor |", "|---|---|---|---|---|---|"]
    for v in VARIANTS:
        lines.append(f"| rollout | {v} | {med(f'rollout/{v}'):.2f} | {med(f'rollout/{v}', 'cpu'):.2f} | | |")
    for v in VARIANTS:
        floor_s = statistics.median(r[f"old/{v}"]["floor_gflop"] for r in its) / rate
        xf = f"{med(f'old/{v}') / floor_s:.1f}" if floor_s > 0 else "(no pass)"
        lines.append(f"| old log-probs + hidden | {v} | {med(f'old/{v}'):.3f} | {med(f'old/{v}', 'cpu'):.3f} | "
                     f"{statistics.median(r[f'old/{v}']['positions'] for r in its):,.0f} | {xf} |")
    lines.append(f"| reference log-probs | both | {med('ref'):.2f} | {med('ref', 'cpu'):.2f} | | |")
    lines.append(f"| update | both | {med('update'):.2f} | {med('update', 'cpu'):.2f} | | |")
    tot = {v: statistics.median(r[f"rollout/{v}"]["wall"] + r[f"old/{v}"]["wall"] + r["ref"]["wall"]
                                + r["update"]["wall"] for r in its) for v in VARIANTS}
    lines += ["", "| variant | s / iteration (rollout + old + reference + update) | speed-up vs recompute |",
              "|---|---|---|"]
    lines += [f"| {v} | {tot[v]:.2f} | {tot['recompute'] / tot[v]:.2f}x |" for v in VARIANTS]
    lines += ["", f"Largest difference between the two sources over {len(its)} batches: log-prob "
              f"{max(r['max_dlogp'] for r in its):.1e}, hidden state {max(r['max_dhidden'] for r in its):.1e}. Rollout "
              f"rows whose tokens differ with the hidden state captured: {[r['rows_differing'] for r in its]} of "
              f"{[r['rows'] for r in its]}. Matmul rate (1024^3 fp32): {rate:.0f} GFLOP/s; torch threads "
              f"{rec['threads']}; model {rec['shape']}.", ""]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    """The options of ``python -m benchmarks.switches old-logprobs``."""
    from . import batch_parser

    ap = batch_parser(PROG, __doc__.split("\n\n")[0], PRESET)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    return ap


def main(argv: list[str]) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.batches < 1 or (args.threads is not None and args.threads < 1):
        print("--batches and --threads must be >= 1", file=sys.stderr)
        return 2
    from benchmarks.iteration_phases import warmstart_for

    init = warmstart_for(args.preset, args.init_from)
    if init is None:
        return 2
    from common.machine import describe, loadavg
    from common.tables import emit_table

    load0 = loadavg()
    rec = run(args.preset, init, args.batches, args.threads)
    shown = [PROG, f"--batches {args.batches}"]
    if args.threads:
        shown.append(f"--threads {args.threads}")
    if args.preset != PRESET:
        shown.append(f"--preset {args.preset}")
    emit_table(summarise(rec, " ".join(shown), describe(threads=True),
                         f"load average before / after: {load0} / {loadavg()}"), args.out)
    return 0
