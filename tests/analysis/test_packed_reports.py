"""Every committed study's generated report, rebuilt from its packed run file (``results/<study>/runs.jsonl.xz``),
equals the committed one: ``summary.md`` and ``tables.md`` of ``python -m experiments.report`` (the command each
summary names in its "Made by" line), the ground-truth ``overview.md`` (``python -m experiments.reanalyse --overview``)
and the learning study's ``epsilon_criteria.md`` (``python -m experiments.epsilon_criteria``). Figures are checked
to be written, not compared byte for byte (they depend on the matplotlib version). The demo's reference run stays
as run folders (``results/demo/runs``) and is rebuilt from them."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from analysis import report
from analysis.reanalysis import STUDIES, reanalyse
from analysis.runs import PACKED_NAME, packed_file

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "results"
#: the studies whose report takes more than a few seconds to rebuild on the 2-core machine
SLOW = {"llm-groundtruth/exact", "llm-groundtruth/oversplit", "llm-groundtruth/undersplit"}


def _report_studies() -> list[str]:
    """Study folders (relative to results/) whose summary.md was written by ``experiments.report``."""
    return sorted(p.parent.relative_to(RESULTS).as_posix() for p in RESULTS.rglob("summary.md")
                  if report.MADE_BY.search(p.read_text()))


def _param(study: str):
    return pytest.param(study, id=study, marks=[pytest.mark.slow] if study in SLOW else [])


def test_every_study_with_run_data_is_rebuilt_here():
    """The packed studies, and what this file rebuilds: a new study is covered without editing it."""
    packed = sorted(p.parent.relative_to(RESULTS).as_posix() for p in RESULTS.rglob(PACKED_NAME))
    assert packed and set(packed) <= set(_report_studies())
    # run folders are committed for the demo's reference only (the rest is packed)
    tracked = subprocess.run(["git", "ls-files", "results"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    assert {f.split("/runs/")[0] for f in tracked if "/runs/" in f} <= {"results/demo"}


@pytest.mark.parametrize("study", [_param(s) for s in _report_studies()])
def test_report_rebuilt_from_the_packed_runs_equals_the_committed_one(study, tmp_path):
    folder = RESULTS / study
    argv = report.made_by(folder)
    runs = Path(argv[argv.index("--runs") + 1])
    if study != "demo":
        assert packed_file(REPO / runs) == folder / PACKED_NAME, f"{study}: its runs are not read from {PACKED_NAME}"
    out = tmp_path / "report"
    argv[argv.index("--out") + 1] = str(out)
    argv[argv.index("--runs") + 1] = str(REPO / runs)
    assert report.main(argv) == 0
    for name in ("summary.md", "tables.md"):
        got = (out / name).read_text().replace(f"--runs {REPO / runs}", f"--runs {runs}")
        got = got.replace(f"--out {out}", f"--out {folder.relative_to(REPO)}")
        assert got == (folder / name).read_text(), f"{study}/{name} differs from what its packed runs give"
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", (out / "summary.md").read_text())
    assert figures and all((out / f).is_file() and (folder / f).is_file() for f in figures)
    assert sorted(p.name for p in out.glob("*.png")) == sorted(p.name for p in folder.glob("*.png"))


@pytest.mark.slow
def test_groundtruth_overview_rebuilt_from_the_packed_runs(tmp_path):
    from experiments import reanalyse

    root = tmp_path / "llm-groundtruth"
    for scenario in ("exact", "oversplit", "undersplit"):
        (root / scenario).mkdir(parents=True)
        shutil.copy(RESULTS / "llm-groundtruth" / scenario / PACKED_NAME, root / scenario / PACKED_NAME)
    assert reanalyse.main(["--overview", str(root)]) == 0
    got = (root / "overview.md").read_text().replace(str(root), "results/llm-groundtruth")
    assert got == (RESULTS / "llm-groundtruth" / "overview.md").read_text()


def test_epsilon_criteria_rebuilt_from_the_packed_runs(tmp_path, capsys):
    from experiments import epsilon_criteria

    assert epsilon_criteria.main([str(RESULTS / "learning" / "runs"), "--out", str(tmp_path / "c.md")]) == 0
    capsys.readouterr()
    assert (tmp_path / "c.md").read_text() == (RESULTS / "learning" / "epsilon_criteria.md").read_text()


def test_a_packed_study_reports_but_does_not_rerun(tmp_path, monkeypatch, capsys):
    """``experiments.study <name> --report-only`` writes the report from the packed file and leaves study.json as it
    is; without it the study refuses to start its runs again beside the packed ones, and says how to unpack."""
    from lab import study

    monkeypatch.chdir(REPO)  # study.main works from the repository root
    out = tmp_path / "smoke"
    out.mkdir()
    for name in (PACKED_NAME, "study.json"):
        shutil.copy(RESULTS / "smoke" / name, out / name)
    assert study.main(["smoke", "--report-only", "--out", str(out)]) == 0
    assert "the runs are packed into" in capsys.readouterr().out
    got = (out / "summary.md").read_text().replace(str(out), "results/smoke")
    assert got == (RESULTS / "smoke" / "summary.md").read_text()
    assert (out / "study.json").read_bytes() == (RESULTS / "smoke" / "study.json").read_bytes()
    assert study.main(["smoke", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"python -m analysis.pack {out} --unpack" in err and not (out / "runs").exists()


@pytest.mark.parametrize("study", [pytest.param(s, marks=pytest.mark.slow) if s == "llm-groundtruth" else s
                                   for s in sorted(STUDIES)])
def test_each_committed_reanalysis_rebuilds_equal_from_the_packed_runs(study):
    """``results/<study>/reanalysis.md`` is what ``python -m experiments.reanalyse <study>`` writes today from the
    committed (packed) run data: a claim in a study README that cites it cannot drift from the data."""
    results = Path(__file__).resolve().parents[2] / "results"
    if not (results / study / "reanalysis.md").exists() and packed_file(results / study / "runs") is None:
        pytest.skip(f"results/{study}: no committed run data yet (a study still running), so nothing to rebuild")
    committed = (results / study / "reanalysis.md").read_text()
    assert reanalyse(study, results) == committed, (
        f"results/{study}/reanalysis.md is stale: run `python -m experiments.reanalyse {study}`")
