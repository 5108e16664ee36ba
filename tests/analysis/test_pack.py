"""``python -m analysis.pack``: a study's run folders in one file, read in their place, written back byte for byte."""
from __future__ import annotations

import json
import lzma
import shutil
from pathlib import Path

import pytest

from analysis import compare_runs, pack
from analysis.runs import PACKED_NAME, PackedRunsError, find_runs, load_run, packed_file, read_packed
from experiments.report import main as report_main

REPO = Path(__file__).resolve().parents[2]
KEPT = ("config.yaml", "run.json", "metrics.jsonl", "eval.jsonl", "epsilon.json")


def _study(root: Path) -> Path:
    """A study folder with two runs that exercise the format: lines with other key orders (an evaluation line
    before the training lines), a key that appears late, NaN in epsilon.json, a torn last line, a run without
    eval.jsonl, a string-valued line, plus the files that are not packed (train.log, epsilon_scan.md)."""
    runs = root / "runs"
    a = runs / "textcraft" / "tiny" / "grpo" / "seed_0"
    b = runs / "textcraft" / "tiny" / "bipace_q" / "seed_1"
    for d, method, seed in ((a, "grpo", 0), (b, "bipace_q", 1)):
        d.mkdir(parents=True)
        (d / "run.json").write_text(json.dumps({"env": "textcraft", "model": "tiny", "method": method, "seed": seed,
                                                "status": "finished"}, indent=1) + "\n")
        (d / "config.yaml").write_text(f"# resolved\nestimator:\n  name: {method}\n  epsilon: auto\nseed: {seed}\n")
        (d / "train.log").write_text("progress\n")
    rows = [{"iteration": 0, "time": 1.5, "eval/textcraft/depth2/success_rate": 0.25, "perf/t": 0.1},
            {"iteration": 1, "time": 2.25, "rollout/success_rate": 0.5, "perf/t": 0.2, "group/epsilon": 1e-05},
            {"iteration": 2, "time": 3.0, "rollout/success_rate": None, "perf/t": 0.3, "group/epsilon": 1e-05,
             "rollout/task/3/success_rate": 1.0, "eval/textcraft/depth2/success_rate": 0.5}]
    (a / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (a / "eval.jsonl").write_text("".join(json.dumps({"iteration": r["iteration"], **{k: v for k, v in r.items()
                                                       if k.startswith("eval/")}}) + "\n" for r in rows[::2]))
    scan = [{"grouping": "exact anchor obs", "singleton_rate": 0.5, "f1": float("nan"), "epsilon": None},
            {"grouping": "hidden eps=1e-05", "singleton_rate": 0.25, "f1": 0.75, "epsilon": 1e-05}]
    (a / "epsilon.json").write_text(json.dumps({"iteration": 1, "rows": 8, "prompt_groups": 2, "epsilon": 1e-05,
                                                "rule": "anchor_f1", "reason": "why", "scan": scan}, indent=1) + "\n")
    (a / "epsilon_scan.md").write_text("a table\n")
    (b / "epsilon.json").write_text(json.dumps({"epsilon": 0.05}, indent=1) + "\n")  # an older record: no scan
    (b / "metrics.jsonl").write_text(json.dumps(rows[1]) + "\n" + json.dumps(rows[2]) + '\n{"iteration": 3, "ti')
    (runs / "sweep.jsonl").write_text(json.dumps({"run": "textcraft/tiny/grpo/seed_0", "exit": 0}) + "\n")
    return root


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_pack_then_unpack_gives_every_kept_file_back_byte_for_byte(tmp_path):
    study = _study(tmp_path / "study")
    out, notes = pack.pack(study)
    assert out == study / PACKED_NAME and notes == []
    assert pack.unpack(out, tmp_path / "back") == 2
    before = {k: v for k, v in _tree(study / "runs").items() if not k.endswith(("train.log", "epsilon_scan.md"))}
    after = _tree(tmp_path / "back")
    # the scan table is written again from epsilon.json (where it has what the table needs)
    scan_md = after.pop("textcraft/tiny/grpo/seed_0/epsilon_scan.md").decode()
    assert scan_md.startswith("# epsilon: auto, frozen at iteration 1: epsilon = 1e-05 (anchor_f1: why); 8 rows")
    assert "| hidden eps=1e-05 | 0.250 | 0.750 |" in scan_md
    assert after == before  # the torn line and the NaN included; train.log is not packed
    header, records = read_packed(out)
    assert header["dropped"] == ["train.log", "epsilon_scan.md"] and header["sweep"] == [
        {"run": "textcraft/tiny/grpo/seed_0", "exit": 0}]
    by_path = {r["path"]: r for r in records}
    assert sorted(by_path["textcraft/tiny/grpo/seed_0"]["metrics"]["columns"]) == sorted(
        {k for line in (study / "runs/textcraft/tiny/grpo/seed_0/metrics.jsonl").read_text().splitlines()
         for k in json.loads(line)})
    assert "metrics.jsonl" in by_path["textcraft/tiny/bipace_q/seed_1"]["text"]  # the torn file is kept as text


def test_packing_is_deterministic(tmp_path):
    study = _study(tmp_path / "study")
    first = pack.pack(study)[0].read_bytes()
    assert pack.pack(study)[0].read_bytes() == first
    assert lzma.decompress(first).startswith(b'{"format":"bipace-runs","version":1')


def test_readers_see_the_same_runs_in_the_packed_file(tmp_path):
    study = _study(tmp_path / "study")
    folders = find_runs(study / "runs")
    pack.pack(study)
    shutil.move(study / "runs", tmp_path / "moved")
    for root in (study, study / PACKED_NAME, study / "runs"):  # the study, the file, the path the folder had
        runs = find_runs(root)
        assert [(r.key, r.seed, r.path, r.metrics, r.evals, r.info) for r in runs] == [
            (r.key, r.seed, study / "runs" / r.path.relative_to(tmp_path / "moved"), r.metrics, r.evals, r.info)
            for r in find_runs(tmp_path / "moved")]
    (grpo,) = [r for r in find_runs(study) if r.method == "grpo"]
    assert grpo.read_text("config.yaml") == (tmp_path / "moved/textcraft/tiny/grpo/seed_0/config.yaml").read_text()
    assert grpo.read_json("epsilon.json")["epsilon"] == 1e-05 and grpo.read_text("train.log") is None
    assert [len(r.metrics) for r in folders] == [2, 3]  # bipace_q's torn third line skipped, in both forms
    # one run by the path its folder had (what `python -m analysis.compare_runs` reads)
    assert load_run(study / "runs/textcraft/tiny/grpo/seed_0").metrics == grpo.metrics
    assert compare_runs.main([str(study / "runs/textcraft/tiny/grpo/seed_0"),
                              str(tmp_path / "moved/textcraft/tiny/grpo/seed_0")]) == 0
    with pytest.raises(FileNotFoundError, match="no such run"):
        load_run(study / "runs/textcraft/tiny/grpo/seed_7")
    # a tree that holds the packed study below it (results/ as a whole) finds its runs once
    assert len(find_runs(tmp_path)) == 4  # the moved folders and the packed file


def test_an_unpacked_runs_folder_takes_the_packed_files_place(tmp_path):
    study = _study(tmp_path / "study")
    pack.pack(study)
    assert packed_file(study) is None and packed_file(study / "runs") is None
    assert len(find_runs(study)) == 2  # not 4: the folders, not the folders and the file


def test_bad_input_is_named_and_exits_2(tmp_path, capsys):
    assert pack.main([str(tmp_path / "nostudy")]) == 2 and "no such folder" in capsys.readouterr().err
    (tmp_path / "empty" / "runs").mkdir(parents=True)
    assert pack.main([str(tmp_path / "empty")]) == 2 and "no run folders" in capsys.readouterr().err
    assert pack.main([str(tmp_path / "empty"), "--unpack"]) == 2 and "pack the study first" in capsys.readouterr().err
    study = _study(tmp_path / "study")
    assert pack.main([str(study)]) == 0
    assert pack.main([str(study), "--unpack"]) == 2 and "already holds files" in capsys.readouterr().err
    assert pack.main([str(study), "--unpack", "--into", str(tmp_path / "fresh")]) == 0
    assert (tmp_path / "fresh/textcraft/tiny/grpo/seed_0/metrics.jsonl").is_file()
    # files the packed form does not hold are named, not silently lost
    (study / "runs/textcraft/tiny/grpo/seed_0/checkpoints").mkdir()
    (study / "runs/textcraft/tiny/grpo/seed_9").mkdir()
    _, notes = pack.pack(study)
    assert any("checkpoints: not packed" in n for n in notes) and any("seed_9: no metrics.jsonl" in n for n in notes)


@pytest.mark.parametrize("damage", ["not xz", "truncated", "other json", "bad record"])
def test_a_damaged_packed_file_is_a_clear_error(tmp_path, capsys, damage):
    study = _study(tmp_path / "study")
    out = pack.pack(study)[0]
    shutil.rmtree(study / "runs")
    data = out.read_bytes()
    if damage == "not xz":
        out.write_text("hello\n")
    elif damage == "truncated":
        out.write_bytes(data[: len(data) // 2])
    elif damage == "other json":
        out.write_bytes(lzma.compress(b'{"format": "something else"}\n'))
    else:
        text = lzma.decompress(data).decode().splitlines()
        n = next(i for i, line in enumerate(text) if '"metrics":{' in line)
        rec = json.loads(text[n])
        rec["metrics"]["lines"] = [0, 0, 0, 0, 0, 0]  # more lines than the columns hold
        text[n] = json.dumps(rec)
        out.write_bytes(lzma.compress(("\n".join(text) + "\n").encode()))
    with pytest.raises(PackedRunsError, match=str(out.name)):
        find_runs(study)
    assert report_main(["--runs", str(study / "runs"), "--out", str(tmp_path / "report")]) == 2
    assert PACKED_NAME in capsys.readouterr().err



def test_the_committed_smoke_study_packs_back_to_the_same_bytes(tmp_path):
    """Unpacking a committed packed file and packing it again reproduces it: nothing lost, nothing reordered."""
    committed = REPO / "results" / "smoke" / PACKED_NAME
    assert pack.unpack(committed, tmp_path / "smoke" / "runs") == 4
    assert pack.pack(tmp_path / "smoke")[0].read_bytes() == committed.read_bytes()


def test_packing_again_refuses_to_drop_runs_the_packed_file_holds(tmp_path, capsys):
    study = _study(tmp_path / "study")
    out = pack.pack(study)[0]
    before = out.read_bytes()
    shutil.rmtree(study / "runs/textcraft/tiny/bipace_q/seed_1")  # a run folder lost after --unpack
    assert pack.main([str(study)]) == 2
    err = capsys.readouterr().err
    assert "textcraft/tiny/bipace_q/seed_1" in err and "--force" in err and "drop" in err
    assert out.read_bytes() == before
    out.write_bytes(b"not xz")  # an unreadable packed file: which runs it holds is unknown, so it is kept too
    assert pack.main([str(study)]) == 2 and "--force" in capsys.readouterr().err
    assert pack.main([str(study), "--force"]) == 0
    assert [r["path"] for r in read_packed(out)[1]] == ["textcraft/tiny/grpo/seed_0"]


def _with_record_path(out: Path, path: str) -> None:
    text = lzma.decompress(out.read_bytes()).decode().splitlines()
    rec = json.loads(text[1])
    rec["path"] = path
    text[1] = json.dumps(rec)
    out.write_bytes(lzma.compress(("\n".join(text) + "\n").encode()))


@pytest.mark.parametrize("bad", ["../../escaped/tiny/grpo/seed_0", "/ABS/escaped/tiny/grpo/seed_0",
                                 "textcraft/../../../seed_0", "textcraft/tiny/seed_0"])
def test_unpack_accepts_only_env_model_method_seed_record_paths(tmp_path, capsys, bad):
    study = _study(tmp_path / "s" / "study")
    out = pack.pack(study)[0]
    shutil.rmtree(study / "runs")
    bad = bad.replace("/ABS", str(tmp_path))
    _with_record_path(out, bad)
    assert pack.main([str(study), "--unpack", "--into", str(tmp_path / "s" / "into")]) == 2
    assert "<env>/<model>/<method>/seed_<k>" in capsys.readouterr().err
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "s" / "escaped").exists()
    assert not list((tmp_path / "s").rglob("metrics.jsonl"))


def test_pack_refuses_a_run_folder_outside_env_model_method_seed(tmp_path, capsys):
    study = _study(tmp_path / "study")
    stray = study / "runs/textcraft/tiny/seed_3"
    stray.mkdir()
    (stray / "metrics.jsonl").write_text('{"iteration": 0}\n')
    assert pack.main([str(study)]) == 2
    assert "seed_3" in capsys.readouterr().err and not (study / PACKED_NAME).exists()


def test_the_damage_message_gives_the_fix_that_applies(tmp_path):
    study = _study(tmp_path / "study")
    out = pack.pack(study)[0]
    out.write_bytes(out.read_bytes()[:40])
    with pytest.raises(PackedRunsError, match="--force"):  # run folders on disk: pack them again
        read_packed(out)
    shutil.rmtree(study / "runs")  # a committed study: no run folders to pack from
    with pytest.raises(PackedRunsError, match="git checkout -- ") as e:
        read_packed(out)
    assert "--force" not in str(e.value)


def test_the_analysis_modules_import_only_public_names_of_each_other():
    """``analysis.pack`` reads the packed format through ``analysis.runs``' public names (``FILE_FIELDS``,
    ``file_text``, ``table_rows``, ...), as does every analysis module of another one."""
    import ast

    root = Path(__file__).resolve().parents[2] / "analysis"
    private = []
    for f in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("analysis")):
                private += [f"{f.name}: {a.name}" for a in node.names if a.name.startswith("_")]
    assert not private, private
