"""The old-log-prob source benchmark (``benchmarks.switches.old_logprobs``): a real run on a tiny model finds the same
tokens and the same log-probs and hidden states from both sources; the report adds the phases per variant."""
from __future__ import annotations

import pytest
import torch

from benchmarks.switches.old_logprobs import run, summarise

TINY = "tiny:layers=2,hidden=64,heads=2"


def test_a_real_batch_gives_the_same_values_from_both_sources():
    from trainer.models import resolve_model_folder

    n = torch.get_num_threads()
    try:
        rec = run("configs/cpu/textcraft_tiny.yaml", str(resolve_model_folder(TINY)), 1, 1,
                  extra=("env.groups=2", "env.group_size=2", "env.max_steps=3", "rollout.max_response_tokens=16",
                         "logging.progress_bar=false"))
    finally:
        torch.set_num_threads(n)
    (row,) = rec["batches"]
    assert row["rows"] >= 4 and row["rows_differing"] == 0
    assert row["max_dlogp"] < 2e-5 and row["max_dhidden"] < 1e-5
    assert row["old/recompute"]["positions"] > 0 and row["old/rollout"]["positions"] == 0


def test_report_adds_the_phases_of_each_variant():
    def ph(wall):
        return {"wall": wall, "cpu": wall}

    row = {"rows": 10, "rows_differing": 0, "max_dlogp": 2e-6, "max_dhidden": 1e-6,
           "rollout/recompute": ph(4.0), "rollout/rollout": ph(4.5), "ref": ph(2.0), "update": ph(6.0),
           "old/recompute": {**ph(2.5), "positions": 100, "gflop": 1.0, "floor_gflop": 0.5},
           "old/rollout": {**ph(0.01), "positions": 0, "gflop": 0.0, "floor_gflop": 0.0}}
    text = summarise({"matmul_gflops": 1.0, "threads": 1, "shape": {}, "batches": [row]}, "cmd", "machine", "load")
    assert "| recompute | 14.50 | 1.00x |" in text and "| rollout | 12.51 | 1.16x |" in text
    assert "| old log-probs + hidden | recompute | 2.500 | 2.500 | 100 | 5.0 |" in text
    assert "(no pass)" in text and "log-prob 2.0e-06, hidden state 1.0e-06" in text


@pytest.mark.parametrize("argv, says", [
    (["--batches", "0"], "must be >= 1"),
    (["--threads", "0"], "must be >= 1"),
    (["--preset", "configs/cpu/finite_rooms_gt.yaml"], "pass --init-from"),
])
def test_bad_arguments_are_refused_before_any_compute(argv, says, capsys):
    from benchmarks.switches.old_logprobs import main

    assert main(argv) == 2
    assert says in capsys.readouterr().err
