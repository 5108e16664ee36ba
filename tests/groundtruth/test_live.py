"""The truth of a real rollout batch on a finite world, and every estimator scored on it (groundtruth.live)."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from agents.engines import SamplingConfig
from agents.rollout import Agent, collect, prompt_config_for
from envs.pool import EnvPool, Task
from groundtruth.live import (
    FORMULA_FIELDS,
    TruthProbe,
    advantage_metrics,
    arm_configs,
    batch_truth,
    row_actions,
    row_contexts,
    score_estimators,
)
from groundtruth.onpolicy import row_distributions
from tests.agents.rollout_helpers import ExpertEngine

ROOMS = {"surface": "high", "alias": 0.5, "n_locations": 4, "n_objects": 1, "n_tasks": 2, "max_steps": 8}


@pytest.fixture(scope="module")
def rollout(tiny_lm):
    """2 tasks x 4 copies on FiniteRooms-v0; the expert plays even slots, the odd ones answer without tags."""
    _, tok = tiny_lm
    import gymnasium as gym

    mdp = gym.make("FiniteRooms-v0", **ROOMS).unwrapped.mdp
    with EnvPool("FiniteRooms-v0", num_envs=8, mode="inline", env_kwargs=ROOMS) as pool:
        engine = ExpertEngine(tok, pool, play=lambda slot: slot % 2 == 0)
        batch, _ = collect(Agent(pool=pool, engine=engine, tokenizer=tok,
                                 prompt_config=prompt_config_for(tok, 2048), max_prompt_tokens=2048),
                           [Task("train", 0, 1), Task("train", 1, 2)], group_size=4,
                           sampling=SamplingConfig(temperature=1.0, max_tokens=12), seed=0)
    return mdp, batch


def test_rows_map_to_the_mdp(rollout, tiny_lm):
    mdp, batch = rollout
    _, tok = tiny_lm
    act = row_actions(mdp, batch.action, batch.valid.tolist())
    m = mdp.malformed_action
    valid = batch.valid.numpy()
    assert valid.any() and (~valid).any()
    assert (act[~valid] == m).all()
    assert [mdp.actions[a] for a in act[valid]] == [a for a, v in zip(batch.action, valid) if v]
    ctx = row_contexts(tok, batch.prompt_ids, batch.response_text)
    for c, p, text in zip(ctx, batch.prompt_ids, batch.response_text):
        assert torch.equal(c[: p.numel()], p)
        if "<action>" in text:  # the thought is kept, the action cut off
            assert tok.decode(c[p.numel():]).strip() == text[: text.index("<action>")].strip()


def test_batch_truth_is_the_dp_of_the_scored_policy(rollout, tiny_lm):
    """The returned advantages are those of DP on the policy that the rows' scored distributions define, and the
    distribution of every row is a proper one over the MDP's actions."""
    from groundtruth.policy import evaluate_policy

    mdp, batch = rollout
    model, tok = tiny_lm
    bt = batch_truth(mdp, batch, model, tok, pad_id=tok.pad_token_id or 0, max_rows=5)
    n = len(batch)
    assert bt.advantages.shape == (n,) and np.isfinite(bt.advantages).all()
    v = evaluate_policy(mdp, bt.truth.pi)
    np.testing.assert_allclose(bt.advantages, v.A[bt.step, bt.state, bt.action], atol=1e-12)
    assert bt.truth.visited[bt.step, bt.state].all()
    assert bt.truth.visited.sum() == len(set(zip(bt.step.tolist(), bt.state.tolist())))
    # a random tiny model spreads mass over the whole vocabulary: most of it is "malformed"
    pi_rows = bt.truth.pi[bt.step, bt.state]
    np.testing.assert_allclose(pi_rows.sum(1), 1.0)
    assert (pi_rows[:, mdp.malformed_action] > 0.5).all()
    # every estimator is scored on the same batch; the metric names are fixed
    from estimators.config import EstimatorConfig

    step_batch = batch.to_step_batch(hidden=torch.randn(n, 16, generator=torch.Generator().manual_seed(0)))
    m = score_estimators(step_batch, bt, EstimatorConfig(name="gigpo"))
    names = {k.split("/")[1] for k in m if k.count("/") == 2 and "@" not in k}
    assert names == {"grpo", "gigpo", "bigpo", "bipace_q", "bipace_v", "pace_anchor", "hgpo", "rloo"}
    # HGPO under its other rule too, on this batch: the numbers of a run made with that rule
    assert {k.split("/")[1] for k in m if "@" in k.split("/")[1]} == {"hgpo@start_marker"}
    for rule, other in (("verl_agent", "start_marker"), ("start_marker", "verl_agent")):
        by_rule = score_estimators(step_batch, bt, EstimatorConfig(name="gigpo", hgpo_rule=rule), names=["hgpo"],
                                   references={"ref": -bt.advantages})
        direct = score_estimators(step_batch, bt, EstimatorConfig(name="gigpo", hgpo_rule=other), names=["hgpo"],
                                  references={"ref": -bt.advantages})
        assert not any(k.startswith(f"groundtruth/hgpo@{rule}/") for k in by_rule)
        for k in ("pearson", "spearman", "pearson_step", "sign_agree"):
            assert by_rule[f"groundtruth/hgpo@{other}/{k}"] == direct[f"groundtruth/hgpo/{k}"]
        assert by_rule[f"groundtruth/ref/hgpo@{other}/pearson"] == direct["groundtruth/ref/hgpo/pearson"]
        assert by_rule[f"groundtruth/ref/hgpo@{other}/pearson"] == pytest.approx(
            -by_rule[f"groundtruth/hgpo@{other}/pearson"], abs=1e-12)
    assert all(math.isfinite(m[f"groundtruth/{e}/zero_signal"]) for e in names)
    assert all(math.isfinite(m[f"groundtruth/{e}/pearson_step"]) for e in names)
    assert m["groundtruth/grpo/zero_step"] == 1.0  # GRPO has no step term
    assert math.isnan(m["groundtruth/grpo/singleton"]) or 0 <= m["groundtruth/grpo/singleton"] <= 1
    assert 0 <= m["groundtruth/gigpo/pair_precision"] <= 1
    # the hidden-state estimators at extra epsilons: the same numbers as a run at that epsilon
    from groundtruth.live import oracle_epsilon

    m2 = score_estimators(step_batch, bt, EstimatorConfig(name="gigpo", epsilon=0.05), names=["bipace_q", "grpo"],
                          extra_epsilons={"e0.3": 0.3})
    m3 = score_estimators(step_batch, bt, EstimatorConfig(name="gigpo", epsilon=0.3), names=["bipace_q"])
    assert m2["groundtruth/bipace_q@e0.3/pearson"] == m3["groundtruth/bipace_q/pearson"]
    assert m2["groundtruth/bipace_q/pearson"] == m["groundtruth/bipace_q/pearson"]  # the default epsilon is 0.05
    assert not any(k.startswith("groundtruth/grpo@") for k in m2)  # no hidden states, no epsilon
    eps = oracle_epsilon(step_batch, EstimatorConfig(name="bipace_q"))
    from estimators.calibrate import AUTO_GRID

    assert eps in AUTO_GRID
    assert oracle_epsilon(dataclasses.replace(step_batch, state_key=None), EstimatorConfig(name="bipace_q")) is None


