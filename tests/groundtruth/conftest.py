"""Small worlds shared by the ground-truth tests."""
from __future__ import annotations

import pytest

from envs.finite.families import make_family
from envs.finite.mdp import SUCCESS_REWARD, build_mdp
from envs.finite.text import surface_preset


class ChainFamily:
    """Hand-solvable world: states 0 -> 1 -> win. Action 0 "go" advances (from 1 it wins, reward 10),
    action 1 "stay" does nothing. Deterministic."""

    name = "chain"

    def actions(self):
        return ["go", "stay"]

    def start_states(self):
        return [0]

    def start_event(self, s):
        return ("start",)

    def transition(self, s, a):
        if a == 1:
            return [(1.0, s, 0.0, False, ("stay",))]
        if s == 0:
            return [(1.0, 1, 0.0, False, ("moved",))]
        return [(1.0, s, SUCCESS_REWARD, True, ("won",))]

    def admissible(self, s, a):
        return True

    def feature_names(self):
        return ["at1"]

    def features(self, s):
        return [float(s)]

    def render(self, event, s, t, rng):
        return f"{event[0]} at {s}"


@pytest.fixture
def chain_mdp():
    return build_mdp(ChainFamily(), horizon=3, malformed_action=False)


@pytest.fixture(scope="session")
def small_craft():
    fam = make_family("craft", surface_preset("high"), n_intermediates=2, n_base_per=1, n_distractors=1,
                      n_junk_recipes=1, n_tasks=2, alias=0.5)
    return build_mdp(fam, horizon=8)


@pytest.fixture(scope="session")
def small_rooms():
    fam = make_family("rooms", surface_preset("high"), n_locations=4, n_objects=1, n_tasks=2, alias=0.5)
    return build_mdp(fam, horizon=12)


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    """A randomly initialised 2-layer tiny LM (eval mode) and its tokenizer, built once per test module."""
    from agents.models.loading import load_model_and_tokenizer
    from agents.models.tiny import TinyModelConfig, build_tiny_model

    d = build_tiny_model(tmp_path_factory.mktemp("models") / "tiny", TinyModelConfig(layers=2, hidden=64, heads=2))
    model, tok = load_model_and_tokenizer(d, dtype="float32")
    return model.eval(), tok
