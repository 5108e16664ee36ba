"""The SFT step benchmark's work accounting and report (``benchmarks.sft_phases``)."""
from __future__ import annotations

import torch

from benchmarks.sft_phases import COMPILED, VARIANTS, step_work, summarise


def test_shared_step_work_counts_the_prefix_once():
    g = torch.Generator().manual_seed(0)
    head = torch.randint(2, 100, (40,), generator=g)
    ps = [torch.cat([head, torch.randint(2, 100, (5,), generator=g)]) for _ in range(8)]
    rs = [torch.randint(2, 100, (6,), generator=g) for _ in range(8)]
    pos_u, att_u, real_u = step_work(ps, rs, share=False)
    pos_s, att_s, real_s = step_work(ps, rs, share=True)
    assert real_u == sum(p.numel() + r.numel() for p, r in zip(ps, rs)) == pos_u  # equal lengths: no padding
    assert real_s == real_u - 7 * 40  # the 40-token head once instead of 8 times
    assert pos_s < pos_u and att_s < att_u


def test_report_names_every_variant_and_its_speed_up():
    def cell(wall):
        return {"wall": wall, "cpu": wall, "tokens": 10, "positions": 12, "gflop": 1.0, "floor_gflop": 0.5,
                "loss_first": 7.0, "loss_last": 6.0, "steps": 10, "first3": 3 * wall}

    walls = {("row", False, False): 2.0, ("row", True, False): 1.0, ("episode", False, False): 1.6,
             ("episode", True, False): 0.8, COMPILED: 1.25}
    res = {"cells": {v: cell(walls[v]) for v in [*VARIANTS, COMPILED]}, "rate": 100.0, "shape": {}, "rows": 100,
           "episodes": 20}
    res["cells"][COMPILED]["first3"] = 51.0
    text = summarise(res, "python -m benchmarks.sft_phases", 1, "test machine", "0 / 0")
    assert "| row | unshared | 2.000 |" in text and "| 1.00x |" in text
    assert "| episode | shared | 0.800 |" in text and "| 2.50x |" in text
    assert "| row | unshared, torch.compile | 1.250 |" in text and "| 1.60x |" in text and "| 51.0 |" in text
    assert "~1500 = 3 passes over ~4000 rows" in text  # round 0 of the default warm start, scaled to 800 episodes