def test_hgpo_is_scored_under_both_rules_on_one_batch():
    """Rows whose levels reach before step 0, where the two HGPO rules differ (``test_hgpo_levels_before_step_0``):
    with the truth set to one rule's advantages, only that rule's scoring reads 1, whichever rule the run has."""
    from estimators import compute_advantages
    from estimators.config import EstimatorConfig
    from groundtruth.live import BatchTruth
    from groundtruth.onpolicy import OnPolicyTruth
    from tests.estimators.helpers import hgpo_prestart_batch

    b = hgpo_prestart_batch()
    cfg = dict(name="gigpo", norm_mode="mean_norm", gamma=0.0, hgpo_alpha=0.0)
    state = np.array([{"A": 0, "B": 1, "C": 2}[o] for o in b.anchor_obs])
    for rule, other in (("verl_agent", "start_marker"), ("start_marker", "verl_agent")):
        truth = compute_advantages(b, EstimatorConfig(**{**cfg, "name": "hgpo"}, hgpo_rule=other)).advantages
        bt = BatchTruth(step=b.step.numpy(), state=state, action=np.zeros(len(state), dtype=np.int64),
                        truth=OnPolicyTruth(A=truth.double().numpy(), pi=np.zeros((3, 3, 1)), values=None,
                                            visited=np.zeros((3, 3), dtype=bool)))
        m = score_estimators(b, bt, EstimatorConfig(**cfg, hgpo_rule=rule), names=["hgpo", "grpo"])
        assert m[f"groundtruth/hgpo@{other}/pearson"] == pytest.approx(1.0, abs=1e-9)
        assert m["groundtruth/hgpo/pearson"] < 1 - 1e-3
        assert f"groundtruth/hgpo@{rule}/pearson" not in m and not any("grpo@" in k for k in m)


