"""``python -m analysis.compare_runs``: which keys of two runs differ, by how much, and the exit status."""
from __future__ import annotations

import json

import pytest

from analysis import compare_runs as cr


def _run(path, metrics, evals=None):
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    if evals is not None:
        (path / "eval.jsonl").write_text("".join(json.dumps(m) + "\n" for m in evals))
    return path


def _lines(kl):
    return [{"iteration": 0, "eval/x/success_rate": 0.25, "time": 1.0},
            {"iteration": 1, "rollout/success_rate": 0.5, "loss/approx_kl": kl, "perf/time_rollout": 3.0,
             "group/num_clusters": 4, "time": 2.0}]


def test_equal_runs_pass_and_timings_are_skipped(tmp_path, capsys):
    a = _run(tmp_path / "a", _lines(2.4e-5), [{"iteration": 0, "eval/x/success_rate": 0.25}])
    b_lines = _lines(2.4e-5)
    b_lines[1]["perf/time_rollout"], b_lines[1]["time"] = 9.0, 7.0  # timings differ: not compared
    b = _run(tmp_path / "b", b_lines, [{"iteration": 0, "eval/x/success_rate": 0.25}])
    res = cr.compare_runs(a, b)
    assert res["metrics.jsonl"]["keys"] == {} and res["metrics.jsonl"]["compared"] == 5
    assert cr.main([str(a), str(b)]) == 0 and "all pairs equal" in capsys.readouterr().out


def test_float_differences_are_measured_and_atol_decides(tmp_path, capsys):
    a = _run(tmp_path / "a", _lines(2.42e-5))
    b = _run(tmp_path / "b", _lines(2.45e-5))
    (d,) = cr.compare_runs(a, b)["metrics.jsonl"]["keys"].items()
    assert d[0] == "loss/approx_kl" and d[1]["first"] == 1
    assert d[1]["abs"] == pytest.approx(3e-7) and d[1]["rel"] == pytest.approx(3e-7 / 2.45e-5)
    assert cr.main([str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "| `loss/approx_kl` | 1 | 3e-07 |" in out and "some pairs differ" in out
    assert cr.main([str(a), str(b), "--atol", "1e-6"]) == 0


def test_token_dependent_differences_and_missing_lines_fail(tmp_path, capsys):
    a = _run(tmp_path / "a", _lines(2.4e-5))
    lines = _lines(2.4e-5)
    lines[1]["group/num_clusters"] = 5
    lines[1]["rollout/success_rate"] = "nan?"  # a non-numeric value: infinitely different
    b = _run(tmp_path / "b", lines)
    keys = cr.compare_runs(a, b)["metrics.jsonl"]["keys"]
    assert keys["group/num_clusters"]["abs"] == 1 and keys["rollout/success_rate"]["abs"] == float("inf")
    assert cr.main([str(a), str(b), "--atol", "10"]) == 1  # inf is never within atol
    short = _run(tmp_path / "short", _lines(2.4e-5)[:1])
    r = cr.compare_runs(a, short)["metrics.jsonl"]
    assert not r["iterations_equal"] and r["lines"] == (2, 1)
    assert cr.main([str(a), str(short)]) == 1
    capsys.readouterr()


def test_bad_arguments_are_named(tmp_path, capsys):
    a = _run(tmp_path / "a", _lines(1.0))
    assert cr.main([str(a)]) == 2 and "in pairs" in capsys.readouterr().err
    assert cr.main([str(a), str(tmp_path / "nowhere")]) == 2
    assert "nowhere: no metrics.jsonl" in capsys.readouterr().err
