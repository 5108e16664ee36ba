"""The repo works from a clone at any path (issue: a fresh clone's first `make demo` failed after 50 minutes).

Committed run folders and records name no absolute path of the machine that made them; a run folder records the
warm start as ``$BIPACE_CACHE/...``; in a copy of the repository at another path, with warm starts in its cache,
the README's dry-run commands and the demo's report against the committed reference succeed.
"""
from __future__ import annotations

import json
import lzma
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envs.paths import CACHE_VAR, portable_path, portable_text, resolve_path
from tests.experiments.helpers import REPO, child_env, fake_warmstart

# absolute paths of a machine (home, scratch, work or mount folders); system tools such as /usr/bin/time are not
_MACHINE_PATH = re.compile(r"(?<![\w.$~/<>-])/(?:work|tmp|home|root|Users|mnt|scratch|data|srv|opt)/[\w.-]")


def _tracked(prefix: str = "", untracked: bool = False) -> list[str]:
    """Files git tracks (with ``untracked``: also the new ones it does not ignore) under ``prefix``."""
    extra = ["--others", "--exclude-standard"] if untracked else []
    out = subprocess.run(["git", "ls-files", "-z", "--cached", *extra, *([prefix] if prefix else [])], cwd=REPO,
                         capture_output=True, check=True).stdout.decode()
    return [f for f in out.split("\0") if f]


def test_no_tracked_result_names_an_absolute_path():
    bad = []
    for f in _tracked("results"):
        try:
            if f.endswith(".xz"):  # a study's packed run folders: what their files say, too
                text = lzma.decompress((REPO / f).read_bytes()).decode("utf-8")
            else:
                text = (REPO / f).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue  # PNGs
        for n, line in enumerate(text.splitlines(), 1):
            if _MACHINE_PATH.search(line) or str(REPO) in line:
                bad.append(f"{f}:{n}: {line.strip()[:160]}")
    assert not bad, f"{len(bad)} lines name an absolute path:\n" + "\n".join(bad[:20])


def test_portable_paths_round_trip(tmp_path, monkeypatch):
    cache = tmp_path / "somewhere" / "cache"
    monkeypatch.setenv("BIPACE_CACHE", str(cache))
    entry = cache / "warmstart" / "textcraft-tiny-abc" / "final"
    assert portable_path(entry) == f"{CACHE_VAR}/warmstart/textcraft-tiny-abc/final"
    assert resolve_path(portable_path(entry)) == entry
    assert portable_path(REPO / "results" / "demo") == "results/demo"
    assert resolve_path("results/demo", base=REPO) == REPO / "results" / "demo"
    for as_is in ("tiny:layers=2", "smollm2", "configs/cpu/x.yaml", "/elsewhere/model"):
        assert portable_path(as_is) == as_is
    # another cache root: the same record names the other machine's folder
    monkeypatch.setenv("BIPACE_CACHE", str(tmp_path / "other"))
    assert resolve_path(f"{CACHE_VAR}/warmstart/x") == tmp_path / "other" / "warmstart" / "x"
    # a prefix of the cache folder's name is not the cache folder
    assert portable_path(tmp_path / "other2" / "x") == str(tmp_path / "other2" / "x")
    text = portable_text(f"{sys.executable} {REPO}/experiments/train.py sft.init_from={tmp_path}/other/warmstart/x "
                         f"out={REPO}/results/r")
    assert text == f"python -m experiments.train sft.init_from={CACHE_VAR}/warmstart/x out=results/r"


def test_config_keeps_the_warm_start_portable(tmp_path, monkeypatch):
    from trainer.config import load_config, save_config

    monkeypatch.setenv("BIPACE_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "cache" / "warmstart" / "e" / "final"
    cfg = load_config("configs/cpu/textcraft_demo.yaml", [f"sft.init_from={folder}"])
    assert cfg.sft.init_from == f"{CACHE_VAR}/warmstart/e/final"
    p = save_config(cfg, tmp_path / "config.yaml")
    assert str(tmp_path) not in p.read_text()
    assert load_config(p) == cfg


def _copy_checkout(dest: Path) -> None:
    """The tracked files of this checkout as they are now (uncommitted edits included) under ``dest``."""
    for f in _tracked(untracked=True):
        src = REPO / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)


_CACHE_ENTRY = r"""
import json, sys
from warmstart.recipe import cli_parser, config_from_args
from warmstart.recipe import cache_folder
cfg = config_from_args(cli_parser().parse_args(["--env", sys.argv[1], *sys.argv[2:]]))
print(json.dumps({"folder": str(cache_folder(cfg)), "env_kwargs": cfg.resolved_env_kwargs, "settings": cfg.key_dict(),
                  "shape": [cfg.tiny_layers, cfg.tiny_hidden, cfg.tiny_heads]}))
"""