def test_each_arm_is_scored_with_its_own_config():
    """A plain arm's settings are the study's; a variant that changes one estimator's formula is an arm of its own,
    whose setting must not reach the registered estimators its runs also score."""
    from estimators.config import EstimatorConfig

    plain = EstimatorConfig(name="bipace_q", epsilon=0.002, epsilon_criterion="return_loo")
    assert arm_configs("bipace_q", plain) == (plain, None)
    variant = dataclasses.replace(plain, pace_norm="cluster_std")
    base, own = arm_configs("bipace_q-cluster_std", variant)
    assert base == plain and own == ("bipace_q-cluster_std", variant)
    weighted = EstimatorConfig(name="gigpo", step_weight=1.7, epsilon=0.002)
    assert arm_configs("gigpo-w1.7", weighted) == (EstimatorConfig(name="gigpo", epsilon=0.002),
                                                   ("gigpo-w1.7", weighted))
    # variants that change no formula (an ε, a trainer switch) share the plain config: nothing of their own to score
    assert arm_configs("bipace_q-eps0.05", dataclasses.replace(plain, epsilon=0.05))[1] is None
    assert arm_configs("bipace_q-shuffle", plain) == (plain, None)
    # a plain arm keeps whatever the study set, formula fields included
    fallback = dataclasses.replace(plain, pace_fallback="none")
    assert arm_configs("bipace_q", fallback) == (fallback, None)


def test_no_study_sets_a_formula_field_for_every_arm():
    """``arm_configs`` scores a variant's runs' registered estimators with ``FORMULA_FIELDS`` at their defaults: that
    is each study's plain arms' config only while no study sets them in its preset or common overrides."""
    from estimators.config import EstimatorConfig
    from groundtruth.live import HGPO_FIELDS
    from lab.study import REPO, STUDIES
    from trainer.config import load_config

    default = EstimatorConfig()
    checked = 0
    for name, study in STUDIES.items():
        if not study.variants:
            continue
        est = load_config(REPO / study.preset, study.overrides).estimator
        # HGPO's fields may be set for every arm (the HGPO rule a study's runs were made with): arm_configs keeps them
        # for a variant of another estimator, checked below
        assert all(getattr(est, f) == getattr(default, f) for f in FORMULA_FIELDS if f not in HGPO_FIELDS), name
        for v, (e, extra) in study.variants.items():
            var = load_config(REPO / study.preset, [*study.overrides, *extra, f"estimator.name={e}"]).estimator
            base, _ = arm_configs(v, var)
            assert all(getattr(base, f) == getattr(est, f) for f in FORMULA_FIELDS), (name, v)
        checked += 1
    assert checked >= 2  # llm-gt-halves and halves-textcraft have a pace_norm variant, among others


def test_the_probe_scores_a_variant_under_its_name_and_the_estimators_as_registered(rollout, tiny_lm):
    """A run of ``bipace_q`` with ``pace_norm: cluster_std`` as a variant: the probe logs the plain ``bipace_q``
    (and ``pace_anchor``) as a plain run would, and the variant as ``groundtruth/<variant>/...``."""
    from types import SimpleNamespace

    from estimators import compute_advantages
    from estimators.config import EstimatorConfig
    from trainer.forward import pack_rows_shared, policy_forward

    _, batch = rollout
    model, tok = tiny_lm
    pad = tok.pad_token_id or 0

    def logprobs(prompts, responses, hidden=False, pad_id=0):
        return policy_forward(model, pack_rows_shared(prompts, responses, pad_id), compute_entropy=False)

    variant = EstimatorConfig(name="bipace_q", epsilon=0.05, pace_norm="cluster_std")
    trainer = SimpleNamespace(ppo_actor=SimpleNamespace(compute_logprobs=logprobs), tokenizer=tok, pad_id=pad,
                              cfg=SimpleNamespace(method="bipace_q-cn"), estimator_cfg=variant)
    probe = TruthProbe("FiniteRooms-v0", ROOMS, cells="visited")
    states = sorted({int(k) for k in batch.state_key})
    hidden = torch.eye(len(states))[[states.index(int(k)) for k in batch.state_key]]  # clusters = true states
    m = probe(trainer, batch, batch.to_step_batch(hidden=hidden))

    bt = batch_truth(probe.mdp, batch, model, tok, pad_id=pad, max_rows=len(batch))
    step_batch = batch.to_step_batch(hidden=hidden)

    def pearson(cfg):
        a = compute_advantages(step_batch, cfg, diagnostics=False).advantages.double().numpy()
        return float(np.corrcoef(a, bt.advantages)[0, 1])

    plain = dataclasses.replace(variant, pace_norm="none")
    for name in ("bipace_q", "pace_anchor"):
        assert m[f"groundtruth/{name}/pearson"] == pytest.approx(pearson(dataclasses.replace(plain, name=name)))
        assert m[f"groundtruth/{name}/pearson"] != pytest.approx(
            pearson(dataclasses.replace(variant, name=name)))  # the variant's setting changes this batch's reading
    assert m["groundtruth/bipace_q-cn/pearson"] == pytest.approx(pearson(variant))
    assert "groundtruth/pace_anchor-cn/pearson" not in m


