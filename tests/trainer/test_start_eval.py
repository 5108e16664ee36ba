"""``eval.share_start``: the iteration-0 evaluation of one run reused by a later run from the same start."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import trainer.run_folder as run_folder
import trainer.start_eval as start_eval
from trainer.config import load_config
from trainer.run_folder import RunFolder

REPO = Path(__file__).resolve().parents[2]
PRESET = REPO / "configs" / "cpu" / "textcraft_tiny.yaml"
SMALL = ["env.groups=2", "env.group_size=2", "env.max_steps=3", "env.num_workers=0", "rollout.max_response_tokens=8",
         "trainer.iterations=1", "eval.every=1", "eval.max_tasks_per_split=3", "logging.progress_bar=false",
         "logging.tensorboard=false"]


@pytest.fixture
def store(tmp_path, monkeypatch):
    folder = tmp_path / "start_evals"
    folder.mkdir()
    monkeypatch.setattr(start_eval, "_folder", lambda: folder)
    monkeypatch.setattr(run_folder, "git_commit", lambda repo=None: ("c0ffee" * 6 + "abcd", False))
    return folder


def _model(tmp_path: Path, byte: bytes = b"\0") -> Path:
    d = tmp_path / "model"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_bytes(byte * 64)
    return d


def test_the_key_ignores_what_only_training_reads_and_follows_what_evaluation_reads(tmp_path, store):
    model = _model(tmp_path)
    key = start_eval.start_eval_key(load_config(PRESET), 1, model)[0]
    same = ["seed=7", "estimator.name=grpo", "trainer.lr=3e-5", "trainer.iterations=9", "eval.every=3",
            "logging.wandb=true", "experiment=other", "output_dir=elsewhere"]
    for o in same:
        assert start_eval.start_eval_key(load_config(PRESET, [o]), 1, model)[0] == key, o
    for o in ["eval.temperature=0.9", "eval.seed=1", "eval.max_tasks_per_split=5", "rollout.max_response_tokens=9",
              "env.max_steps=7", "env.groups=4"]:
        assert start_eval.start_eval_key(load_config(PRESET, [o]), 1, model)[0] != key, o
    assert start_eval.start_eval_key(load_config(PRESET), 2, model)[0] != key  # each rank evaluates its share
    (model / "model.safetensors").write_bytes(b"\1" * 64)  # other weights (same size and name)
    assert start_eval.start_eval_key(load_config(PRESET), 1, model)[0] != key


def test_uncommitted_code_shares_nothing(tmp_path, monkeypatch, store):
    monkeypatch.setattr(run_folder, "git_commit", lambda repo=None: ("c0ffee" * 6 + "abcd", True))
    assert start_eval.start_eval_key(load_config(PRESET), 1, _model(tmp_path))[0] is None


def test_a_damaged_or_foreign_record_is_ignored_with_a_warning(store, caplog):
    start_eval.store_start_eval("k1", {}, {"eval/textcraft/d2/success_rate": 0.5, "perf/x": 1.0}, "run")
    assert start_eval.load_start_eval("k1") == {"eval/textcraft/d2/success_rate": 0.5}
    (store / "k2.json").write_text("{not json")
    (store / "k3.json").write_text(json.dumps({"key": "k1", "metrics": {"eval/a": 1.0}}))  # another key's
    (store / "k4.json").write_text(json.dumps({"key": "k4", "metrics": {"eval/a": "nan"}}))
    with caplog.at_level("WARNING"):
        assert [start_eval.load_start_eval(k) for k in ("k2", "k3", "k4", "absent")] == [None] * 4
    assert sum("ignoring the shared iteration-0 evaluation" in r.message for r in caplog.records) == 3


def _run(tmp_path: Path, name: str, overrides: list[str]) -> list[dict]:
    from trainer.loop import Trainer

    cfg = load_config(PRESET, SMALL + overrides + [f"output_dir={tmp_path / name}"])
    with Trainer(cfg, RunFolder(cfg)) as t:
        t.run()
    return [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]


def test_a_later_run_from_the_same_start_logs_the_shared_evaluation_which_equals_its_own(tmp_path, store):
    """Run A (seed 0, BiPACE-Q) evaluates its start and stores it; run B (seed 1, GRPO) logs A's values as its
    iteration 0 without evaluating; run C, B's config without sharing, measures exactly those values itself."""
    torch.set_num_threads(1)
    a = _run(tmp_path, "a", ["eval.share_start=true"])
    assert len(list(store.glob("*.json"))) == 2  # the record and the weights' digest memo
    b = _run(tmp_path, "b", ["eval.share_start=true", "seed=1", "estimator.name=grpo"])
    c = _run(tmp_path, "c", ["seed=1", "estimator.name=grpo"])
    ev = [{k: v for k, v in r[0].items() if k.startswith("eval/")} for r in (a, b, c)]
    assert ev[0] and ev[0] == ev[1] == ev[2]
    assert b[0]["perf/eval_shared"] == 1.0 and "perf/eval_shared" not in a[0] and "perf/eval_shared" not in c[0]
    assert b[0]["perf/time_eval"] < a[0]["perf/time_eval"]
    assert (tmp_path / "b" / "eval.jsonl").read_text().count('"iteration": 0') == 1


@pytest.mark.slow
def test_two_ranks_skip_or_run_the_start_evaluation_together(tmp_path):
    """2 gloo ranks (torchrun): run A evaluates its start and stores it; run B (another seed and estimator) takes it
    on both ranks, rank 0 having told rank 1 (were the ranks to disagree, one would wait in the evaluation's
    reduction until the timeout), and logs A's values as its iteration 0."""
    import os
    import subprocess
    import sys

    from trainer.ppo_actor import free_port

    folder = tmp_path / "start_evals"
    folder.mkdir()
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    rows = {}
    for name, extra in (("a", []), ("b", ["seed=1", "estimator.name=grpo"])):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
               "--master_port", str(free_port()), str(Path(__file__).with_name("dist_share_worker.py")), str(folder),
               "--config", str(PRESET), *SMALL, "eval.share_start=true", "trainer.collective_timeout_min=3",
               *extra, f"output_dir={tmp_path / name}"]
        p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        rows[name] = [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    ev = [{k: v for k, v in rows[n][0].items() if k.startswith("eval/")} for n in "ab"]
    assert ev[0] and ev[0] == ev[1]
    assert rows["b"][0]["perf/eval_shared"] == 1.0 and "perf/eval_shared" not in rows["a"][0]
    assert len(rows["b"]) == 2  # and iteration 1 trained on both ranks after it
