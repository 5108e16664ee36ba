"""Torch threads on a shared CPU: one SFT-shaped training step (the demo's tiny 4x128 model, 8 rows of 512
tokens, forward + backward + AdamW) timed per setting, idle and beside one busy process, in one run.

    python -m benchmarks.switches threads  # table to stdout
    python -m benchmarks.switches threads --out results/benchmarks/threads.md

Each cell is a fresh subprocess (OpenMP reads its settings when torch loads) that runs ``--warmup`` steps, then
times ``--steps``; "busy" = a second process spinning on one core for the whole cell. The settings: a fixed thread
count with OpenMP's defaults (waiting threads spin), with ``OMP_WAIT_POLICY=PASSIVE`` (they sleep) or a shorter
spin (``GOMP_SPINCOUNT``), one thread, and ``auto`` (``trainer.threads.configure_threads(0)``: the cores no other
process is using when it starts).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from common.tables import emit_table

_WORKER = r"""
import json, os, sys, time
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM
from trainer.threads import configure_threads
n = configure_threads(int(sys.argv[1]))
torch.manual_seed(0)
cfg = Qwen2Config(vocab_size=1200, hidden_size=128, intermediate_size=512, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=1024)
model = Qwen2ForCausalLM(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, 1200, (8, 512))
def step():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
for _ in range(int(sys.argv[2])):
    step()
t0, c0 = time.perf_counter(), time.process_time()
for _ in range(int(sys.argv[3])):
    step()
print(json.dumps({"threads": n, "s_per_step": (time.perf_counter() - t0) / int(sys.argv[3]),
                  "cpu_s_per_step": (time.process_time() - c0) / int(sys.argv[3]),
                  }))
"""

_SPIN = "import time\nt = time.time() + 3600\nwhile time.time() < t:\n    pass\n"

SETTINGS = [  # (label, threads argument: 0 = auto, OpenMP variables)
    ("2 threads, OpenMP defaults (spin)", 2, {}),
    ("2 threads, OMP_WAIT_POLICY=PASSIVE", 2, {"OMP_WAIT_POLICY": "PASSIVE"}),
    ("2 threads, GOMP_SPINCOUNT=10000", 2, {"GOMP_SPINCOUNT": "10000"}),
    ("1 thread", 1, {}),
    ("auto (free cores), OpenMP defaults", 0, {}),
    ("auto (free cores), PASSIVE", 0, {"OMP_WAIT_POLICY": "PASSIVE"}),
]
_OMP_VARS = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "GOMP_SPINCOUNT")

PROG = "python -m benchmarks.switches threads"


def run_cell(threads: int, omp: dict, busy: bool, warmup: int, steps: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _OMP_VARS}
    env.update(omp)
    spinner = subprocess.Popen([sys.executable, "-c", _SPIN]) if busy else None
    try:
        if spinner:
            time.sleep(1.5)  # let the load average see it
        out = subprocess.run([sys.executable, "-c", _WORKER, str(threads), str(warmup), str(steps)], env=env,
                             cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, check=True)
    finally:
        if spinner:
            spinner.kill()
            spinner.wait()
    return json.loads(out.stdout.strip().splitlines()[-1])


def parser() -> argparse.ArgumentParser:
    """The options of ``python -m benchmarks.switches threads``."""
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out", default=None, help="also write the table to this markdown file")
    return ap


def main(argv: list[str]) -> int:
    from common.machine import describe, loadavg

    ap = parser()
    args = ap.parse_args(argv)
    rows = []
    base = None
    for label, threads, omp in SETTINGS:
        for busy in (False, True):
            r = run_cell(threads, omp, busy, args.warmup, args.steps)
            base = base or r["s_per_step"]
            rows.append(f"| {label} | {'busy' if busy else 'idle'} | {r['threads']} | {r['s_per_step']:.3f} | "
                        f"{r['cpu_s_per_step']:.3f} | {r['s_per_step'] / base:.2f}x |")
            print(rows[-1], flush=True)
    cmd = PROG + (f" --warmup {args.warmup} --steps {args.steps}")
    text = "\n".join([
        "# Torch threads on a shared CPU", "",
        f"Command: `{cmd}`. Machine: {describe(threads=False)}; load before the run {loadavg()}.", "",
        "One SFT-shaped step (tiny 4x128 Qwen2, 8 x 512 tokens, bf16 autocast, forward + backward + AdamW); "
        "'busy' = one other process spinning on one core. Time relative to the first row.", "",
        "| setting | other process | torch threads | wall s / step | CPU s / step | vs 2 threads idle |",
        "|---|---|---|---|---|---|", *rows, ""])
    emit_table(text, args.out)
    return 0
