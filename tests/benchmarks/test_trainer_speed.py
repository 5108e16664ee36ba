"""The benchmark's step runs (the same code path as the GPU mode, on a tiny model) and, on CUDA, at 1.5B scale."""
from __future__ import annotations

import math

import pytest

from benchmarks.trainer_speed import GPU_CELL, QUICK_CELL, run_cell, run_subprocess


def _check(r: dict) -> None:
    for k in ("t_old", "t_ref", "t_upd", "t_est", "step_s", "upd_tokens_s", "peak_mb", "bipace_share"):
        assert math.isfinite(r[k]) and r[k] >= 0, k
    assert r["rows"] > 0 and r["tokens"] > r["rows"]


def test_benchmark_cell_on_a_tiny_model():
    cell = dict(QUICK_CELL, model="tiny", stage=0, device="cpu", threads=1, P=1, G=2, S=2, prompt=32, response=8,
                repeats=1)
    _check(run_cell(cell))


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_benchmark_qwen25_15b_architecture():
    r = run_subprocess(dict(GPU_CELL, model="qwen2.5-1.5b", stage=0, device="cuda", threads=4, S=1, repeats=1),
                       timeout=1800)
    _check(r)
    assert 1.4e3 < r["params_m"] < 1.6e3  # the 1.5B architecture, tied embeddings
    assert r["hidden"] == 1536
