"""``estimators.verl_agent``: verl-agent's GiGPO call, with BiPACE's inputs.

* GiGPO equals what verl-agent's own ``compute_gigpo_outcome_advantage`` returned on the committed sample
  (``data/verl_agent/``: generated batches, run once through verl-agent's unchanged code; its README says how),
  including duplicated rows (``adjust_batch``) and reordered rows (``_balance_batch``). This repo's ``gigpo``
  estimator equals it too, on the batches without duplicates (a StepBatch cannot hold a row twice).
* bigpo / bipace_v / bipace_q equal ``compute_advantages`` on the same rows, in any row order.
"""
from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

from estimators import EstimatorConfig, StepBatch, compute_advantages
from estimators.synthetic import synthetic_batch
from estimators.verl_agent import (
    VERL_AGENT_ESTIMATORS,
    action_keys_from_responses,
    compute_bipace_outcome_advantage,
    step_indices_from_order,
)

SAMPLE = Path(__file__).parent / "data" / "verl_agent" / "gigpo_sample.npz"
MODES = ("mean_std_norm", "mean_norm")
# verl-agent computes in float32 and divides a one-row prompt group's score by 1 + 1e-6; this repo in float64
TOL = dict(rtol=1e-5, atol=1e-5)


def _sample():
    data = np.load(SAMPLE)
    return data, [str(n) for n in data["names"]]


def _inputs(data, name):
    def g(k):
        return data[f"{name}/{k}"]
    return g, dict(token_level_rewards=torch.from_numpy(g("token_level_rewards")),
                   step_rewards=torch.from_numpy(g("step_rewards")), response_mask=torch.from_numpy(g("response_mask")),
                   anchor_obs=g("anchor_obs"), index=g("index"), traj_index=g("traj_index"))


def test_the_sample_covers_the_cases():
    data, names = _sample()
    assert names == ["plain", "long", "one_trajectory", "one_row_groups", "weight_half", "adjusted", "balanced"]
    for name in ("adjusted", "balanced"):  # duplicated rows, as adjust_batch(mode="copy") leaves them
        pairs = list(zip(data[f"{name}/traj_index"].tolist(), data[f"{name}/step"].tolist()))
        assert len(set(pairs)) < len(pairs)
    steps = data["balanced/step"]
    assert any(b < a for a, b in zip(steps, steps[1:]))  # reordered
    total = sum(len(data[f"{n}/index"]) for n in names)
    assert total > 200 and SAMPLE.stat().st_size < 60_000


@pytest.mark.parametrize("mode", MODES)
def test_gigpo_equals_verl_agents_own_outputs(mode):
    data, names = _sample()
    for name in names:
        g, inp = _inputs(data, name)
        adv, ret = compute_bipace_outcome_advantage(**inp, step_advantage_w=float(g("step_advantage_w")), mode=mode,
                                                    estimator="gigpo")
        want = g(f"{mode}/advantages")
        assert np.abs(want).max() > 0 or name == "one_trajectory"
        np.testing.assert_allclose(adv.numpy(), want, **TOL, err_msg=f"batch {name}, mode {mode}")
        np.testing.assert_allclose(ret.numpy(), g(f"{mode}/returns"), **TOL)
        assert adv.dtype == torch.float32 and adv.shape == inp["token_level_rewards"].shape
        assert bool((adv[inp["response_mask"] == 0] == 0).all())


@pytest.mark.parametrize("mode", MODES)
def test_this_repos_gigpo_estimator_equals_verl_agents_outputs(mode):
    """The same check of ``compute_advantages(gigpo)`` from per-step rewards, gamma 0.95 and penalty 0.1."""
    data, names = _sample()
    checked = 0
    for name in names:
        g, inp = _inputs(data, name)
        pairs = list(zip(g("traj_index").tolist(), g("step").tolist()))
        if len(set(pairs)) < len(pairs):
            continue
        codes = {u: k for k, u in enumerate(dict.fromkeys(g("index").tolist()))}
        tcodes = {u: k for k, u in enumerate(dict.fromkeys(g("traj_index").tolist()))}
        batch = StepBatch(group_id=torch.tensor([codes[u] for u in g("index").tolist()]),
                          traj_id=torch.tensor([tcodes[u] for u in g("traj_index").tolist()]),
                          step=torch.from_numpy(g("step")), reward=torch.from_numpy(g("reward")),
                          valid=torch.from_numpy(g("valid")), anchor_obs=g("anchor_obs").tolist(),
                          response_text=[""] * len(pairs))
        cfg = EstimatorConfig(name="gigpo", gamma=float(data["gamma"]), invalid_penalty=float(data["penalty"]),
                              norm_mode=mode, step_weight=float(g("step_advantage_w")))
        adv = compute_advantages(batch, cfg, diagnostics=False).advantages
        np.testing.assert_allclose((adv[:, None] * inp["response_mask"]).numpy(), g(f"{mode}/advantages"), **TOL,
                                   err_msg=name)
        checked += 1
    assert checked == 5


