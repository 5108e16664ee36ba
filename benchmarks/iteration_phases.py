"""Benchmark: where an RL iteration's time goes, phase by phase, against each phase's compute floor.

    python -m benchmarks.iteration_phases                       # demo preset, warm start from the cache
    python -m benchmarks.iteration_phases --iterations 5 --out results/benchmarks/phases.md
    python -m benchmarks.iteration_phases --preset configs/cpu/textcraft_demo.yaml --init-from DIR

One process per OpenMP wait policy (the policy is read when torch loads): ``default`` (OpenMP's own: waiting
threads spin a short while, then sleep; the repo's default) and ``passive``
(``OMP_WAIT_POLICY=PASSIVE``: they sleep at once). In each process the trainer of the
preset runs ``--iterations`` real iterations from the warm start (the same seeds in both processes, so the same
rollouts up to float rounding). Each iteration's rollout runs three times on the same tasks and seeds: ``hf``
(Hugging Face's decode step, every prompt prefilled whole: the plain reference), ``lean``
(``decode="lean"``, shared prompt prefixes prefilled once, each row's decode attention over its own copy of its
prefix) and ``cascade`` (the same, with each prefix's keys read once for all its rows at
every decode step: the default); the rows whose tokens differ from ``hf``'s are counted. In every iteration the
old-log-prob pass (with the hidden state), the reference pass and the PPO update each run twice on the same batch from
the same weights and optimizer state: once with
``trainer.prefix_sharing=false`` (every row computes its whole prompt) and once with it on (``trainer/forward.py``);
the run then goes on from the shared variant's update.

Per phase the table gives the median wall and CPU seconds, the tokens, the token positions the kernels computed
(padding included), the GFLOP those positions cost, and the floor: the GFLOP of the work that cannot be avoided
(every distinct prompt prefix once, as a prefix tree of the batch's prompts, plus every response token; causal
attention over the real context only), timed at the machine's matmul rate (a 1024^3 fp32 matmul measured in the
same process). FLOPs per token and layer: 2 x the layer's weights, plus 4 x width x context for attention; the
LM head at scored positions; a backward costs 2 forwards.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRESET = "configs/cpu/textcraft_demo.yaml"
POLICIES = {"default": {}, "passive": {"OMP_WAIT_POLICY": "PASSIVE"}}
ROLLOUTS = ("hf", "lean", "cascade")  # the HF engine's decode paths, oldest first (module docstring)


# ------------------------------------------------------------------------------------------------ FLOP model
def model_shape(lm) -> dict:
    c = lm.config
    d = int(c.hidden_size)
    heads = int(c.num_attention_heads)
    kv = int(getattr(c, "num_key_value_heads", heads) or heads)
    hd = int(getattr(c, "head_dim", None) or d // heads)
    inter = int(c.intermediate_size)
    per_layer = d * heads * hd + 2 * d * kv * hd + heads * hd * d + 3 * d * inter
    return {"layers": int(c.num_hidden_layers), "width": heads * hd, "per_layer": per_layer, "d": d,
            "vocab": int(c.vocab_size)}


def forward_flops(shape: dict, positions: int, attended: int, scored: int) -> float:
    """positions: token positions run; attended: sum over them of the keys each one scores; scored: LM-head rows."""
    body = shape["layers"] * (2.0 * shape["per_layer"] * positions + 4.0 * shape["width"] * attended)
    return body + 2.0 * shape["d"] * shape["vocab"] * scored


def packed_work(prompt_ids, response_ids, bsz: int, share: bool) -> tuple[int, int, int]:
    """(token positions, attended keys, real tokens) of the no-gradient pass over these rows in batches of bsz,
    as ``PPOActor.compute_logprobs`` packs them (dense attention over each batch's padded width)."""

    from trainer.forward import length_order, pack_rows, pack_rows_shared, prefix_order

    n = len(prompt_ids)
    order = prefix_order(prompt_ids) if share else length_order(prompt_ids, response_ids)
    pos = att = real = 0
    for k in range(0, n, bsz):
        idx = order[k: k + bsz]
        ps, rs = [prompt_ids[i] for i in idx], [response_ids[i] for i in idx]
        p_, a_, r_ = batch_work(pack_rows_shared(ps, rs) if share else pack_rows(ps, rs))
        pos, att, real = pos + p_, att + a_, real + r_
    return pos, att, real


def batch_work(b) -> tuple[int, int, int]:
    """(token positions, attended keys, real tokens) of one forward over a ``PackedBatch`` or a
    ``PrefixPackedBatch`` (dense attention over the padded widths)."""
    from trainer.forward import PrefixPackedBatch

    if isinstance(b, PrefixPackedBatch):
        kk, ll = b.prefix_ids.shape
        fwd = b.suffix_forwards()  # (rows, width) of each suffix forward (one per bucket)
        return (b.padded_tokens, kk * ll * ll + sum(n * w * (ll + w) for n, w in fwd), b.num_tokens)
    nn_, tt = b.input_ids.shape
    return nn_ * tt, nn_ * tt * tt, b.num_tokens


def floor_work(prompt_ids, response_ids) -> tuple[int, int]:
    """(tokens, attended keys) of the unavoidable work: the prefix tree of the prompts (each distinct prefix once;
    a row keeps its last prompt token) plus each row's response, causal attention over the real context."""
    seen: set = set()
    tokens = att = 0
    for p, r in zip(prompt_ids, response_ids):
        ids = p.tolist()
        h = ()
        for t in range(len(ids) - 1):
            h = (h, ids[t])
            if h not in seen:
                seen.add(h)
                tokens += 1
                att += t + 1
        lp, lr = len(ids), int(r.numel())
        tokens += 1 + lr
        att += sum(lp + j for j in range(lr + 1))
    return tokens, att


def matmul_gflops(size: int = 1024, reps: int = 5) -> float:
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2.0 * size ** 3 / best / 1e9


# ------------------------------------------------------------------------------------------------ one process
def timed(fn, *args, **kwargs):
    """(fn(*args, **kwargs), wall seconds, CPU seconds of this process)."""
    t, c = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t, time.process_time() - c


def bench_trainer(preset: str, init_from: str, iterations: int, out_dir: str, runs_root: str, *, prog: str,
                  extra: tuple[str, ...] = ()):
    """(a set-up ``Trainer`` of ``preset`` from the warm start ``init_from``, with no evaluation and a fresh run
    folder, its model's shape, the matmul rate in GFLOP/s measured now): what a benchmark of the trainer's phases
    starts from."""
    from trainer.config import config_from_argv
    from trainer.loop import Trainer
    from trainer.run_folder import RunFolder

    cfg = config_from_argv(["--config", preset, f"sft.init_from={init_from}", f"trainer.iterations={iterations}",
                            "eval.at_start=false", "eval.every=100000", f"output_dir={out_dir}",
                            "trainer.resume=false", "logging.tensorboard=false", *extra], prog=prog)
    folder = RunFolder(cfg, runs_root)
    folder.start_fresh()
    tr = Trainer(cfg, folder)
    tr.setup()
    return tr, model_shape(tr.ppo_actor.lm), matmul_gflops()


def run_cell(preset: str, init_from: str, iterations: int, out_dir: str) -> dict:
    import copy

    import torch

    tr, shape, rate = bench_trainer(preset, init_from, iterations, out_dir, str(ROOT / "results" / "runs"),
                                    prog="iteration_phases")
    eng = tr.ppo_actor
    rec: dict = {"threads": torch.get_num_threads(), "policy": os.environ.get("OMP_WAIT_POLICY", "default"),
                 "matmul_gflops": rate, "shape": shape, "iterations": []}
    try:
        for it in range(1, iterations + 1):
            row: dict = {}
            sampler = copy.deepcopy(tr.sampler)  # both rollouts draw the same tasks
            tokens = {}
            for decode in ROLLOUTS:  # the same seeds: the same rollout (tests/agents/test_engines_hf.py)
                tr.sampler = copy.deepcopy(sampler)
                tr.rollout_engine.decode = "hf" if decode == "hf" else "lean"
                tr.rollout_engine.share_prefixes = decode != "hf"
                tr.rollout_engine.cascade = decode == "cascade"
                batch, wall, cpu = timed(lambda it=it: tr.rollout(it)[0])
                row[f"rollout/{decode}"] = (wall, cpu)
                tokens[decode] = [r.tolist() for r in batch.response_ids]
            row["rollout_rows_differing"] = {
                d: sum(a != b for a, b in zip(tokens["hf"], tokens[d])) + abs(len(tokens["hf"]) - len(tokens[d]))
                for d in ROLLOUTS[1:]}
            ps, rs = batch.prompt_ids, batch.response_ids
            n_resp = sum(int(r.numel()) for r in rs)
            gen_tok, gen_att = floor_work(ps, rs)
            real_prompt = sum(int(p.numel()) for p in ps)
            # generation as the HF engine runs it: each row's prompt prefilled (dense over the turn's width is
            # not tracked here: real tokens), each response token decoded with the LM head over the vocabulary
            gen_att_done = sum(int(p.numel()) ** 2 + sum(int(p.numel()) + j for j in range(int(r.numel())))
                               for p, r in zip(ps, rs))
            for decode in ROLLOUTS:
                wall, cpu = row[f"rollout/{decode}"]
                row[f"rollout/{decode}"] = {
                    "wall": wall, "cpu": cpu, "tokens": real_prompt + n_resp, "positions": real_prompt + n_resp,
                    "gflop": forward_flops(shape, real_prompt + n_resp, gen_att_done, n_resp + len(ps)) / 1e9,
                    "floor_gflop": forward_flops(shape, gen_tok, gen_att, n_resp + len(ps)) / 1e9}
            row["rows"] = len(ps)
            state = ({k: v.detach().clone() for k, v in eng.lm.state_dict().items()},
                     copy.deepcopy(eng.optimizer_state()), copy.deepcopy(eng.counters_state()))
            adv = None
            for share in (False, True):
                eng.cfg.prefix_sharing = share
                eng.lm.load_state_dict(state[0])
                eng.load_optimizer_state(*copy.deepcopy(state[1]))
                eng.load_counters_state(copy.deepcopy(state[2]))
                tag = "shared" if share else "unshared"
                old, w1, c1 = timed(lambda ps=ps, rs=rs: eng.compute_logprobs(ps, rs, pad_id=tr.pad_id))
                ref, w2, c2 = timed(lambda ps=ps, rs=rs: eng.compute_logprobs(ps, rs, reference=True,
                                                                               hidden=False, pad_id=tr.pad_id))
                if adv is None:
                    adv, _ = tr.advantages(batch.to_step_batch(hidden=old.hidden), it)
                gen = torch.Generator().manual_seed(1000 + it)
                _, w3, c3 = timed(lambda ps=ps, rs=rs, adv=adv, old=old, ref=ref, gen=gen: eng.update(
                    ps, rs, adv, old.logprobs, ref.logprobs, generator=gen, pad_id=tr.pad_id))
                pos, att, real = packed_work(ps, rs, eng.cfg.logprob_batch_rows, share)
                fwd = forward_flops(shape, pos, att, n_resp) / 1e9
                fl_tok, fl_att = floor_work(ps, rs)
                floor = forward_flops(shape, fl_tok, fl_att, n_resp) / 1e9
                upos, uatt, ureal = packed_work(ps, rs, eng.cfg.micro_batch_rows, share)
                ufwd = forward_flops(shape, upos, uatt, n_resp) / 1e9
                row[f"logprobs_old/{tag}"] = {"wall": w1, "cpu": c1, "tokens": real, "positions": pos,
                                              "gflop": fwd, "floor_gflop": floor}
                row[f"logprobs_ref/{tag}"] = {"wall": w2, "cpu": c2, "tokens": real, "positions": pos,
                                              "gflop": fwd, "floor_gflop": floor}
                row[f"update/{tag}"] = {"wall": w3, "cpu": c3, "tokens": ureal, "positions": upos,
                                        "gflop": 3 * ufwd, "floor_gflop": 3 * floor}
            tr.sync_weights()
            rec["iterations"].append(row)
            print(json.dumps({"iteration": it, **{k: round(v["wall"], 2) for k, v in row.items()
                                                  if isinstance(v, dict) and "wall" in v}}), file=sys.stderr,
                                                  flush=True)
    finally:
        tr.close()
    return rec


# ------------------------------------------------------------------------------------------------ report
def summarise(cells: dict[str, dict], cmd: str, load_txt: str, machine: str) -> str:
    phases = ["rollout", "logprobs_old", "logprobs_ref", "update"]
    variants = {"rollout": list(ROLLOUTS)}
    lines = [
        "# Where an RL iteration's time goes (demo preset), against each phase's compute floor", "",
        f"Command: `{cmd}`.", f"Machine: {machine}; {load_txt}.", "",
        "Median over the iterations of each process; wall and CPU seconds per iteration. 'positions' are the "
        "token positions the kernels computed (padding included); 'floor' times the unavoidable FLOPs (each "
        "distinct prompt prefix once, causal attention, the backward at 2 forwards) at the matmul rate measured "
        "in the same process. 'x floor' = wall / floor time.", "",
        "| OpenMP wait | phase | variant | wall s | CPU s | tokens | positions | GFLOP | GFLOP/s | "
        "% of matmul rate | floor s | x floor |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    med_wall: dict[tuple[str, str, str], float] = {}
    for pol, rec in cells.items():
        rate = rec["matmul_gflops"]
        its = rec["iterations"]
        for ph in phases:
            for tag in variants.get(ph, ["unshared", "shared"]):
                key = f"{ph}/{tag}"
                vals = [r[key] for r in its if key in r]
                if not vals:
                    continue

                def med(f, vals=vals):
                    return statistics.median(v[f] for v in vals)

                wall, cpu, fl, floor = med("wall"), med("cpu"), med("gflop"), med("floor_gflop")
                floor_s = floor / rate
                lines.append(f"| {pol} | {ph} | {tag} | {wall:.2f} | {cpu:.2f} | {med('tokens'):,.0f} | "
                             f"{med('positions'):,.0f} | {fl:.1f} | {fl / wall:.1f} | {100 * fl / wall / rate:.1f} | "
                             f"{floor_s:.2f} | {wall / floor_s:.0f} |")
                med_wall[(pol, ph, tag)] = wall
    totals: dict[tuple[str, str, str, str], float] = {}
    for pol in cells:
        for dec in variants["rollout"]:
            for tag in ("unshared", "shared"):
                parts = [med_wall.get((pol, "rollout", dec)), med_wall.get((pol, "logprobs_ref", tag)),
                         med_wall.get((pol, "update", tag))]
                old_pass = med_wall.get((pol, "logprobs_old", tag))
                if None in parts:
                    continue
                if old_pass is not None:
                    totals[(pol, dec, tag, "recompute")] = sum(parts) + old_pass
                if dec != "hf":  # the sampler's log-probs (and hidden states) need the lean engine's rollout pass
                    totals[(pol, dec, tag, "rollout")] = sum(parts)
    base_pol = "passive" if "passive" in cells else next(iter(cells))  # one thread: no worker threads to wait
    lines += ["", "Iteration (rollout + reference pass + update, plus the old-log-prob pass with "
              "`trainer.old_logprobs=recompute`; the advantages take < 0.1 s), and ratios to the plain path "
              f"(`{base_pol}`, rollout `hf`, forwards `unshared`, old log-probs recomputed; the repo ran `passive` "
              "then). "
              "The demo preset runs `default`, `cascade`, `shared`, `rollout`:", "",
              "| OpenMP wait | rollout | forwards | old log-probs | s / iteration | speed-up |",
              "|---|---|---|---|---|---|"]
    base = totals.get((base_pol, "hf", "unshared", "recompute"))
    for (pol, dec, tag, old), tot in sorted(totals.items()):
        ratio = f"{base / tot:.2f}x" if base else ""
        lines.append(f"| {pol} | {dec} | {tag} | {old} | {tot:.1f} | {ratio} |")
    rec0 = next(iter(cells.values()))
    lines += ["", "Matmul rate (1024^3 fp32): " + ", ".join(f"{p} {c['matmul_gflops']:.0f} GFLOP/s"
                                                        for p, c in cells.items()) +
              f"; torch threads {rec0['threads']}; model {rec0['shape']}; rows per iteration "
              f"{[r['rows'] for r in rec0['iterations']]}; rollout rows whose tokens differ from the `hf` rollout's, "
              "per "
              f"iteration: {[r.get('rollout_rows_differing') for c in cells.values() for r in c['iterations']]}.", ""]
    return "\n".join(lines)


def demo_warmstart() -> str | None:
    """The cached TextCraft warm start the demo preset trains from (the one its ``sft.warmstart`` settings build), or
    None after saying how to build it."""
    from trainer.config import config_from_argv
    from warmstart.cache import find_warmstart, warmstart_cli_args

    extra = warmstart_cli_args(config_from_argv(["--config", str(ROOT / PRESET)], prog="benchmark").sft.warmstart)
    found = find_warmstart("textcraft", extra=extra)
    if found is None:
        cmd = " ".join(["python -m experiments.warmstart --env textcraft", *extra])
        print(f"no cached warm start of the demo preset: build it with `{cmd}` (or `make demo`), or pass "
              "--init-from DIR", file=sys.stderr)
        return None
    return str(found)


def warmstart_for(preset: str, init_from: str | None) -> str | None:
    """The model folder a benchmark of ``preset`` starts from: ``--init-from``, or for the demo preset only its
    cached warm start; None after saying what to pass."""
    if init_from is not None:
        return init_from
    if preset != PRESET:
        print(f"--preset {preset}: pass --init-from DIR, the warm start it trains from (the cached default is only "
              "known for the demo preset)", file=sys.stderr)
        return None
    return demo_warmstart()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.iteration_phases", description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default=PRESET)
    ap.add_argument("--init-from", default=None, help="warm-started model folder (default: the cached warm start)")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--policies", default="default,passive", help="comma list of: " + ", ".join(POLICIES))
    ap.add_argument("--out", default=None, help="also write the table to this markdown file")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads per cell (default: every core; 1 = as each of the demo's two parallel runs)")
    ap.add_argument("--cell", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        print(f"--threads {args.threads}: must be >= 1", file=sys.stderr)
        return 2
    if args.cell:
        rec = run_cell(args.preset, args.init_from, args.iterations, args.cell)
        print(json.dumps(rec))
        return 0
    init = args.init_from or demo_warmstart()
    if init is None:
        return 2
    pols = [p.strip() for p in args.policies.split(",") if p.strip()]
    bad = [p for p in pols if p not in POLICIES]
    if bad:
        print(f"--policies: unknown {bad}; choose from {list(POLICIES)}", file=sys.stderr)
        return 2
    import tempfile

    from common.machine import describe, loadavg
    from common.tables import emit_table

    load0 = loadavg()
    cells = {}
    with tempfile.TemporaryDirectory() as tmp:
        for pol in pols:
            env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
            env.update(POLICIES[pol])
            if args.threads is not None:  # torch takes its thread count from it when the cell loads torch
                env["OMP_NUM_THREADS"] = str(args.threads)
            cmd = [sys.executable, "-m", "benchmarks.iteration_phases", "--preset", args.preset, "--init-from", init,
                   "--iterations", str(args.iterations), "--cell", str(Path(tmp) / pol)]
            out = subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True)
            cells[pol] = json.loads(out.stdout.strip().splitlines()[-1])
    shown = ["python -m benchmarks.iteration_phases", f"--iterations {args.iterations}"]
    if args.preset != PRESET:
        shown.append(f"--preset {args.preset}")
    if args.policies != "default,passive":
        shown.append(f"--policies {args.policies}")
    if args.threads is not None:
        shown.append(f"--threads {args.threads}")
    text = summarise(cells, " ".join(shown), f"load average before / after: {load0} / {loadavg()}",
                     describe(threads=False))
    emit_table(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
