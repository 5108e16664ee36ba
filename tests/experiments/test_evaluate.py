"""`python -m experiments.evaluate`: a model folder on the fixed evaluation lists, with its warm start's settings."""
from __future__ import annotations

import json

import pytest

from envs.pool import Task
from experiments import evaluate
from warmstart import sft


@pytest.fixture(scope="module")
def tiny_warmstart(tmp_path_factory):
    """A random 1-layer tiny model with a warm-start record (history 0, inventory shown, 8-token responses)."""
    from agents.models.tiny import TinyModelConfig, build_tiny_model

    rows = sft.collect_expert_rows("TextCraft-v0", [Task("train", k, 7 + k) for k in range(3)],
                                   env_kwargs={"show_inventory": True})
    out = build_tiny_model(tmp_path_factory.mktemp("eval") / "final", TinyModelConfig(layers=1, hidden=64, heads=2),
                           corpus=list(sft.rows_corpus(rows, "textcraft")))
    (out / "warmstart.json").write_text(json.dumps({
        "env": "TextCraft-v0", "env_kwargs": {"show_inventory": True, "max_steps": 15},
        "settings": {"history_length": 0, "max_response_tokens": 8}}))
    return out


def test_evaluate_plays_the_fixed_list_with_the_warm_start_settings(tiny_warmstart, tmp_path, capsys):
    out = tmp_path / "eval.json"
    args = ["--model", str(tiny_warmstart), "--splits", "eval_depth2,train", "--max-tasks", "2", "--max-steps", "2",
            "--repeats", "2", "--json", str(out)]
    assert evaluate.main(args) == 0
    res = json.loads(out.read_text())
    assert res["env"] == "TextCraft-v0" and res["env_kwargs"] == {"show_inventory": True, "max_steps": 2}
    assert res["history_length"] == 0 and res["max_response_tokens"] == 8 and res["temperature"] == 0.4
    assert set(res["splits"]) == {"eval_depth2", "train"}
    for row in res["splits"].values():
        assert row["episodes"] == 4 and len(row["per_repeat"]) == 2
        assert 0.0 <= row["success"] <= 1.0 and 1.0 <= row["mean_steps"] <= 2.0
    printed = capsys.readouterr().out
    assert "| eval_depth2 | 2 |" in printed and "| train | 2 |" in printed
    # the same list and seeds give the same numbers
    again = tmp_path / "again.json"
    assert evaluate.main(args[:-1] + [str(again)]) == 0
    assert json.loads(again.read_text())["splits"]["train"]["per_repeat"] == res["splits"]["train"]["per_repeat"]


def test_evaluate_rejects_a_non_model_folder_and_an_unknown_split(tiny_warmstart, tmp_path, capsys):
    assert evaluate.main(["--model", str(tmp_path)]) == 2
    assert "not a model folder" in capsys.readouterr().err
    assert evaluate.main(["--model", str(tiny_warmstart), "--splits", "valid_seen"]) == 2
    assert "unknown split" in capsys.readouterr().err


def test_evaluate_records_the_model_path_portably(tiny_warmstart, tmp_path, monkeypatch):
    # a model below the cache root is recorded as $BIPACE_CACHE/..., never as this machine's absolute path
    monkeypatch.setenv("BIPACE_CACHE", str(tiny_warmstart.parent.parent))
    out = tmp_path / "eval.json"
    assert evaluate.main(["--model", str(tiny_warmstart), "--splits", "train", "--max-tasks", "1", "--max-steps", "1",
                          "--json", str(out)]) == 0
    model = json.loads(out.read_text())["model"]
    assert model == f"$BIPACE_CACHE/{tiny_warmstart.parent.name}/{tiny_warmstart.name}"
