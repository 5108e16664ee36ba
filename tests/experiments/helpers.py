"""Shared by the experiments tests: running an ``experiments.*`` command in a clean child process."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def child_env() -> dict:
    """This process's environment, offline, one thread, without a parent's torch.distributed rendezvous."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="offline",
               TOKENIZERS_PARALLELISM="false")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return env


def run_module(module: str, args: list[str], timeout: int, **kw) -> subprocess.CompletedProcess:
    """``python -m <module> <args>`` from the repo root, output captured as text."""
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=child_env(),
                          capture_output=True, text=True, timeout=timeout, **kw)
