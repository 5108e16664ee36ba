"""epsilon: auto (estimators.calibrate.choose_epsilon), state centring, and exact zeros from group_normalize."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from estimators import EstimatorConfig, compute_advantages
from estimators.calibrate import AUTO_GRID, FALLBACK_SINGLETON_RATE, choose_epsilon, scan_epsilon
from estimators.cluster import center_by_group, greedy_cosine_clusters
from estimators.diagnostics import pair_purity
from estimators.ops import dense_ids, factorize, group_normalize
from estimators.reference import reference_clusters
from estimators.synthetic import synthetic_batch


def rule(criterion: str, **settings) -> EstimatorConfig:
    """An estimator config whose ``epsilon: auto`` rule is ``criterion`` (the other settings: ``settings``)."""
    return EstimatorConfig(epsilon_criterion=criterion, **settings)


def anisotropic(batch, spread: float = 0.05, noise: float = 2e-3, seed: int = 1):
    """The batch's states as a small model's: one shared direction of norm 1 plus a state direction of norm
    ``spread`` plus noise, so that every pair of rows lies within cosine distance ~spread^2 of each other."""
    gen = torch.Generator().manual_seed(seed)
    d = batch.hidden.shape[1]
    common = torch.randn(d, generator=gen)
    states = dense_ids(batch.group_id, factorize([repr(s) for s in batch.state_key]))
    protos = torch.randn(int(states.max()) + 1, d, generator=gen)
    protos = spread * protos / protos.norm(dim=1, keepdim=True)
    h = common / common.norm() + protos[states] + noise * torch.randn(len(batch), d, generator=gen)
    return dataclasses.replace(batch, hidden=h)


def true_states(batch):
    return dense_ids(batch.group_id, factorize([repr(s) for s in batch.state_key]))


def pairwise_distances(batch):
    """Cosine distances within prompt groups: (max over same-state pairs, min over different-state pairs)."""
    phi = batch.hidden.double() / batch.hidden.double().norm(dim=1, keepdim=True)
    d = 1 - phi @ phi.T
    same_group = batch.group_id[:, None] == batch.group_id[None, :]
    st = true_states(batch)
    same_state = st[:, None] == st[None, :]
    off = ~torch.eye(len(batch), dtype=torch.bool)
    return float(d[same_group & same_state & off].max()), float(d[same_group & ~same_state].min())


@pytest.fixture(scope="module")
def known():
    """16 groups x 8 trajectories, exact observations = the true state (one surface form), small-model geometry."""
    return anisotropic(synthetic_batch(groups=16, group_size=8, max_steps=8, hidden_size=64, states_per_group=5,
                                       obs_variants=1, seed=3))


def test_auto_picks_the_epsilon_that_recovers_known_clusters(known):
    within, between = pairwise_distances(known)
    assert within < between < 0.05  # the paper's 0.05 would merge every state of a group
    cal = choose_epsilon(known, rule("anchor_recall", epsilon_target=0.9))
    assert cal.rule == "anchor_recall" and within / 2 <= cal.epsilon < between
    # the expected epsilon, found independently: the first grid value at which the one-row-at-a-time reference
    # clustering keeps >= 90% of the same-observation pairs together
    anchors = dense_ids(known.group_id, factorize(list(known.anchor_obs)))
    expected = None
    for eps in sorted(AUTO_GRID):
        labels = torch.tensor(reference_clusters(known, EstimatorConfig(name="bigpo", epsilon=eps)))
        pur = pair_purity(labels, anchors)  # None: no two rows share a cluster
        if pur is not None and pur[1] >= 0.9:
            expected = eps
            break
    assert cal.epsilon == expected
    clusters = greedy_cosine_clusters(known.hidden, known.group_id, known.traj_id, known.step, cal.epsilon).cluster_id
    precision, recall = pair_purity(clusters, true_states(known))
    assert precision == 1.0 and recall >= 0.9
    at_paper = greedy_cosine_clusters(known.hidden, known.group_id, known.traj_id, known.step, 0.05)
    assert at_paper.sizes.numel() == 16  # one cluster per prompt group: the collapse the calibration avoids
    # the scan behind it is part of the record
    assert cal.scan[0]["epsilon"] is None and [r["epsilon"] for r in cal.scan[1:]] == sorted(AUTO_GRID)
    assert cal.to_dict()["epsilon"] == cal.epsilon


def test_anchor_f1_agrees_best_with_the_anchors_and_stays_precise_where_they_alias(known):
    """anchor_f1 picks the grid's epsilon (smallest on ties) with the best pair F1 against the exact anchors,
    recomputed here with pair_purity. Where two true states share one observation (ALFWorld's "Nothing
    happens."), anchor_recall must merge different states to keep 90% of the anchors' pairs; anchor_f1 does not."""

    def f1_against(labels, target):
        pur = pair_purity(labels, target)
        return 0.0 if pur is None or sum(pur) == 0 else 2 * pur[0] * pur[1] / (pur[0] + pur[1])

    st = true_states(known)
    aliased = dataclasses.replace(known, anchor_obs=[f"obs {int(s) // 2}" for s in st])  # states 2k, 2k+1 alike
    for batch in (known, aliased):
        anchors = dense_ids(batch.group_id, factorize(list(batch.anchor_obs)))
        scores = []
        for eps in sorted(AUTO_GRID):
            cl = greedy_cosine_clusters(batch.hidden, batch.group_id, batch.traj_id, batch.step, eps).cluster_id
            scores.append((f1_against(cl, anchors), -eps))
        expected = -max(scores)[1]
        cal = choose_epsilon(batch, rule("anchor_f1"))
        assert cal.rule == "anchor_f1" and cal.epsilon == pytest.approx(expected)
        assert "agree best with the exact anchors" in cal.reason

    def truth_precision(cal):
        cl = greedy_cosine_clusters(aliased.hidden, aliased.group_id, aliased.traj_id, aliased.step, cal.epsilon)
        return pair_purity(cl.cluster_id, st)[0]

    assert pair_purity(dense_ids(aliased.group_id, factorize(list(aliased.anchor_obs))), st)[0] < 0.7
    # measured: 0.92 against 0.25 (anchor_recall's epsilon merges most of each group)
    assert truth_precision(choose_epsilon(aliased, rule("anchor_f1"))) > 0.9
    assert truth_precision(choose_epsilon(aliased, rule("anchor_recall"))) < 0.5


def test_singleton_match_and_the_fallback_without_repeated_observations(known):
    cal = choose_epsilon(known, rule("singleton_match"))
    anchor_rate = cal.scan[0]["singleton_rate"]
    hit = next(r for r in cal.scan[1:] if r["epsilon"] == cal.epsilon)
    assert cal.rule == "singleton_match" and hit["singleton_rate"] <= anchor_rate
    assert all(r["singleton_rate"] > anchor_rate for r in cal.scan[1:] if r["epsilon"] < cal.epsilon)
    unique = dataclasses.replace(known, anchor_obs=[f"obs {i}" for i in range(len(known))])  # no two rows alike
    for crit in ("anchor_recall", "anchor_f1", "singleton_match"):
        fb = choose_epsilon(unique, rule(crit))
        assert fb.rule == "fallback_singleton_rate" and "share an observation" in fb.reason
        row = next(r for r in fb.scan[1:] if r["epsilon"] == fb.epsilon)
        assert row["singleton_rate"] <= FALLBACK_SINGLETON_RATE
    with pytest.raises(ValueError, match="epsilon_criterion"):  # refused where the config is built
        rule("purity")


def test_state_f1_is_the_oracle_and_needs_true_states(known):
    """The smallest epsilon of the grid whose clusters agree best with the true state, computed here from clusterings
    of our own; refused without state_key."""
    cal = choose_epsilon(known, rule("state_f1"))
    st = true_states(known)

    def f1(eps):
        cl = greedy_cosine_clusters(known.hidden, known.group_id, known.traj_id, known.step, eps)
        pr = pair_purity(cl.cluster_id, st)
        if pr is None:  # no same-cluster pair (all singletons) or no same-state pair: no F1, as in the scan
            return None
        p, r = pr
        return 2 * p * r / (p + r) if p + r > 0 else None

    scores = {e: v for e in AUTO_GRID if (v := f1(e)) is not None}
    best = max(scores.values())
    assert cal.rule == "state_f1" and cal.epsilon == min(e for e, v in scores.items() if v >= best - 1e-12)
    assert best > 0.99  # the known geometry separates the states
    with pytest.raises(ValueError, match="state_key"):
        choose_epsilon(dataclasses.replace(known, state_key=None), rule("state_f1"))


def test_centring_makes_the_epsilon_scale_free(known):
    """Centred by the prompt group's mean, the shared direction is gone: the same states are recovered at an
    epsilon thousands of times larger, near the paper's scale."""
    plain = choose_epsilon(known, rule("anchor_recall"))
    centred = choose_epsilon(known, rule("anchor_recall", center_states=True))
    assert centred.center and centred.epsilon > 100 * plain.epsilon
    h = center_by_group(known.hidden, known.group_id)
    clusters = greedy_cosine_clusters(h, known.group_id, known.traj_id, known.step, centred.epsilon).cluster_id
    assert pair_purity(clusters, true_states(known))[0] == 1.0


def test_centred_clusters_equal_the_reference():
    b = synthetic_batch(groups=4, group_size=6, max_steps=6, hidden_size=16, noise=0.3, seed=5)
    for eps in (0.05, 0.3, 0.8):
        cfg = EstimatorConfig(name="bipace_q", epsilon=eps, center_states=True)
        fast = compute_advantages(b, cfg).cluster_id
        ref = torch.tensor(reference_clusters(b, cfg))
        assert torch.equal(dense_ids(fast), dense_ids(ref))
    # a group of identical states: centred, every row sits at the mean and they still form one cluster
    same = dataclasses.replace(b, hidden=torch.ones(len(b), 16))
    cl = greedy_cosine_clusters(center_by_group(same.hidden, same.group_id), same.group_id, same.traj_id, same.step,
                                0.0)
    assert cl.sizes.numel() == 4


def test_auto_must_be_resolved_before_clustering(known):
    cfg = EstimatorConfig(name="bipace_q", epsilon="auto")
    assert cfg.epsilon_is_auto
    with pytest.raises(ValueError, match="resolved to a number"):
        compute_advantages(known, cfg)
    for bad, needle in [("0.x", "number in \\[0, 2\\] or 'auto'"), (3.0, "must lie in \\[0, 2\\]")]:
        with pytest.raises(ValueError, match=needle):
            EstimatorConfig(epsilon=bad)
    with pytest.raises(ValueError, match="epsilon_target"):
        EstimatorConfig(epsilon_target=0.0)


def test_scan_reports_anchor_recall_and_state_purity(known):
    rows = scan_epsilon(known, [0.0, 1e-3, 1.0])
    assert rows[0]["grouping"] == "exact anchor obs" and rows[0]["anchor_recall"] == 1.0
    assert rows[-1]["anchor_recall"] == 1.0 and rows[-1]["groups"] == 16  # epsilon 1: one cluster per group
    assert {"precision", "recall", "f1"} <= set(rows[1])


def test_equal_values_normalise_to_exact_zeros():
    """The summed mean of equal values can be off by an ulp; (x - mean) / (std + 1e-6) then gave ~1e-11, and the
    zero-advantage share undercounted. Equal values now give exactly 0 in both modes."""
    x = torch.full((16,), 0.1, dtype=torch.float64)
    gid = torch.zeros(16, dtype=torch.long)
    summed_mean = torch.zeros(1, dtype=torch.float64).index_add_(0, gid, x) / 16
    assert float((x - summed_mean).abs().max()) > 0  # the rounding that used to leak through
    for mode in ("mean_std_norm", "mean_norm"):
        assert torch.equal(group_normalize(x, gid, mode), torch.zeros(16, dtype=torch.float64))
    mixed = torch.cat([x, torch.tensor([0.0, 1.0], dtype=torch.float64)])
    gid2 = torch.cat([gid, torch.ones(2, dtype=torch.long)])
    out = group_normalize(mixed, gid2, "mean_std_norm")
    assert torch.equal(out[:16], torch.zeros(16, dtype=torch.float64)) and out[16] < 0 < out[17]
    # a batch where every trajectory of a group scores the same: GRPO's advantages are all zero, and counted so
    b = synthetic_batch(groups=2, group_size=8, max_steps=4, seed=1)
    first = (b.step == 0).to(b.reward.dtype)  # every trajectory scores 0.1, once
    b = dataclasses.replace(b, reward=0.1 * first, valid=torch.ones_like(b.valid))
    res = compute_advantages(b, EstimatorConfig(name="grpo"))
    assert res.metrics["adv/total_zero_frac"] == 1.0


def _valued(batch, noise: float = 0.0, seed: int = 5):
    """``batch`` with every row valid and rewards r_t = V(s_t) - gamma V(s_t+1) (V of a random value per true state,
    0 after the last step), so that each row's step return is V(s_t) (+ noise on the rewards)."""
    gen = torch.Generator().manual_seed(seed)
    st = true_states(batch)
    value = torch.rand(int(st.max()) + 1, generator=gen, dtype=torch.float64)
    traj = dense_ids(batch.group_id, batch.traj_id)
    nxt = torch.zeros(len(batch), dtype=torch.float64)
    for i in range(len(batch)):  # the row one step later in the same trajectory, if any
        later = ((traj == traj[i]) & (batch.step == batch.step[i] + 1)).nonzero().flatten()
        nxt[i] = value[st[later[0]]] if len(later) else 0.0
    r = value[st] - 0.95 * nxt + noise * torch.randn(len(batch), generator=gen, dtype=torch.float64)
    return dataclasses.replace(batch, reward=r.to(batch.reward.dtype), valid=torch.ones_like(batch.valid))


def _loo_by_loops(returns, gid, group, traj) -> float:
    """return_loo written as loops: each row predicted by the other trajectories of its group, else of its prompt
    group; the ratio of the two squared errors over rows whose prompt group holds another trajectory."""
    err_c = err_g = 0.0
    n = 0
    for i in range(len(returns)):
        grp = [j for j in range(len(returns)) if group[j] == group[i] and traj[j] != traj[i]]
        if not grp:
            continue
        cl = [j for j in grp if gid[j] == gid[i]]
        pg = sum(float(returns[j]) for j in grp) / len(grp)
        pc = sum(float(returns[j]) for j in cl) / len(cl) if cl else pg
        err_c += (float(returns[i]) - pc) ** 2
        err_g += (float(returns[i]) - pg) ** 2
        n += 1
    return err_c / err_g


def test_return_loo_equals_a_loop_reference_and_is_scale_free():
    from estimators.calibrate import return_loo

    b = synthetic_batch(groups=3, group_size=4, max_steps=5, seed=11)
    gen = torch.Generator().manual_seed(0)
    group = dense_ids(b.group_id)
    traj = dense_ids(b.group_id, b.traj_id)
    returns = torch.randn(len(b), generator=gen, dtype=torch.float64)
    gid = dense_ids(b.group_id, torch.randint(0, 3, (len(b),), generator=gen))  # a random grouping
    got = return_loo(returns, gid, group, traj)
    assert got == pytest.approx(_loo_by_loops(returns, gid, group, traj), rel=1e-12)
    assert return_loo(7.5 * returns + 2.0, gid, group, traj) == pytest.approx(got, rel=1e-9)
    assert return_loo(returns, group.clone(), group, traj) == pytest.approx(1.0)  # the prompt group itself
    one_traj = torch.zeros_like(traj)  # every row of one trajectory: nothing to predict from
    assert math.isnan(return_loo(returns, gid, torch.zeros_like(group), one_traj))


def test_return_loo_recovers_states_whose_values_differ_without_reading_the_anchors(known):
    b = _valued(known, noise=0.01)
    within, between = pairwise_distances(b)
    cal = choose_epsilon(b, rule("return_loo"))
    assert cal.rule == "return_loo" and within / 2 <= cal.epsilon < between, cal.reason
    assert cal.scan[0]["return_loo"] < 1  # the anchors (here: the true states) predict returns too
    # the anchors do not enter: the same epsilon with every observation made unique, or all made equal
    for obs in ([f"o{i}" for i in range(len(b))], ["same"] * len(b)):
        assert choose_epsilon(dataclasses.replace(b, anchor_obs=obs), rule("return_loo")).epsilon == cal.epsilon
    # returns that do not depend on the state leave nothing to predict: no clustering beats the prompt group by much
    flat = dataclasses.replace(b, reward=torch.zeros_like(b.reward))
    assert all(r["return_loo"] != r["return_loo"] or r["return_loo"] == pytest.approx(1.0)
               for r in scan_epsilon(flat, AUTO_GRID)[1:])


def test_return_loo_falls_back_without_two_trajectories_in_a_prompt_group():
    b = synthetic_batch(groups=4, group_size=1, max_steps=6, seed=2)
    cal = choose_epsilon(b, rule("return_loo"))
    assert cal.rule == "fallback_singleton_rate" and "two trajectories" in cal.reason