def _verl_agent_rows(batch: StepBatch, gamma: float, penalty: float, seed: int = 0):
    """verl-agent's inputs for the rows of ``batch`` (as its trainer builds them; plain loops): S_i on the last
    response token, R_i as step_rewards, string uids."""
    rng = np.random.default_rng(seed)
    n = len(batch)
    keys = list(zip(batch.group_id.tolist(), batch.traj_id.tolist()))
    total: dict = {}
    for k, r in zip(keys, batch.reward.tolist()):
        total[k] = total.get(k, 0.0) + r
    ret = np.zeros(n)
    for k in total:
        rows = sorted((i for i in range(n) if keys[i] == k), key=lambda i: int(batch.step[i]))
        run = 0.0
        for i in reversed(rows):
            run = float(batch.reward[i]) + gamma * run
            ret[i] = run
    invalid = (~batch.valid).double().numpy()
    length = 7
    resp_len = rng.integers(1, length + 1, size=n)
    mask = torch.from_numpy((np.arange(length)[None, :] < resp_len[:, None]).astype(np.int64))
    tlr = torch.zeros(n, length)
    for i in range(n):
        tlr[i, resp_len[i] - 1] = total[keys[i]] - penalty * invalid[i]
    gname = {g: str(uuid.UUID(int=int(rng.integers(1 << 62)))) for g in set(batch.group_id.tolist())}
    tname = {k: str(uuid.UUID(int=int(rng.integers(1 << 62)))) for k in total}
    return dict(token_level_rewards=tlr, step_rewards=torch.tensor(ret - penalty * invalid, dtype=torch.float32),
                response_mask=mask, anchor_obs=np.array(batch.anchor_obs, dtype=object),
                index=np.array([gname[g] for g in batch.group_id.tolist()], dtype=object),
                traj_index=np.array([tname[k] for k in keys], dtype=object))


def _take(inp: dict, order: np.ndarray) -> dict:
    return {k: v[torch.from_numpy(order)] if isinstance(v, torch.Tensor) else v[order] for k, v in inp.items()}


@pytest.mark.parametrize("estimator", VERL_AGENT_ESTIMATORS)
@pytest.mark.parametrize("mode", MODES)
def test_each_estimator_equals_compute_advantages_on_the_same_rows(estimator, mode):
    batch = synthetic_batch(groups=3, group_size=6, max_steps=6, hidden_size=16, states_per_group=4, seed=3)
    cfg = EstimatorConfig(name=estimator, norm_mode=mode, epsilon=0.05, step_weight=0.7)
    want = compute_advantages(batch, cfg, diagnostics=False)
    inp = _verl_agent_rows(batch, cfg.gamma, cfg.invalid_penalty)
    extra = dict(estimator=estimator, hidden=batch.hidden, action_key=action_keys_from_responses(batch.response_text),
                 step_index=batch.step.numpy(), cluster_epsilon=cfg.epsilon)
    adv, ret = compute_bipace_outcome_advantage(**inp, step_advantage_w=cfg.step_weight, mode=mode, **extra)
    expect = want.advantages[:, None] * inp["response_mask"]
    torch.testing.assert_close(adv, expect, rtol=1e-5, atol=1e-5)
    assert ret is adv
    # rows in another order (verl-agent's _balance_batch), each row's step passed along: the same per row
    order = np.random.default_rng(1).permutation(len(batch))
    shuffled = {**extra, "hidden": batch.hidden[torch.from_numpy(order)], "step_index": batch.step.numpy()[order],
                "action_key": [extra["action_key"][i] for i in order]}
    adv2, _ = compute_bipace_outcome_advantage(**_take(inp, order), step_advantage_w=cfg.step_weight, mode=mode,
                                               **shuffled)
    torch.testing.assert_close(adv2, expect[torch.from_numpy(order)], rtol=1e-5, atol=1e-5)
    # in rollout order (each trajectory's rows in step order) the steps can be left out
    canon = np.lexsort((batch.step.numpy(), batch.traj_id.numpy(), batch.group_id.numpy()))
    assert list(step_indices_from_order(inp["traj_index"][canon])) == batch.step.numpy()[canon].tolist()
    adv3, _ = compute_bipace_outcome_advantage(**_take(inp, canon), step_advantage_w=cfg.step_weight, mode=mode,
                                               **{**extra, "hidden": batch.hidden[torch.from_numpy(canon)],
                                                  "step_index": None,
                                                  "action_key": [extra["action_key"][i] for i in canon]})
    torch.testing.assert_close(adv3, expect[torch.from_numpy(canon)], rtol=1e-5, atol=1e-5)


