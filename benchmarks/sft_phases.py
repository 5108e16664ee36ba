"""Benchmark: the SFT warm start's optimizer step, variant by variant, against its compute floor.

    python -m benchmarks.sft_phases                          # 40 steps per variant, the warm start's settings
    python -m benchmarks.sft_phases --steps 60 --out results/benchmarks/sft.md

The warm start's round 0 (``warmstart.recipe``, defaults of ``WarmStartConfig``: the 4-layer, width-128 tiny model,
8 rows per step, prompt-token loss at weight 0.3, one torch thread) spends nearly all its time in these steps. Four
variants run in one process, each from the same initial weights on the first ``--steps`` mini-batches of its own
plan (same expert rows, same seed), taking turns step by step so that none gets the process's slow first minutes
alone:

* ``row`` batches (shuffled rows, similar lengths together: the default) or ``episode`` batches (the rows of shuffled
  episodes in turn: ``batch_by="episode"``), and
* ``unshared`` (every row computes its whole prompt: the default) or ``shared`` (rows sharing a prompt prefix compute
  it once, and its tokens' loss counts once per row: ``share_prompt_loss``).
* with ``--compile``, a fifth: the default (``row``, ``unshared``) with the model's decoder through
  ``torch.compile(dynamic=True)``: fused elementwise kernels, paid for by compiling in its first steps.

Per variant: wall and CPU seconds per step, real tokens, the token positions the kernels computed (padding
included), the GFLOP they cost (forward + backward = 3 forwards), the rate reached as a share of the machine's
matmul rate (a 1024^3 fp32 matmul in the same process), and the floor: the work of the batch's prompt prefix tree
(every distinct prefix once) plus the responses, causal attention over the real context, at that matmul rate.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.iteration_phases import batch_work, floor_work, forward_flops, matmul_gflops, model_shape

VARIANTS = [("row", False, False), ("row", True, False), ("episode", False, False), ("episode", True, False)]
"""(batches, shared prefixes, torch.compile) of each variant; ``--compile`` adds ``COMPILED``."""
COMPILED = ("row", False, True)


def step_work(prompt_ids, response_ids, share: bool) -> tuple[int, int, int]:
    """(positions, attended keys, real tokens) of one SFT step's forward over these rows, packed as
    ``SFTLearner`` packs them with a prompt-token loss (one micro-batch)."""
    import torch

    from trainer.forward import pack_rows, pack_rows_shared

    if share:
        return batch_work(pack_rows_shared(prompt_ids, response_ids, 0, score_prompt=True))
    return batch_work(pack_rows([p[:1] for p in prompt_ids],
                                [torch.cat([p[1:], r]) for p, r in zip(prompt_ids, response_ids)]))


def run(steps: int, episodes: int, threads: int, compiled: bool = False) -> dict:
    import torch

    torch.set_num_threads(threads)
    from agents.models import load_model, load_tokenizer
    from agents.models.tiny import TinyModelConfig, build_tiny_model
    from agents.rollout import prompt_config_for
    from warmstart import sft
    from warmstart.config import WarmStartConfig
    from warmstart.recipe import _splits, _tasks

    cfg = WarmStartConfig()
    train_split, _ = _splits(cfg)
    rows = sft.collect_expert_rows(cfg.env_id, _tasks(cfg, train_split, episodes, salt=1),
                                   env_kwargs=cfg.resolved_env_kwargs, style=cfg.rationale)
    with tempfile.TemporaryDirectory() as tmp:
        init = build_tiny_model(Path(tmp) / "init", TinyModelConfig(layers=cfg.tiny_layers, hidden=cfg.tiny_hidden,
                                heads=cfg.tiny_heads, vocab_size=cfg.tiny_vocab, seed=cfg.seed),
                                corpus=list(sft.rows_corpus(rows[: cfg.tokenizer_rows], cfg.env_short)), force=True)
        tok = load_tokenizer(init)
        data = sft.encode_rows(rows, tok, cfg.env_short, prompt_config_for(tok, cfg.max_prompt_tokens,
                                                                           cfg.history_length))
        shape = model_shape(load_model(init, dtype="float32"))
        rate = matmul_gflops()
        learners, plans, logs = {}, {}, {}
        variants = VARIANTS + ([COMPILED] if compiled else [])
        for v in variants:
            batch_by, share, comp = v
            g = torch.Generator().manual_seed(cfg.seed * 1000)
            plans[v] = (sft._batches if batch_by == "row" else sft._episode_batches)(data, cfg.batch_rows, g)[:steps]
            learners[v] = sft.SFTLearner(load_model(init, dtype="float32"),
                                         sft.sft_trainer_config(lr=cfg.lr, batch_rows=cfg.batch_rows,
                                                                micro_batch_rows=cfg.batch_rows,
                                                                warmup_steps=cfg.warmup_steps,
                                                                zero_stage=cfg.zero_stage),
                                         total_steps=steps, prompt_weight=cfg.prompt_weight, share_prompt_loss=share)
            if comp:  # the decoder through torch.compile (inductor), shapes dynamic: its first steps compile
                learners[v].lm.get_decoder().compile(dynamic=True)  # in place: policy_forward calls this module
            logs[v] = {k: [] for k in ("wall", "cpu", "tokens", "gflop", "floor_gflop", "positions", "loss")}
        for k in range(steps):  # the variants take turns, step by step (a process runs slower at first)
            for j in range(len(variants)):
                v = variants[(j + k) % len(variants)]
                if k >= len(plans[v]):
                    continue
                _batch_by, share, _comp = v
                idx = plans[v][k]
                ps, rs = [data.prompt_ids[i] for i in idx], [data.response_ids[i] for i in idx]
                t, c = time.perf_counter(), time.process_time()
                m = learners[v].step(ps, rs, int(tok.pad_token_id))
                log = logs[v]
                log["wall"].append(time.perf_counter() - t)
                log["cpu"].append(time.process_time() - c)
                log["loss"].append(m["loss/sft"])
                pos, att, real = step_work(ps, rs, share)
                scored = sum(int(p.numel()) - 1 + int(r.numel()) for p, r in zip(ps, rs))
                log["positions"].append(pos)
                log["tokens"].append(real)
                log["gflop"].append(3 * forward_flops(shape, pos, att, scored) / 1e9)
                ft, fa = floor_work(ps, rs)
                log["floor_gflop"].append(3 * forward_flops(shape, ft, fa, scored) / 1e9)
        cells = {}
        for v, log in logs.items():
            warm = slice(min(3, len(log["wall"]) - 1), None)  # the first steps touch fresh memory
            cells[v] = {"wall": statistics.median(log["wall"][warm]), "cpu": statistics.median(log["cpu"][warm]),
                        "tokens": statistics.mean(log["tokens"]), "positions": statistics.mean(log["positions"]),
                        "gflop": statistics.mean(log["gflop"]), "floor_gflop": statistics.mean(log["floor_gflop"]),
                        "loss_first": log["loss"][0], "loss_last": log["loss"][-1], "steps": len(log["wall"]),
                        "first3": sum(log["wall"][:3])}
    return {"cells": cells, "rate": rate, "shape": shape, "rows": len(data), "episodes": len(set(data.episode))}


def summarise(res: dict, cmd: str, threads: int, machine: str, load_txt: str) -> str:
    from warmstart.config import WarmStartConfig

    cfg = WarmStartConfig()
    rate = res["rate"]
    base = res["cells"][("row", False, False)]["wall"]
    rows_round0 = round(res["rows"] * cfg.expert_episodes / res["episodes"])  # the default's 800 episodes
    steps_round0 = round(cfg.epochs * rows_round0 / cfg.batch_rows)
    lines = [
        "# The SFT warm start's step, against its compute floor",
        "",
        f"Command: `{cmd}`.",
        f"Machine: {machine}; {threads} torch thread(s); load average before / after: {load_txt}; "
        f"matmul rate (1024^3 fp32) {rate:.0f} GFLOP/s; model {res['shape']}; {res['rows']} expert rows of "
        f"{res['episodes']} episodes; 8 rows per step, prompt-token weight 0.3 (the warm start's defaults).",
        "",
        "Median over the steps after the first three. 'positions': token positions the kernels computed (padding "
        "included); 'floor': the batch's prompt prefix tree once plus the responses, causal attention, forward + "
        "backward, at the matmul rate. 'round 0 min' = s/step x the default round 0's steps "
        f"(~{steps_round0} = 3 passes over ~{rows_round0} rows of 800 episodes / 8); the loss columns show the "
        "variants train alike. 'first 3 steps s': their wall time together (a compiled variant compiles there; "
        "with dynamic shapes a new shape can still recompile later, in the median's steps).",
        "",
        "| batches | prefixes | wall s/step | CPU s/step | tokens | positions | GFLOP | GFLOP/s | % of matmul rate "
        "| floor s | x floor | speed-up | round 0 min | loss first / last | first 3 steps s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (batch_by, share, comp), c in res["cells"].items():
        floor_s = c["floor_gflop"] / rate
        lines.append(
            f"| {batch_by} | {'shared' if share else 'unshared'}{', torch.compile' if comp else ''} | "
            f"{c['wall']:.3f} | {c['cpu']:.3f} | "
            f"{c['tokens']:,.0f} | {c['positions']:,.0f} | {c['gflop']:.1f} | {c['gflop'] / c['wall']:.1f} | "
            f"{100 * c['gflop'] / c['wall'] / rate:.1f} | {floor_s:.3f} | {c['wall'] / floor_s:.1f} | "
            f"{base / c['wall']:.2f}x | {c['wall'] * steps_round0 / 60:.1f} | {c['loss_first']:.2f} / "
            f"{c['loss_last']:.2f} | {c['first3']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.sft_phases", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40, help="optimizer steps per variant")
    ap.add_argument("--episodes", type=int, default=200, help="expert episodes (the warm start uses 800)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the warm start's default: 1)")
    ap.add_argument("--out", default=None, help="also write the table to this file")
    ap.add_argument("--compile", action="store_true",
                    help="add the default variant with its decoder through torch.compile (dynamic shapes)")
    a = ap.parse_args(argv)
    if a.steps < 4:
        ap.error("--steps must be >= 4 (the first three are not counted)")
    from common.machine import describe, loadavg

    load0 = loadavg()
    res = run(a.steps, a.episodes, a.threads, compiled=a.compile)
    cmd = "python -m benchmarks.sft_phases" + "".join(f" {x}" for x in (argv if argv is not None else sys.argv[1:]))
    text = summarise(res, cmd, a.threads, describe(), f"{load0} / {loadavg()}")
    print(text)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
