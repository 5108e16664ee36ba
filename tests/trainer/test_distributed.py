"""ZeRO on 2 CPU processes (torchrun, gloo) trains exactly like 1 process; multi-rank checkpoints resume exactly."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from trainer.ppo_actor import free_port

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("dist_worker.py")


def _run(cmd: list[str], timeout: int = 600) -> None:
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)  # this pytest process is itself rank 0 of a 1-process group
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(cmd)} failed:\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("stage", [2, 3])
def test_two_processes_match_one(tmp_path, stage):
    one, two = str(tmp_path / "one.safetensors"), str(tmp_path / "two.safetensors")
    _run([sys.executable, str(WORKER), one, str(stage)])
    _run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
          "--master_port", str(free_port()), str(WORKER), two, str(stage)])
    a, b = load_file(one), load_file(two)
    ja, jb = json.loads(Path(one + ".json").read_text()), json.loads(Path(two + ".json").read_text())
    assert ja["world"] == 1 and jb["world"] == 2
    assert ja["resumed_equal"] and jb["resumed_equal"]  # multi-rank checkpoint resumes bitwise
    diff = max(float((a[k] - b[k]).abs().max()) for k in a if k.startswith("param."))
    assert diff < 1e-6, diff  # docs/cpu.md, "DeepSpeed on CPU": 3e-7 after 10 steps
    assert torch.allclose(a["hidden"], b["hidden"], rtol=1e-4, atol=1e-4)  # |h| ~ 5: float noise
    for ma, mb in zip(ja["metrics"], jb["metrics"]):  # metrics are reduced over ranks
        assert ma["loss/optimizer_steps"] == mb["loss/optimizer_steps"] == 2.0
        for k in ("loss/policy", "loss/kl", "loss/entropy", "loss/grad_norm"):
            assert abs(ma[k] - mb[k]) <= 1e-5 * max(1.0, abs(ma[k])), (k, ma[k], mb[k])


@pytest.mark.slow
def test_a_nonfinite_shard_on_one_rank_stops_every_rank_save(tmp_path):
    """ZeRO-3 on 2 ranks: a NaN in rank 1's partition of one weight makes both ranks refuse the save with the same
    NonFiniteError naming it (one all-reduce both ranks join), no rank hangs, and iteration 1 stays the newest."""
    out = str(tmp_path / "nf")
    _run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
          "--master_port", str(free_port()), str(WORKER.with_name("dist_nonfinite_worker.py")), out], timeout=300)
    seen = [json.loads(Path(f"{out}.rank{r}.json").read_text()) for r in (0, 1)]
    assert seen[0]["shard_numel"] < seen[0]["full_numel"]  # each rank holds only a part of the weight
    for s in seen:
        assert s["error"] is not None and "model.layers.0.mlp.up_proj.weight" in s["error"], s
        assert s["checkpoints"] == ["iter_00000001"]
    assert seen[0]["error"] == seen[1]["error"]