def test_the_estimators_differ_on_that_batch():
    """So the equalities above cannot hold by accident."""
    batch = synthetic_batch(groups=3, group_size=6, max_steps=6, hidden_size=16, states_per_group=4, seed=3)
    inp = _verl_agent_rows(batch, 0.95, 0.1)
    common = dict(hidden=batch.hidden, action_key=action_keys_from_responses(batch.response_text),
                  step_index=batch.step.numpy())
    outs = [compute_bipace_outcome_advantage(**inp, estimator=e, **common)[0] for e in VERL_AGENT_ESTIMATORS]
    for i in range(len(outs)):
        for j in range(i + 1, len(outs)):
            assert not torch.allclose(outs[i], outs[j]), (VERL_AGENT_ESTIMATORS[i], VERL_AGENT_ESTIMATORS[j])


@pytest.mark.parametrize("change,needle", [
    (dict(estimator="hgpo"), "not one of"),
    (dict(mode="leave_one_out"), "mode='leave_one_out'"),
    (dict(epsilon=1e-8), "cluster_epsilon"),
    (dict(enable_similarity=True), "enable_similarity"),
    (dict(hidden=None), "pass hidden"),
    (dict(action_key=None), "needs action_key"),
    (dict(action_key=["a"]), "action_key has 1 entries"),
    (dict(hidden=torch.full((3, 4), float("nan"))), "hidden must be"),
    (dict(cluster_epsilon=3.0), "cluster_epsilon=3.0"),
    (dict(step_index=[0, -1]), "step_index"),
    (dict(index=["a"]), "index has 1 entries"),
])
def test_bad_input_is_a_clear_error(change, needle):
    batch = synthetic_batch(groups=2, group_size=3, max_steps=3, hidden_size=8, seed=0)
    args = dict(**_verl_agent_rows(batch, 0.95, 0.1), estimator="bipace_q", hidden=batch.hidden,
                action_key=action_keys_from_responses(batch.response_text))
    args.update(change)
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace("[", r"\[")):
        compute_bipace_outcome_advantage(**args)


def test_nan_hidden_names_the_rows():
    batch = synthetic_batch(groups=2, group_size=3, max_steps=3, hidden_size=8, seed=0)
    hidden = batch.hidden.clone()
    hidden[1, 0] = float("nan")
    with pytest.raises(ValueError, match=r"NaN/Inf at rows \[1\]"):
        compute_bipace_outcome_advantage(**_verl_agent_rows(batch, 0.95, 0.1), estimator="bigpo", hidden=hidden)


def _collated(values) -> np.ndarray:
    """A non-tensor column as verl-agent's rollout leaves it: one value per row, gathered into an object array."""
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


@pytest.mark.parametrize("estimator", ("bigpo", "bipace_v", "bipace_q"))
def test_columns_as_the_integration_patch_passes_them(estimator):
    """integrations/verl_agent/bipace.patch: step_index and action_key go through verl-agent's collate_fn (object
    arrays of np.int64 / str), hidden is the old-log-prob pass's (bs, D) float32 ``bipace_hidden``, the keywords
    come from ``algorithm.bipace``. The result equals the one from plain arrays."""
    batch = synthetic_batch(groups=3, group_size=5, max_steps=5, hidden_size=16, states_per_group=4, seed=7)
    inp = _verl_agent_rows(batch, 0.95, 0.1)
    keys = action_keys_from_responses(batch.response_text)
    plain = compute_bipace_outcome_advantage(**inp, estimator=estimator, hidden=batch.hidden, action_key=keys,
                                             step_index=batch.step.numpy(), cluster_epsilon=0.05)[0]
    shaped = compute_bipace_outcome_advantage(
        **inp, estimator=estimator, hidden=batch.hidden.float(), enable_similarity=False,
        action_key=_collated(keys), step_index=_collated([np.int64(s) for s in batch.step.tolist()]),
        **{"cluster_epsilon": 0.05})[0]
    torch.testing.assert_close(shaped, plain)