def test_advantage_metrics_on_known_inputs():
    truth = np.array([1.0, -1.0, 0.5, 0.0, -0.2])
    group = np.zeros(5, dtype=np.int64)
    state = np.array([0, 1, 2, 3, 4])
    m = advantage_metrics(truth * 3, truth, group, state, cluster=np.arange(5))
    assert m["pearson"] == pytest.approx(1.0) and m["spearman"] == pytest.approx(1.0)
    assert m["sign_agree"] == 1.0 and m["zero_signal"] == pytest.approx(0.2)
    assert m["singleton"] == 1.0
    m = advantage_metrics(-truth, truth, group, state, cluster=None)
    assert m["pearson"] == pytest.approx(-1.0) and m["sign_agree"] == 0.0 and math.isnan(m["singleton"])
    assert "pearson_step" not in m  # no step term given


def test_the_step_term_is_scored_on_its_own():
    truth = np.array([1.0, -1.0, 0.5, 0.0, -0.2])
    group, state = np.zeros(5, dtype=np.int64), np.arange(5)
    episode = np.array([5.0, 5.0, -5.0, -5.0, 5.0])  # the same for every row of a trajectory: no step credit
    step = np.array([2.0, -2.0, 0.0, 0.0, -0.4])  # right sign where it is not 0, 0 on two rows
    m = advantage_metrics(episode + step, truth, group, state, cluster=np.arange(5), step=step)
    assert m["sign_agree_step"] == pytest.approx(3 / 4)  # rows with truth != 0: 1, -1, 0.5 (step 0), -0.2
    assert m["zero_step"] == pytest.approx(0.4)
    assert m["pearson_step"] == pytest.approx(float(np.corrcoef(step, truth)[0, 1]))
    assert m["pearson_step"] > m["pearson"]  # the episode term hides the step credit
    m = advantage_metrics(episode, truth, group, state, cluster=None, step=np.zeros(5))  # GRPO: no step term
    assert m["pearson_step"] == 0.0 and m["zero_step"] == 1.0 and m["sign_agree_step"] == 0.0


def test_a_batch_without_states_is_refused(rollout, tiny_lm):
    mdp, batch = rollout
    model, tok = tiny_lm
    bad = dataclasses.replace(batch, state_key=[None] * len(batch))
    with pytest.raises(ValueError, match="no state_key"):
        batch_truth(mdp, bad, model, tok)


def test_malformed_scores_are_ignored(rollout):
    mdp, _ = rollout
    lp = np.full((1, mdp.num_actions), -5.0)
    lp[0, mdp.malformed_action] = 123.0  # whatever the placeholder scored
    d = row_distributions(mdp, lp)
    assert d[0, mdp.malformed_action] == pytest.approx(1 - (mdp.num_actions - 1) * math.exp(-5.0))


@pytest.mark.slow
def test_a_run_on_a_finite_world_logs_every_estimator_against_the_truth(tmp_path):
    """The preset trains one estimator and logs all seven against the exact advantages, every iteration."""
    import json
    from pathlib import Path

    from experiments.train import main

    torch.set_num_threads(1)
    preset = Path(__file__).resolve().parents[2] / "configs" / "cpu" / "finite_rooms_tiny.yaml"
    out = tmp_path / "run"
    rc = main(["--config", str(preset), "trainer.iterations=2", "eval.every=0", "trainer.save_every=2",
               "logging.progress_bar=false", f"output_dir={out}"])
    assert rc == 0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2]
    for r in rows:
        names = {k.split("/")[1] for k in r if k.startswith("groundtruth/") and k.count("/") == 2} - {"ceiling"}
        hidden = {"bigpo", "bipace_q", "bipace_v"}
        labels = ["eps0.05"] + (["oracle"] if "groundtruth/oracle_epsilon" in r else [])
        assert names == {"grpo", "gigpo", "hgpo", "rloo", "pace_anchor", *hidden, "hgpo@start_marker",
                         *(f"{e}@{lb}" for e in hidden for lb in labels)}
        assert 0 <= r["groundtruth/true_zero"] <= 1 and r["groundtruth/visited_cells"] >= 1
        assert r["perf/time_probe"] > 0
        # every reachable cell scored, the fill's residual, the ceiling, and the estimators against the old truth
        assert r["groundtruth/cell_prompts"] == r["groundtruth/reachable_cells"] > r[
            "groundtruth/visited_cells"]
        assert 0 <= r["groundtruth/canonical_tv"] <= 1
        assert {"groundtruth/ceiling/pearson_step", "groundtruth/ceiling/pearson_q"} <= set(r)
        assert {f"groundtruth/visited_only/{e}/pearson_step" for e in ("grpo", "gigpo", "bipace_q")} <= set(r)
