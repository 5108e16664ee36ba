"""The phase benchmark's work accounting (``benchmarks.iteration_phases``): the floor counts each distinct prompt
prefix once, the packed counts follow the packing the engine uses, and the report names every phase."""
from __future__ import annotations

import torch

from benchmarks.iteration_phases import floor_work, forward_flops, packed_work, summarise


def test_floor_counts_each_distinct_prefix_once():
    # two rows share their first 3 prompt tokens; each keeps its last prompt token; responses of 2 and 1 tokens
    ps = [torch.tensor([5, 6, 7, 8]), torch.tensor([5, 6, 7, 9, 10])]
    rs = [torch.tensor([1, 2]), torch.tensor([3])]
    tokens, att = floor_work(ps, rs)
    # prefix tree of prompt[:-1]: {5, 56, 567} from row 0, {5679} new from row 1 -> 4 tokens; + (1 + 2) + (1 + 1)
    assert tokens == 4 + 3 + 2
    # causal context: tree tokens at depths 1,2,3,4 -> 10; row 0 scores at 4,5,6; row 1 at 5,6
    assert att == 10 + (4 + 5 + 6) + (5 + 6)


def test_shared_packing_computes_fewer_positions_than_unshared():
    g = torch.Generator().manual_seed(0)
    head = torch.randint(2, 100, (40,), generator=g)
    ps = [torch.cat([head, torch.randint(2, 100, (5,), generator=g)]) for _ in range(8)]
    rs = [torch.randint(2, 100, (6,), generator=g) for _ in range(8)]
    pos_u, att_u, real_u = packed_work(ps, rs, 8, share=False)
    pos_s, att_s, real_s = packed_work(ps, rs, 8, share=True)
    assert real_u == sum(p.numel() + r.numel() for p, r in zip(ps, rs)) == pos_u
    assert real_s == real_u - 7 * 40  # the 40-token head once instead of 8 times
    assert pos_s < pos_u and att_s < att_u
    assert floor_work(ps, rs)[0] <= real_s


def test_forward_flops_of_a_known_shape():
    shape = {"layers": 2, "width": 8, "per_layer": 100, "d": 4, "vocab": 10}
    assert forward_flops(shape, positions=3, attended=6, scored=2) == 2 * (2 * 100 * 3 + 4 * 8 * 6) + 2 * 4 * 10 * 2


def test_report_has_every_phase_and_the_speed_up():
    def phase(wall):
        return {"wall": wall, "cpu": wall, "tokens": 10, "positions": 12, "gflop": 1.0, "floor_gflop": 0.5}

    it = {"rows": 4, "rollout/hf": phase(2.0), "rollout/lean": phase(1.0), "rollout/cascade": phase(0.5)}
    for ph in ("logprobs_old", "logprobs_ref", "update"):
        it[f"{ph}/unshared"], it[f"{ph}/shared"] = phase(2.0), phase(1.0)
    cells = {p: {"matmul_gflops": 100.0, "threads": 2, "shape": {}, "iterations": [it]} for p in ("default", "passive")}
    text = summarise(cells, "python -m benchmarks.iteration_phases", "load 0", "test machine")
    for ph in ("rollout", "logprobs_old", "logprobs_ref", "update"):
        assert f"| default | {ph} |" in text
    assert "| default | rollout | cascade |" in text
    # rollout + old + reference + update against the plain path (passive, hf, unshared, recompute)
    assert "| passive | hf | unshared | recompute | 8.0 | 1.00x |" in text
    assert "| passive | hf | shared | recompute | 5.0 | 1.60x |" in text
    assert "| passive | lean | shared | recompute | 4.0 | 2.00x |" in text
    # the old log-probs from the sampler: no old pass, and only with the lean engine's rollout
    assert "| default | cascade | shared | rollout | 2.5 | 3.20x |" in text
    assert "| passive | hf | shared | rollout |" not in text
