"""Bad input raises a clear ValueError naming the field."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from estimators import EstimatorConfig, StepBatch, compute_advantages, register_estimator
from estimators.calibrate import main as calibrate_main
from estimators.calibrate import scan_epsilon
from estimators.synthetic import synthetic_batch


@pytest.fixture
def batch():
    return synthetic_batch(groups=2, group_size=3, max_steps=4, seed=0)


def test_unknown_estimator_name():
    with pytest.raises(ValueError, match=r"name='bipace'.*registered"):
        EstimatorConfig(name="bipace")


@pytest.mark.parametrize(
    "field,value,pattern",
    [
        ("epsilon", -0.1, "epsilon"),
        ("epsilon", float("nan"), "epsilon"),
        ("gamma", 1.5, "gamma"),
        ("invalid_penalty", -1.0, "invalid_penalty"),
        ("norm_mode", "zscore", "norm_mode"),
        ("centroid", "median", "centroid"),
        ("cluster_backend", "annoy", "cluster_backend"),
        ("pace_key", "verb", "pace_key"),
        ("pace_fallback", "always", "pace_fallback"),
        ("pace_norm", "global", "pace_norm"),
        ("pace_key_tokens", 0, "pace_key_tokens"),
        ("hgpo_levels", -1, "hgpo_levels"),
        ("hgpo_rule", "paper", "hgpo_rule"),
    ],
)
def test_bad_config_values(field, value, pattern):
    with pytest.raises(ValueError, match=pattern):
        EstimatorConfig(name="bipace_q", **{field: value})


def test_config_is_checked_once_when_built_and_cannot_change_after(batch, monkeypatch):
    """A built config is valid for good: it is frozen (a change is a new config, checked when built), so
    ``compute_advantages`` does not check it again on every batch."""
    cfg = EstimatorConfig(name="bipace_q")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.epsilon = -1.0
    with pytest.raises(ValueError, match="epsilon"):
        dataclasses.replace(cfg, epsilon=-1.0)
    checks = []
    real = EstimatorConfig.validate
    monkeypatch.setattr(EstimatorConfig, "validate", lambda self: checks.append(1) or real(self))
    compute_advantages(batch, cfg)
    compute_advantages(batch, cfg)
    assert checks == []


@pytest.mark.parametrize("name", ["bigpo", "bipace_q", "bipace_v"])
def test_hidden_estimator_without_hidden(batch, name):
    batch.hidden = None
    with pytest.raises(ValueError, match="hidden"):
        compute_advantages(batch, EstimatorConfig(name=name))


def test_first_tokens_without_ids(batch):
    batch.response_ids = None
    batch.response_mask = None
    with pytest.raises(ValueError, match="response_ids"):
        compute_advantages(batch, EstimatorConfig(name="bipace_q", pace_key="first_tokens"))
    compute_advantages(batch, EstimatorConfig(name="bipace_q"))  # action_tag needs no ids


@pytest.mark.parametrize(
    "field,value",
    [
        ("reward", lambda b: b.reward[:-1]),
        ("valid", lambda b: b.valid[:-1]),
        ("anchor_obs", lambda b: b.anchor_obs[:-1]),
        ("response_text", lambda b: b.response_text + ["x"]),
        ("hidden", lambda b: b.hidden[:-1]),
        ("traj_id", lambda b: b.traj_id[:-1]),
        ("state_key", lambda b: b.state_key[:-2]),
    ],
)
def test_mismatched_lengths(batch, field, value):
    setattr(batch, field, value(batch))
    with pytest.raises(ValueError, match=field):
        compute_advantages(batch, EstimatorConfig(name="bipace_q"))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nonfinite_rewards(batch, bad):
    batch.reward[2] = bad
    with pytest.raises(ValueError, match=r"reward.*rows \[2\]"):
        compute_advantages(batch, EstimatorConfig(name="grpo"))


def test_nonfinite_hidden(batch):
    batch.hidden[1, 3] = float("nan")
    with pytest.raises(ValueError, match=r"hidden.*rows \[1\]"):
        compute_advantages(batch, EstimatorConfig(name="bipace_q"))


def test_nonfinite_hidden_is_checked_where_it_is_read(batch):
    """grpo never reads hidden states: without diagnostics a NaN there does not stop it; the diagnostics
    (which cluster hidden states) do read them and report the row."""
    batch.hidden[2, 0] = float("inf")
    res = compute_advantages(batch, EstimatorConfig(name="grpo"), diagnostics=False)
    assert torch.isfinite(res.advantages).all()
    with pytest.raises(ValueError, match=r"hidden.*rows \[2\]"):
        compute_advantages(batch, EstimatorConfig(name="grpo"), diagnostics=True)


def test_hidden_values_whose_sum_overflows(batch):
    batch.hidden[:] = 3e38
    with pytest.raises(ValueError, match="hidden holds values up to 3e"):
        compute_advantages(batch, EstimatorConfig(name="bigpo", epsilon=0.1))


def test_empty_batch():
    empty = StepBatch(
        group_id=torch.zeros(0, dtype=torch.long), traj_id=torch.zeros(0, dtype=torch.long),
        step=torch.zeros(0, dtype=torch.long), reward=torch.zeros(0), valid=torch.zeros(0, dtype=torch.bool),
        anchor_obs=[], response_text=[],
    )
    with pytest.raises(ValueError, match="empty"):
        compute_advantages(empty, EstimatorConfig(name="grpo"))


def test_wrong_dtypes_and_duplicates(batch):
    b = batch.select(range(len(batch)))
    b.reward = b.reward.long()
    with pytest.raises(ValueError, match="reward"):
        compute_advantages(b, EstimatorConfig(name="grpo"))
    b = batch.select(list(range(len(batch))) + [0])  # the same (group, traj, step) twice
    with pytest.raises(ValueError, match="same"):
        compute_advantages(b, EstimatorConfig(name="grpo"))
    with pytest.raises(ValueError, match="EstimatorConfig"):
        compute_advantages(batch, {"name": "grpo"})


def test_estimator_producing_nan_is_reported(batch):
    from estimators.registry import ESTIMATORS, EstimatorResult

    @register_estimator("broken_for_test")
    def broken(b, cfg):
        x = torch.full((len(b),), float("nan"))
        return EstimatorResult(advantages=x, episode=x, step=x)

    try:
        with pytest.raises(FloatingPointError, match="broken_for_test"):
            compute_advantages(batch, EstimatorConfig(name="broken_for_test"))
    finally:
        ESTIMATORS.pop("broken_for_test")


def test_register_twice_fails():
    with pytest.raises(ValueError, match="already registered"):
        register_estimator("grpo")(lambda b, c: None)


def test_calibrate_scan_and_cli(tmp_path, capsys, batch):
    rows = scan_epsilon(batch, [0.0, 0.1, 0.5])
    assert rows[0]["grouping"] == "exact anchor obs"
    rates = [r["singleton_rate"] for r in rows[1:]]
    assert rates == sorted(rates, reverse=True)  # larger eps never creates more singletons here
    path = tmp_path / "b.pt"
    batch.save(path)
    assert StepBatch.load(path).state_key == [repr(k) for k in batch.state_key]
    assert calibrate_main(["--batch", str(path), "--grid", "0,0.1"]) == 0
    out = capsys.readouterr().out
    assert "hidden eps=0.1" in out and "exact anchor obs" in out
    with pytest.raises(ValueError, match="negative"):
        scan_epsilon(batch, [-0.1])
    batch.hidden = None
    with pytest.raises(ValueError, match="hidden"):
        scan_epsilon(batch, [0.1])
