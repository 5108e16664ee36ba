"""``experiments.grouping_diagnostic state-distances`` on a tiny random model: the three kinds of pairs, padding within
float noise."""
from __future__ import annotations

from experiments import grouping_diagnostic


def test_pairs_of_each_kind_and_padding_below_the_join_tolerance(tmp_path, capsys):
    from agents.models.tiny import TinyModelConfig, build_tiny_model
    from estimators.cluster import JOIN_TOL

    folder = build_tiny_model(tmp_path / "tiny", TinyModelConfig(layers=2, hidden=64, heads=2))
    assert grouping_diagnostic.main(["state-distances", "--model", str(folder), "--tasks", "3", "--repeats", "3"]) == 0
    out = capsys.readouterr().out
    assert "| one prompt, two paddings | 7 |" in out  # 1 start + 3 repeats + 3 expert states
    assert "| one observation, other step count | 3 |" in out and "| other observations |" in out

    from agents.models.loading import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(str(folder))
    dist = grouping_diagnostic.pair_distances(model, tok, [3], repeats=2, expert_steps=2)
    assert max(abs(x) for x in dist["one prompt, two paddings"]) < JOIN_TOL
    # the repeated failure keeps the observation; only the prompt's step counter differs, and it moves the state
    assert len(dist["one observation, other step count"]) == 1 and dist["one observation, other step count"][0] > 0
