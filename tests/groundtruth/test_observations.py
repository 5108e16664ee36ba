"""Observation text: one state has many strings (surface variation), states alias (hidden facts)."""
from __future__ import annotations

import random
from collections import defaultdict

import numpy as np
import pytest

from envs.finite.families import make_family, n_hidden_facts
from envs.finite.mdp import build_mdp
from envs.finite.text import SurfaceConfig, surface_preset
from estimators.ops import action_tag
from groundtruth.policy import expert_logits, softmax
from groundtruth.sampling import render_observations, response_texts, sample_rollout, to_step_batch

KW = {"craft": dict(n_intermediates=2, n_base_per=2, n_distractors=1, n_junk_recipes=1, n_tasks=2),
      "rooms": dict(n_locations=5, n_objects=2, n_tasks=3)}


def _incoming(mdp):
    """Every (event, state) pair an observation can show, with the task it belongs to (rooms) or 0."""
    pairs = {(int(e), int(s)) for e, s in zip(mdp.start_events, mdp.start_states)}
    S, A, K = mdp.prob.shape
    for s in range(S):
        for a in range(A):
            for k in range(K):
                if mdp.prob[s, a, k] > 0 and not mdp.done[s, a, k]:
                    pairs.add((int(mdp.event[s, a, k]), int(mdp.next_state[s, a, k])))
    return pairs


def _task(mdp, s):
    st = mdp.states[s]
    return st[0] if isinstance(st, tuple) else 0


def _string_to_states(family, alias):
    mdp = build_mdp(make_family(family, surface_preset("none"), alias=alias, **KW[family]), horizon=10)
    rng = random.Random(0)
    m = defaultdict(set)
    for e, s in _incoming(mdp):
        m[(_task(mdp, s), mdp.family.render(mdp.events[e], mdp.states[s], 1, rng))].add(s)
    return mdp, m


@pytest.mark.parametrize("family", ["craft", "rooms"])
def test_no_aliasing_at_level_zero_and_aliasing_grows(family):
    _, m0 = _string_to_states(family, 0.0)
    assert max(len(v) for v in m0.values()) == 1, "alias=0 must show every state fact"
    sizes = []
    for alias in (0.0, 0.5, 1.0):
        _, m = _string_to_states(family, alias)
        sizes.append(len(m))
    assert sizes[0] > sizes[1] > sizes[2], f"distinct strings must fall as facts are hidden: {sizes}"
    _, m1 = _string_to_states(family, 1.0)
    assert max(len(v) for v in m1.values()) >= 3, "alias=1 must merge several states into one string"


@pytest.mark.parametrize("family", ["craft", "rooms"])
def test_surface_variation_gives_many_strings_per_state(family):
    fam_none = make_family(family, surface_preset("none"), alias=0.0, **KW[family])
    fam_high = make_family(family, surface_preset("high"), alias=0.0, **KW[family])
    mdp = build_mdp(fam_high, horizon=10)
    e, s = sorted(_incoming(mdp))[5]
    rng = random.Random(1)
    plain = {fam_none.render(mdp.events[e], mdp.states[s], 3, rng) for _ in range(50)}
    varied = {fam_high.render(mdp.events[e], mdp.states[s], 3, rng) for _ in range(200)}
    assert len(plain) == 1
    assert len(varied) >= 10
    # the step counter alone separates otherwise equal strings
    counter_only = make_family(family, SurfaceConfig(paraphrases=1, shuffle=False, p_distractor=0.0, step_counter=True),
                               alias=0.0, **KW[family])
    a = counter_only.render(mdp.events[e], mdp.states[s], 3, rng)
    b = counter_only.render(mdp.events[e], mdp.states[s], 4, rng)
    assert a != b and a.split("3")[0] == b.split("4")[0]


def test_hidden_fact_count():
    assert [n_hidden_facts(a, 5) for a in (0.0, 0.1, 0.5, 0.9, 1.0)] == [0, 1, 3, 5, 5]
    with pytest.raises(ValueError, match="alias"):
        make_family("craft", surface_preset("none"), alias=1.5)


@pytest.mark.parametrize("family", ["craft", "rooms"])
def test_sampled_batch_is_a_valid_step_batch(family):
    mdp = build_mdp(make_family(family, surface_preset("high"), alias=0.5, **KW[family]), horizon=15)
    rng = np.random.default_rng(0)
    pi = softmax(expert_logits(mdp, 1.0, 1.0, rng))
    ro = sample_rollout(mdp, pi, [0, 1], 4, rng)
    obs = render_observations(mdp, ro, rng)
    batch = to_step_batch(mdp, ro, obs)
    assert len(batch) == len(ro) and batch.num_groups == 2
    # rows are in (group, traj, step) order and every trajectory starts at its task's start state
    first = ro.step == 0
    assert first.sum() == 8
    np.testing.assert_array_equal(ro.state[first], mdp.start_states[ro.tasks[ro.group[first]]])
    # a trajectory ends when won or at the horizon
    for g in range(2):
        for j in range(4):
            rows = (ro.group == g) & (ro.traj == j)
            assert ro.done[rows].sum() <= 1 and (ro.done[rows][-1] or rows.sum() == mdp.horizon)
    # the PACE key of every well-formed row is the executed action; malformed rows are invalid
    keys = [action_tag(r) for r in response_texts(mdp, ro.action)]
    for k, a, v in zip(keys, ro.action, ro.valid):
        assert (k == mdp.actions[a]) if v else (k == "<invalid>" and mdp.actions[a] == "<malformed>")
