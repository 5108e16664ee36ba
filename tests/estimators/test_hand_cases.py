"""Hand-computed advantages for every estimator (docs/method.md formulas worked out on paper)."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from estimators import ESTIMATORS, EstimatorConfig, compute_advantages
from estimators.reference import reference_advantages

from .helpers import act, hgpo_prestart_batch, make_batch, one_hot_hidden

S3 = 1 / math.sqrt(3)
S2 = 1 / math.sqrt(2)


@pytest.fixture
def small():
    # one prompt group; traj 0 wins on its second step, traj 1 is one invalid step
    rows = [
        (0, 0, 0, 0.0, True, "A", act("go north")),
        (0, 0, 1, 10.0, True, "B", act("take key")),
        (0, 1, 0, 0.0, False, "A", "garbage"),
    ]
    return make_batch(rows)


def test_grpo_by_hand(small):
    # S = [10, 10, -0.1]: two equal values and one other -> +-1/sqrt(3), -2/sqrt(3) (unbiased std)
    res = compute_advantages(small, EstimatorConfig(name="grpo"))
    assert res.advantages.tolist() == pytest.approx([S3, S3, -2 * S3], abs=1e-5)
    assert res.step.abs().max() == 0


def test_grpo_mean_norm(small):
    res = compute_advantages(small, EstimatorConfig(name="grpo", norm_mode="mean_norm"))
    m = (10 + 10 - 0.1) / 3
    assert res.advantages.tolist() == pytest.approx([10 - m, 10 - m, -0.1 - m], abs=1e-5)


def test_gigpo_by_hand(small):
    # R = [0.95 * 10, 10, -0.1]; anchor "A" = rows {0, 2} -> +-1/sqrt(2); row 1 alone -> 0
    res = compute_advantages(small, EstimatorConfig(name="gigpo"))
    assert res.step.tolist() == pytest.approx([S2, 0.0, -S2], abs=1e-5)
    assert res.episode.tolist() == pytest.approx([S3, S3, -2 * S3], abs=1e-5)
    assert res.advantages.tolist() == pytest.approx([S3 + S2, S3, -2 * S3 - S2], abs=1e-5)
    assert res.cluster_id[0] == res.cluster_id[2] != res.cluster_id[1]
    # step weight scales only the step term
    res2 = compute_advantages(small, EstimatorConfig(name="gigpo", step_weight=0.5))
    assert res2.advantages.tolist() == pytest.approx([S3 + 0.5 * S2, S3, -2 * S3 - 0.5 * S2], abs=1e-5)


def test_gigpo_gamma(small):
    # gamma = 0 -> R = [0, 10, -0.1]: anchor "A" holds 0 and -0.1 -> still +-1/sqrt(2)
    res = compute_advantages(small, EstimatorConfig(name="gigpo", gamma=0.0, norm_mode="mean_norm"))
    assert res.step.tolist() == pytest.approx([0.05, 0.0, -0.05], abs=1e-6)


def paper_figure_batch():
    """The paper's figure: cluster {1, 2, 3}; rows 1 and 2 took a1, row 3 took a2; row 4 is elsewhere.
    Four one-step trajectories of one prompt group; trajectory 0 wins."""
    rows = [
        (0, 0, 0, 10.0, True, "s", act("a1")),
        (0, 1, 0, 0.0, True, "s'", act("a1")),
        (0, 2, 0, 0.0, True, "s''", act("a2")),
        (0, 3, 0, 0.0, True, "t", act("a1")),
    ]
    hidden = [[1.0, 0.0], [0.999, 0.02], [0.998, -0.03], [0.0, 1.0]]  # first three within eps = 0.05
    return make_batch(rows, hidden)


def test_paper_figure_q_style():
    b = paper_figure_batch()
    res = compute_advantages(b, EstimatorConfig(name="bipace_q", epsilon=0.05))
    c = res.cluster_id.tolist()
    assert c[0] == c[1] == c[2] != c[3]
    v = 10 / 3
    # rows 1, 2: Q(a1) - V = 5 - 10/3; row 3 has no same-key peer -> leave-one-out: 0 - (10 + 0)/2
    assert res.step.tolist() == pytest.approx([5 - v, 5 - v, -5.0, 0.0], abs=1e-5)
    assert res.metrics["group/pace_frac_pace"] == pytest.approx(0.5)
    assert res.metrics["group/pace_frac_fallback"] == pytest.approx(0.25)
    assert res.metrics["group/pace_frac_singleton"] == pytest.approx(0.25)
    assert res.metrics["group/pace_keys_per_cluster"] == pytest.approx(2.0)
    assert res.metrics["group/pace_multikey_cluster_frac"] == pytest.approx(1.0)
    # without the fallback row 3 gets Q(a2) - V
    res = compute_advantages(b, EstimatorConfig(name="bipace_q", epsilon=0.05, pace_fallback="none"))
    assert res.step.tolist() == pytest.approx([5 - v, 5 - v, -v, 0.0], abs=1e-5)


def test_paper_figure_diff_peer():
    b = paper_figure_batch()
    res = compute_advantages(b, EstimatorConfig(name="bipace_v", epsilon=0.05))
    # rows 1, 2: R_i - mean of other-key rows (row 3: 0); row 3: leave-one-out
    assert res.step.tolist() == pytest.approx([10.0, 0.0, -5.0, 0.0], abs=1e-5)
    res = compute_advantages(b, EstimatorConfig(name="bipace_v", epsilon=0.05, pace_fallback="none"))
    assert res.step.tolist() == pytest.approx([10.0, 0.0, -5.0, 0.0], abs=1e-5)  # 0 - mean(10, 0)
    res = compute_advantages(b, EstimatorConfig(name="bipace_v", epsilon=0.05, pace_fallback="single_key"))
    assert res.step.tolist() == pytest.approx([10.0, 0.0, -5.0, 0.0], abs=1e-5)


def test_pace_anchor_by_hand():
    # the paper's figure with its observations made equal where its clusters are: anchor "s" = rows 0, 1, 2
    rows = [(0, 0, 0, 10.0, True, "s", act("a1")), (0, 1, 0, 0.0, True, "s", act("a1")),
            (0, 2, 0, 0.0, True, "s", act("a2")), (0, 3, 0, 0.0, True, "t", act("a1"))]
    b = make_batch(rows)  # no hidden states: the action half needs none
    res = compute_advantages(b, EstimatorConfig(name="pace_anchor"))
    v = 10 / 3
    assert res.step.tolist() == pytest.approx([5 - v, 5 - v, -5.0, 0.0], abs=1e-5)
    assert res.cluster_id.tolist()[:3] == [res.cluster_id[0]] * 3 != [res.cluster_id[3]] * 3
    assert res.metrics["group/pace_frac_pace"] == pytest.approx(0.5)
    # the same observations but the figure's paraphrases: anchors split, every row alone, no step term
    res = compute_advantages(paper_figure_batch(), EstimatorConfig(name="pace_anchor"))
    assert res.step.abs().max() == 0 and res.metrics["group/pace_frac_singleton"] == 1.0
    # equal to BiPACE_Q whose clusters are the anchors (one-hot observations, epsilon 0), with either norm
    for norm in ("none", "cluster_std"):
        a = compute_advantages(b, EstimatorConfig(name="pace_anchor", pace_norm=norm)).advantages
        q = compute_advantages(dataclasses.replace(b, hidden=one_hot_hidden(b)),
                               EstimatorConfig(name="bipace_q", epsilon=0.0, pace_norm=norm)).advantages
        assert torch.allclose(a, q, atol=1e-6)


def test_pace_cluster_std_and_single_key():
    b = paper_figure_batch()
    res = compute_advantages(b, EstimatorConfig(name="bipace_q", epsilon=0.05, pace_norm="cluster_std"))
    std = torch.tensor([10.0, 0.0, 0.0]).std().item()
    v = 10 / 3
    assert res.step.tolist() == pytest.approx([(5 - v) / std, (5 - v) / std, -5.0 / std, 0.0], abs=1e-5)
    # one key in the cluster: 'either' and 'single_key' fall back to leave-one-out, 'unique_key' gives Q - V = 0
    rows = [(0, i, 0, r, True, "s", act("a1")) for i, r in enumerate([10.0, 0.0, 0.0])]
    b1 = make_batch(rows, [[1.0, 0.0]] * 3)
    loo = [10.0, -5.0, -5.0]
    for fb, want in (("either", loo), ("single_key", loo), ("unique_key", [0, 0, 0]), ("none", [0, 0, 0])):
        for name in ("bipace_q", "bipace_v"):
            res = compute_advantages(b1, EstimatorConfig(name=name, epsilon=0.05, pace_fallback=fb))
            assert res.step.tolist() == pytest.approx(want, abs=1e-5), (name, fb)


def test_bigpo_by_hand():
    rows = [
        (0, 0, 0, 10.0, True, "x", act("a")),
        (0, 1, 0, 0.0, True, "y", act("b")),
        (0, 2, 0, 0.0, True, "z", act("c")),
    ]
    b = make_batch(rows, [[1.0, 0.0], [0.99, 0.05], [0.0, 1.0]])
    res = compute_advantages(b, EstimatorConfig(name="bigpo", epsilon=0.05))
    assert res.step.tolist() == pytest.approx([S2, -S2, 0.0], abs=1e-5)
    res = compute_advantages(b, EstimatorConfig(name="bigpo", epsilon=0.0))
    assert res.step.tolist() == [0.0, 0.0, 0.0]  # eps = 0: distinct vectors never merge


def hgpo_batch():
    obs = {0: ["A", "C", "B"], 1: ["D", "C", "B"], 2: ["E", "F", "B"]}
    rows = []
    for tr, seq in obs.items():
        for st, o in enumerate(seq):
            rows.append((0, tr, st, 10.0 if (tr == 0 and st == 2) else 0.0, True, o, act("x")))
    return make_batch(rows)


def test_hgpo_by_hand():
    b = hgpo_batch()
    res = compute_advantages(b, EstimatorConfig(name="hgpo"))
    got = {(int(t), int(s)): a for t, s, a in zip(b.traj_id, b.step, res.advantages.tolist())}
    a0 = [math.sqrt(2), -S2, -S2]  # level 0 at step 2: {10, 0, 0}, biased std
    # level 1 at step 2: (C, B) pairs trajectories 0 and 1 -> +-1; level 2: all singletons (skipped);
    # weights (k+2)^alpha (HGPO's code counts observations: level k = history length k+1, weight its length + 1)
    assert got[(0, 2)] == pytest.approx((2 * a0[0] + 3 * 1.0) / 5, abs=1e-5)
    assert got[(1, 2)] == pytest.approx((2 * a0[1] + 3 * -1.0) / 5, abs=1e-5)
    assert got[(2, 2)] == pytest.approx(a0[2], abs=1e-5)  # only level 0 kept
    # step 1: level 0 = "C" pairs {9.5, 0} -> +-1; (A,C) vs (D,C) differ at level 1
    assert got[(0, 1)] == pytest.approx(1.0, abs=1e-5)
    assert got[(1, 1)] == pytest.approx(-1.0, abs=1e-5)
    assert got[(2, 1)] == 0.0
    assert [got[(t, 0)] for t in range(3)] == [0.0, 0.0, 0.0]  # distinct first observations
    assert res.episode.abs().max() == 0  # HGPO has no episode term
    # alpha = 0: plain average of the kept levels
    res = compute_advantages(b, EstimatorConfig(name="hgpo", hgpo_alpha=0.0))
    got = {(int(t), int(s)): a for t, s, a in zip(b.traj_id, b.step, res.advantages.tolist())}
    assert got[(0, 2)] == pytest.approx((a0[0] + 1.0) / 2, abs=1e-5)
    # levels = 0 is GiGPO's step term with the biased std
    res = compute_advantages(b, EstimatorConfig(name="hgpo", hgpo_levels=0))
    got = {(int(t), int(s)): a for t, s, a in zip(b.traj_id, b.step, res.advantages.tolist())}
    assert got[(1, 2)] == pytest.approx(a0[1], abs=1e-5)
    # the start_marker rule weights (k+1)^alpha
    res = compute_advantages(b, EstimatorConfig(name="hgpo", hgpo_rule="start_marker"))
    got = {(int(t), int(s)): a for t, s, a in zip(b.traj_id, b.step, res.advantages.tolist())}
    assert got[(0, 2)] == pytest.approx((1 * a0[0] + 2 * 1.0) / 3, abs=1e-5)
    assert got[(1, 2)] == pytest.approx((1 * a0[1] + 2 * -1.0) / 3, abs=1e-5)


def test_hgpo_levels_before_step_0():
    """HGPO's code forms level k only at steps t >= k; the start_marker rule also groups rows at t < k with the rows
    at the same step whose observations since the start are equal (here an extra, same-step baseline)."""
    # mean_norm, gamma 0, alpha 0 (a plain average of the kept levels); rewards on the B rows only
    b = hgpo_prestart_batch()
    cfg = dict(name="hgpo", norm_mode="mean_norm", gamma=0.0, hgpo_alpha=0.0)
    # row (0, 1): level 0 = the three B rows (mean 10/3) and level 1 = the three (A, B) rows: 4 - 10/3 each;
    # level 2: none (step 1 < 2) under verl_agent; (start, A, B) = trajectories 0 and 1 at step 1 (mean 2) under
    # start_marker
    va = compute_advantages(b, EstimatorConfig(**cfg)).advantages.tolist()
    sm = compute_advantages(b, EstimatorConfig(**cfg, hgpo_rule="start_marker")).advantages.tolist()
    assert va[1] == pytest.approx(2 / 3, abs=1e-6)
    assert sm[1] == pytest.approx((2 / 3 + 2 / 3 + 2.0) / 3, abs=1e-6)
    # row (2, 2) reaches back to step 0 at level 2, alone there: both rules average levels 0 and 1 only
    assert va[6] == pytest.approx(6 - 10 / 3, abs=1e-6) and sm[6] == pytest.approx(6 - 10 / 3, abs=1e-6)
    for got, rule in ((va, "verl_agent"), (sm, "start_marker")):
        ref, _, _ = reference_advantages(b, EstimatorConfig(**cfg, hgpo_rule=rule))
        assert got == pytest.approx(ref, abs=1e-6)


def test_rloo_by_hand():
    b = hgpo_batch()
    res = compute_advantages(b, EstimatorConfig(name="rloo"))
    want = {0: 10.0 - 0.0, 1: 0.0 - 5.0, 2: 0.0 - 5.0}
    assert res.advantages.tolist() == pytest.approx([want[int(t)] for t in b.traj_id], abs=1e-6)
    # an invalid row pays the penalty on its own row only
    rows = [(0, 0, 0, 0.0, False, "A", "junk"), (0, 0, 1, 10.0, True, "B", act("x")),
            (0, 1, 0, 0.0, True, "A", act("y"))]
    res = compute_advantages(make_batch(rows), EstimatorConfig(name="rloo"))
    assert res.advantages.tolist() == pytest.approx([10 - 0.1, 10.0, -10.0], abs=1e-6)


def test_singleton_group_episode_rule():
    # a prompt group with one row: GRPO uses mean 0, std 1 (A = S); step terms are 0
    b = make_batch([(0, 0, 0, 10.0, True, "A", act("x"))])
    for name in ("grpo", "gigpo"):
        res = compute_advantages(b, EstimatorConfig(name=name))
        assert res.advantages.tolist() == pytest.approx([10.0])


def test_every_estimator_has_a_docstring_with_formula():
    for name, spec in ESTIMATORS.items():
        assert "A" in spec.doc and len(spec.doc) > 80, name


def test_diagnostics_by_hand():
    b = paper_figure_batch()
    b.state_key = ["s", "s", "u", "t"]  # rows 0, 1 truly the same state; row 2 differs
    res = compute_advantages(b, EstimatorConfig(name="grpo", epsilon=0.05))  # diagnostics whatever the estimator
    m = res.metrics
    assert m["group/singleton_rate_anchor"] == 1.0  # four distinct observation strings
    assert m["group/singleton_rate_cluster"] == 0.25
    assert m["group/num_clusters"] == 2 and m["group/cluster_size_mean"] == 2.0
    assert m["group/num_anchor_groups"] == 4
    # cluster {0,1,2}: 3 pairs, 1 truly same -> precision 1/3; the one same-state pair is clustered -> recall 1
    assert m["group/purity_precision_cluster"] == pytest.approx(1 / 3)
    assert m["group/purity_recall_cluster"] == 1.0
    assert "group/purity_precision_anchor" not in m  # no same-anchor pairs: undefined, not reported
    assert m["group/pace_frac_fallback"] == pytest.approx(0.25)
    assert m["adv/step_zero_frac"] == 1.0 and m["adv/total_zero_frac"] == 0.0
    assert m["group/action_parse_rate"] == 1.0
    # without hidden states only the anchor figures are reported
    b.hidden = None
    m = compute_advantages(b, EstimatorConfig(name="grpo")).metrics
    assert "group/singleton_rate_cluster" not in m and "group/singleton_rate_anchor" in m
    # diagnostics can be switched off
    assert compute_advantages(b, EstimatorConfig(name="grpo"), diagnostics=False).metrics == {}
