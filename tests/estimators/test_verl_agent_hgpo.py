"""``hgpo`` equals what verl-agent's own HGPO (``recipe/hgpo/core_hgpo.py``, ``compute_hgpo_outcome_advantage``)
returned on the committed sample (``data/verl_agent/hgpo_sample.npz``: generated batches run once through
verl-agent's unchanged code; ``data/verl_agent/README.md`` says how), and the ``start_marker`` rule does not."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from estimators import EstimatorConfig, StepBatch, compute_advantages

SAMPLE = Path(__file__).parent / "data" / "verl_agent" / "hgpo_sample.npz"
MODES = ("mean_std_norm", "mean_norm")


def _cases():
    data = np.load(SAMPLE)
    for name in [str(n) for n in data["names"]]:
        def g(k, name=name):
            return data[f"{name}/{k}"]
        groups = {u: k for k, u in enumerate(dict.fromkeys(g("index").tolist()))}
        trajs = {u: k for k, u in enumerate(dict.fromkeys(g("traj_index").tolist()))}
        batch = StepBatch(group_id=torch.tensor([groups[u] for u in g("index").tolist()]),
                          traj_id=torch.tensor([trajs[u] for u in g("traj_index").tolist()]),
                          step=torch.from_numpy(g("step")), reward=torch.from_numpy(g("reward")),
                          valid=torch.from_numpy(g("valid")), anchor_obs=g("anchor_obs").tolist(),
                          response_text=[""] * len(g("step")))
        yield data, name, g, batch


def _differences(mode: str, rule: str) -> tuple[int, int, float]:
    """(rows, rows differing by more than 1e-5, largest difference) of this repo's hgpo against verl-agent's."""
    rows = differ = 0
    worst = 0.0
    for data, _name, g, batch in _cases():
        cfg = EstimatorConfig(name="hgpo", gamma=float(data["gamma"]), invalid_penalty=float(data["penalty"]),
                              norm_mode=mode, hgpo_levels=int(g("history_length")), hgpo_alpha=float(g("alpha")),
                              hgpo_rule=rule)
        adv = compute_advantages(batch, cfg, diagnostics=False).advantages.double().numpy()
        diff = np.abs(adv[:, None] * g("response_mask") - g(f"{mode}/advantages")).max(axis=1)
        rows += len(diff)
        differ += int((diff > 1e-5).sum())
        worst = max(worst, float(diff.max()))
    return rows, differ, worst


def test_the_sample_covers_the_cases():
    data = np.load(SAMPLE)
    assert {int(data[f"{n}/history_length"]) for n in data["names"]} == {1, 2, 3, 4}
    assert {float(data[f"{n}/alpha"]) for n in data["names"]} == {0.0, 1.0, 2.0}
    steps = 0
    for _data, _name, g, batch in _cases():
        steps = max(steps, int(batch.step.max()))
        assert np.abs(g("mean_std_norm/advantages")).max() > 0
    assert steps >= 8 and SAMPLE.stat().st_size < 60_000


@pytest.mark.parametrize("mode", MODES)
def test_hgpo_equals_verl_agents_own_outputs(mode):
    """verl-agent computes in float32 (and divides the level weights by their sum + 1e-6); this repo in float64."""
    rows, differ, worst = _differences(mode, "verl_agent")
    assert rows == 388 and differ == 0 and worst < 1e-5, (rows, differ, worst)


@pytest.mark.parametrize("mode", MODES)
def test_the_start_marker_rule_is_another_estimator(mode):
    """So the equality above cannot hold by accident: the earlier rule differs on most rows of the sample."""
    rows, differ, worst = _differences(mode, "start_marker")
    assert differ > rows // 3 and worst > 0.1, (rows, differ, worst)