@pytest.fixture(scope="module")
def clone_elsewhere(tmp_path_factory):
    """A copy of the repository at another path, its own cache holding stand-ins of the warm starts that the demo
    and the committed CPU study ask for."""
    root = tmp_path_factory.mktemp("another place")  # a space in the path, too
    repo, cache = root / "bipace", root / "cache"
    _copy_checkout(repo)
    env = {**child_env(), "BIPACE_CACHE": str(cache), "PYTHONPATH": str(repo)}
    from lab.study import STUDIES

    for study in ("demo", "cpu"):  # the cache entries this copy computes for them, filled with stand-ins
        s = STUDIES[study]
        out = subprocess.run([sys.executable, "-c", _CACHE_ENTRY, s.warmstart_env, *s.warmstart_args], cwd=repo,
                             env=env, check=True, capture_output=True, text=True, timeout=120).stdout
        e = json.loads(out.strip().splitlines()[-1])
        layers, hidden, heads = e["shape"]
        folder = Path(e["folder"])
        fake_warmstart(folder.parent, folder.name, e["env_kwargs"], layers, hidden, heads, settings=e["settings"])
    return repo, env


def _run(repo: Path, env: dict, cmd: str, timeout: int = 600) -> subprocess.CompletedProcess:
    args = cmd.split()
    assert args[0] == "python"
    return subprocess.run([sys.executable, *args[1:]], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_demo_and_readme_dry_runs_in_a_clone_at_another_path(clone_elsewhere):
    repo, env = clone_elsewhere
    r = _run(repo, env, "python -m experiments.study demo --dry-run")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "warm start: cached" in r.stdout and "runs/demo/runs" in r.stdout
    # the committed CPU study's finished runs, unpacked, are recognised as finished, not as another experiment
    r = _run(repo, env, "python -m experiments.study cpu --dry-run")  # packed: the plan says so and how to unpack
    assert r.returncode == 0 and "python -m analysis.pack results/cpu-study --unpack" in r.stdout, r.stdout[-3000:]
    r = _run(repo, env, "python -m analysis.pack results/cpu-study --unpack")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    r = _run(repo, env, "python -m experiments.study cpu --dry-run")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "nothing left to run" in r.stdout and "packed" not in r.stdout, r.stdout[-3000:]
    from tests.experiments.test_readme import _code_commands

    cmds = [c for c in _code_commands(repo / "README.md") if "--dry-run" in c and c.startswith("python ")]
    assert cmds
    for c in cmds:
        r = _run(repo, env, c)
        assert r.returncode == 0, f"{c}:\n{r.stdout[-2000:]}{r.stderr[-2000:]}"


@pytest.mark.slow
def test_demo_report_sets_the_users_runs_beside_the_reference(clone_elsewhere):
    """A user's demo writes to runs/demo (git-ignored) and its summary compares with results/demo; here the
    'user's' runs are the committed seed-0 ones copied over, so every row must read equal."""
    repo, env = clone_elsewhere
    for src in (repo / "results" / "demo" / "runs").glob("*/*/*/seed_0"):
        shutil.copytree(src, repo / "runs" / "demo" / "runs" / src.relative_to(repo / "results" / "demo" / "runs"))
    r = _run(repo, env, "python -m experiments.demo")  # every run finished: nothing to train, only the report
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    summary = (repo / "runs" / "demo" / "summary.md").read_text()
    assert "Your runs beside the committed reference (`results/demo`)" in summary
    table = summary.split("Your runs beside")[1]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "method" not in line]
    assert len(rows) == 4 and all(line.rstrip(" |").endswith("equal") for line in rows), table
    record = json.loads((repo / "runs" / "demo" / "study.json").read_text())
    assert record["command"] == "python -m experiments.study demo"
    assert str(repo) not in json.dumps(record) and str(env["BIPACE_CACHE"]) not in json.dumps(record)
    # the committed reference is untouched, and git ignores the user's folder
    assert subprocess.run(["git", "check-ignore", "-q", "runs/demo/summary.md"], cwd=REPO).returncode == 0
    assert os.path.getsize(repo / "results" / "demo" / "summary.md") == os.path.getsize(REPO / "results" / "demo" /
                                                                                        "summary.md")


def test_reference_table_marks_a_difference_and_skips_runs_without_a_counterpart(tmp_path):
    from analysis.report import reference_table
    from analysis.runs import Run

    def run(method, succ, final):
        metrics = [{"iteration": i, "rollout/success_rate": s} for i, s in enumerate(succ, 1)]
        evals = [{"iteration": len(succ), "eval/textcraft/eval_depth2/success_rate": final}]
        return Run("textcraft", "tiny", method, 0, tmp_path, metrics, evals, {})

    ref = [run("grpo", [0.5, 0.25], 0.5), run("gigpo", [0.5, 0.5], 0.25)]
    yours = [run("grpo", [0.5, 0.25], 0.5), run("gigpo", [0.5, 0.5, 1.0], 0.5), run("rloo", [1.0], 1.0)]
    rows = {line.split(" | ")[0].strip("| "): line for line in reference_table(yours, ref).splitlines()[2:]}
    assert set(rows) == {"grpo", "gigpo"}  # rloo has no committed counterpart
    assert rows["grpo"].endswith("| yes |") and "37.5 / 37.5" in rows["grpo"]
    # training success over the iterations both have (2), eval differs, iterations differ: not equal
    assert rows["gigpo"].endswith("| no |") and "3 / 2" in rows["gigpo"] and "50.0 / 50.0" in rows["gigpo"]
    assert "50.0 / 25.0" in rows["gigpo"]
    assert reference_table(yours, []) == ""
