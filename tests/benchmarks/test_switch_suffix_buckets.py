"""The suffix-bucket benchmark's work accounting and report (``python -m benchmarks.switches suffix-buckets``): a
bucketed pack is counted at each bucket's own width, and the report gives every variant with its speed-up and
differences."""
from __future__ import annotations

import pytest
import torch

from benchmarks.iteration_phases import batch_work
from benchmarks.switches.suffix_buckets import pass_work, summarise
from trainer.forward import pack_rows_shared


def _rows():
    g = torch.Generator().manual_seed(0)
    head = torch.randint(2, 100, (20,), generator=g)
    ps = [torch.cat([head, torch.randint(2, 100, (n,), generator=g)]) for n in (1, 60, 2, 70)]
    rs = [torch.randint(2, 100, (3,), generator=g) for _ in ps]
    return ps, rs


def test_a_bucketed_pack_is_counted_at_each_buckets_width():
    ps, rs = _rows()
    one = pack_rows_shared(ps, rs, min_saving=0.0)
    two = pack_rows_shared(ps, rs, min_saving=0.0, suffix_buckets=2)
    assert two.suffix_bucket.tolist() == [1, 0, 1, 0]
    k, width = one.prefix_ids.shape  # one prefix of 20 tokens
    assert (k, width) == (1, 20)
    # suffixes: 1 + 3, 60 + 3, 2 + 3, 70 + 3 tokens; one forward pads all four to 73
    assert batch_work(one)[:2] == (20 + 4 * 73, 20 * 20 + 4 * 73 * (20 + 73))
    assert batch_work(two)[:2] == (20 + 2 * 73 + 2 * 5, 20 * 20 + 2 * 73 * (20 + 73) + 2 * 5 * (20 + 5))
    assert two.padded_tokens == batch_work(two)[0] and one.padded_tokens == batch_work(one)[0]
    assert pass_work(ps, rs, 4, 2)[0] == batch_work(two)[0] < pass_work(ps, rs, 4, 1)[0]


def test_report_gives_every_variant_and_its_speed_up():
    def cell(wall, dlp):
        phase = {"wall": wall, "cpu": wall, "positions": 100, "gflop": 1.0, "floor_gflop": 0.5}
        return {"logprobs": dict(phase), "update": dict(phase), "max_dlogp": dlp, "max_dhidden": dlp / 10}

    rec = {"matmul_gflops": 100.0, "threads": 1, "shape": {}, "batches": [{"rows": 8, 1: cell(2.0, 0.0),
                                                                            4: cell(1.0, 3e-6)}]}
    text = summarise(rec, [1, 4], "python -m benchmarks.switches suffix-buckets", "test machine", "load 0")
    assert "| log-prob passes | 4 | 1.00 |" in text and "| update | 1 | 2.00 |" in text
    assert "| 4 | 2.00 | 2.00x |" in text and "| 1 | 4.00 | 1.00x |" in text
    assert "3.0e-06" in text


@pytest.mark.parametrize("argv, says", [
    (["--buckets", "1,x"], "give integers"),
    (["--buckets", "0,2"], "must be >= 1"),
    (["--batches", "0"], "must be >= 1"),
    (["--preset", "configs/cpu/finite_rooms_gt.yaml"], "pass --init-from"),
])
def test_bad_arguments_are_refused_before_any_compute(argv, says, capsys):
    from benchmarks.switches.suffix_buckets import main

    assert main(argv) == 2
    assert says in capsys.readouterr().err
