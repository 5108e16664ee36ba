"""``python -m experiments.train`` as a user runs it: every estimator end to end on a tiny model, config errors,
rerunning a finished run, kill -9 and resume, and a corrupt latest checkpoint.

Runs use the CPU smoke preset shrunk further (P=2, G=2, 3 steps, 16-token responses, one eval task). Most runs
call ``experiments.train.main`` in this process (same code path as the command, without paying the interpreter
and DeepSpeed start-up each time); the exit-status, rerun and kill tests start the real command.
"""
from __future__ import annotations

import json
import math
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from estimators import ESTIMATORS
from tests.experiments.helpers import child_env, run_module

REPO = Path(__file__).resolve().parents[2]
PRESET = str(REPO / "configs" / "cpu" / "textcraft_tiny.yaml")
TINY = "tiny:layers=2,hidden=64,heads=2"  # the preset's model
FAST = [
    "--config", PRESET, "env.groups=2", "env.group_size=2", "env.max_steps=3", "rollout.max_response_tokens=16",
    "trainer.iterations=2", "trainer.save_every=1", "eval.every=2", "eval.max_tasks_per_split=1",
    "env.eval_splits=[eval_depth2]", "logging.progress_bar=false", "logging.tensorboard=false",
]


def _cli(args: list[str], **kw) -> subprocess.CompletedProcess:
    return run_module("experiments.train", list(args), 600, **kw)


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _comparable(rows: list[dict]) -> list[dict]:
    """Metric lines without wall-clock values (``time`` and ``perf/...``)."""
    return [{k: v for k, v in r.items() if k != "time" and not k.startswith("perf/")} for r in rows]


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # deterministic and faster on the shared 2-core machine
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def initial_weights():
    from trainer.models import resolve_model_folder

    folder = resolve_model_folder(TINY)
    return load_file(str(folder / "model.safetensors"))


# ------------------------------------------------------------------------------------------ every estimator
@pytest.mark.parametrize("estimator", sorted(ESTIMATORS))
def test_every_estimator_end_to_end(estimator, tmp_path, initial_weights):
    from analysis.runs import find_runs
    from experiments.train import main

    root = tmp_path / "runs"
    assert main([*FAST, f"estimator.name={estimator}"], runs_root=str(root)) == 0
    run = root / "textcraft" / "tiny-layers-2-hidden-64-heads-2" / estimator / "seed_0"
    for name in ("config.yaml", "run.json", "metrics.jsonl", "eval.jsonl", "train.log", "checkpoints/latest"):
        assert (run / name).exists(), name
    info = json.loads((run / "run.json").read_text())
    assert (info["status"], info["iterations_done"], info["method"], info["env"]) == ("finished", 2, estimator,
                                                                                        "textcraft")
    assert info["git_commit"]
    metrics = _lines(run / "metrics.jsonl")
    assert [m["iteration"] for m in metrics] == [0, 1, 2]
    for m in metrics:
        for k, v in m.items():
            assert isinstance(v, (int, float)) and math.isfinite(v), (k, v)  # NaN/Inf would be written as null
    for m in metrics[1:]:
        assert m["loss/optimizer_steps"] >= 1 and m["loss/skipped_steps"] == 0
        assert {"rollout/success_rate", "adv/total_mean", "group/singleton_rate_anchor", "loss/total",
                "perf/time_update", "perf/tokens_per_s"} <= set(m)
        assert m["rollout/logprob_abs_diff"] < 1e-3  # the rollout engine samples with the actor's weights
    assert metrics[1]["group/singleton_rate_cluster"] >= 0  # hidden states reach the estimator (every method)
    evals = _lines(run / "eval.jsonl")
    assert [e["iteration"] for e in evals] == [0, 2]
    assert "eval/textcraft/eval_depth2/success_rate" in evals[0]
    assert (run / "checkpoints" / "latest").read_text().strip() == "iter_00000002"
    final = load_file(str(run / "checkpoints" / "iter_00000002" / "model" / "model.safetensors"))
    changed = [k for k in initial_weights if not torch.equal(initial_weights[k], final[k])]
    assert changed, "no parameter changed"
    assert all(bool(torch.isfinite(t).all()) for t in final.values())
    # the report's reader sees the run
    (found,) = find_runs(root)
    assert (found.env, found.method, found.seed, len(found.metrics), len(found.evals)) == ("textcraft", estimator,
                                                                                            0, 3, 2)


def test_the_no_update_control_keeps_every_weight_and_plays_the_same_goals(tmp_path, initial_weights):
    """``experiments.study --control``: lr 0 leaves the weights exactly as they were (AdamW's decoupled weight decay
    included), and the control sees the very goals and samples of a method of the same seed until that method's first
    update has changed its weights (iteration 1 here: both start from the same model)."""
    from experiments.train import main
    from lab.study import CONTROL_OVERRIDES

    root = tmp_path / "runs"
    assert main([*FAST, "estimator.name=grpo", *CONTROL_OVERRIDES], runs_root=str(root)) == 0
    assert main([*FAST, "estimator.name=grpo"], runs_root=str(root)) == 0
    base = root / "textcraft" / "tiny-layers-2-hidden-64-heads-2"
    run = base / "no-update" / "seed_0"
    final = load_file(str(run / "checkpoints" / "iter_00000002" / "model" / "model.safetensors"))
    assert all(torch.equal(initial_weights[k], final[k]) for k in initial_weights)
    ctrl, grpo = _lines(run / "metrics.jsonl"), _lines(base / "grpo" / "seed_0" / "metrics.jsonl")
    assert ctrl[1]["loss/optimizer_steps"] >= 1  # the steps are taken, at lr 0
    for k in ("rollout/success_rate", "rollout/gen_tokens", "rollout/num_rows", "rollout/reward_mean"):
        assert ctrl[1][k] == grpo[1][k], k


def test_epsilon_auto_is_chosen_at_the_first_step_frozen_and_kept_on_resume(tmp_path, monkeypatch):
    """estimator.epsilon=auto: one calibration, on iteration 1's batch; every iteration clusters with that value;
    the value and its scan are in the run folder; a resumed (extended) run keeps it without scanning again."""
    import estimators.calibrate as calibrate
    from experiments.train import main

    calls = []
    real = calibrate.choose_epsilon

    def counted(batch, *a, **k):
        calls.append(len(batch))
        return real(batch, *a, **k)

    monkeypatch.setattr(calibrate, "choose_epsilon", counted)
    out = tmp_path / "run"
    args = [*FAST, "estimator.name=bipace_q", "estimator.epsilon=auto", "eval.every=0", f"output_dir={out}"]
    assert main(args) == 0
    rec = json.loads((out / "epsilon.json").read_text())
    assert len(calls) == 1 and rec["iteration"] == 1 and rec["rows"] == calls[0]
    assert rec["rule"] in ("anchor_f1", "fallback_singleton_rate")  # the default rule, or no repeated observation
    assert rec["epsilon"] in rec["grid"] and len(rec["scan"]) == len(rec["grid"]) + 1
    assert "epsilon: auto, frozen at iteration 1" in (out / "epsilon_scan.md").read_text()
    metrics = _lines(out / "metrics.jsonl")
    assert [m["group/epsilon"] for m in metrics] == [rec["epsilon"]] * 2
    # the clusters of iteration 1 are the ones the scan reports for that epsilon
    row = next(r for r in rec["scan"][1:] if r["epsilon"] == rec["epsilon"])
    assert metrics[0]["group/num_clusters"] == row["groups"]
    assert "epsilon: auto" in (out / "config.yaml").read_text()  # the request stays in the config
    assert main([a if a != "trainer.iterations=2" else "trainer.iterations=3" for a in args]) == 0
    assert len(calls) == 1  # resumed from iteration 2: no new scan
    assert [m["group/epsilon"] for m in _lines(out / "metrics.jsonl")] == [rec["epsilon"]] * 3
    assert json.loads((out / "epsilon.json").read_text())["iteration"] == 1
    # the rules compared on the saved scan: the run's own rule picks the run's epsilon
    from experiments.epsilon_criteria import main as criteria

    table = tmp_path / "criteria.md"
    assert criteria([str(out), "--out", str(table)]) == 0
    text = table.read_text()
    line = next(ln for ln in text.splitlines() if ": textcraft tiny-layers-2-hidden-64-heads-2, seed 0 |" in ln)
    assert f"| {rec['epsilon']:.3g}: " in line and "| 0.0501: " in line
    # the F1 summary: one row per rule; the run's rule is there with its epsilon
    rule_row = next(ln for ln in text.splitlines() if ln.startswith("| anchor_f1 |"))
    assert f"| {rec['epsilon']:.3g}: " in rule_row
    # the anchor-free rule is scored from the same scan, and the setting summary pools the seeds
    assert all(r["return_loo"] == r["return_loo"] for r in rec["scan"] if "return_loo" in r)
    assert next(ln for ln in text.splitlines() if ln.startswith("| return_loo |"))
    assert "| setting | batches | oracle | exact anchors |" in text and " return_loo |" in text.split("\n\n")[1]
    # a second run of the same seed shares the first batch: one column, not two
    import shutil

    label = ": textcraft tiny-layers-2-hidden-64-heads-2, seed 0 |"
    once = text.count(label)  # its row in the table and its column in the summary
    shutil.copytree(out, tmp_path / "again")
    assert criteria([str(tmp_path), "--out", str(table)]) == 0
    assert table.read_text().count(label) == once == 2


def test_old_logprobs_from_the_rollout_train_like_the_recomputed_ones(tmp_path):
    """``trainer.old_logprobs=rollout`` skips the old pass: with BiPACE_Q (hidden states) and epsilon auto, the run
    samples the same tokens, calibrates the same epsilon and logs the same losses (float rounding) as the default
    ``recompute``; the sampler-vs-trainer check is only logged where the trainer recomputes."""
    from experiments.train import main

    runs = {}
    for source in ("recompute", "rollout"):
        out = tmp_path / source
        assert main([*FAST, "estimator.name=bipace_q", "estimator.epsilon=auto", "trainer.iterations=3",
                     "eval.every=0", f"trainer.old_logprobs={source}", f"output_dir={out}"]) == 0
        runs[source] = _comparable(_lines(out / "metrics.jsonl"))
    a, b = runs["recompute"], runs["rollout"]
    assert [r["iteration"] for r in b] == [1, 2, 3]
    assert all("rollout/logprob_abs_diff" in r for r in a) and not any("rollout/logprob_abs_diff" in r for r in b)
    for ra, rb in zip(a, b):
        for k in ("rollout/gen_tokens", "rollout/num_rows", "rollout/success_rate", "group/num_clusters",
                  "group/epsilon"):
            assert rb[k] == ra[k], (ra["iteration"], k)
        for k in ("loss/policy", "loss/kl", "loss/total", "loss/grad_norm", "adv/total_mean"):
            assert rb[k] == pytest.approx(ra[k], rel=1e-3, abs=1e-6), (ra["iteration"], k)


def test_a_training_pool_repeats_its_goals_and_resumes(tmp_path):
    """env.train_pool: the run draws only the pool's goals (each iteration both, here), the sampler state in the
    checkpoint says so, and an extended run resumes from it."""
    from experiments.train import main

    out = tmp_path / "run"
    args = [*FAST, "estimator.name=grpo", "env.train_pool=[5, 7]", "eval.every=0", f"output_dir={out}"]
    assert main(args) == 0
    assert "training pool: 2 of the" in (out / "train.log").read_text()
    state = json.loads((out / "checkpoints" / "iter_00000002" / "state.json").read_text())["sampler"]
    assert state["pool"] == [5, 7] and sorted(state["order"]) == [5, 7] and state["draws"] == 4
    # each pool goal's own success rate is logged, and the two average to the batch's (equal G per goal)
    for rec in (json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()):
        if "rollout/success_rate" not in rec:
            continue
        per = {k: v for k, v in rec.items() if k.startswith("rollout/task/")}
        assert sorted(per) == ["rollout/task/5/success_rate", "rollout/task/7/success_rate"]
        assert sum(per.values()) / 2 == pytest.approx(rec["rollout/success_rate"])
    assert main([a if a != "trainer.iterations=2" else "trainer.iterations=3" for a in args]) == 0
    state = json.loads((out / "checkpoints" / "iter_00000003" / "state.json").read_text())["sampler"]
    assert state["draws"] == 6 and state["epoch"] == 2


# ------------------------------------------------------------------------------------------- config errors
@pytest.mark.parametrize("override,needle", [
    ("trainer.lrr=1", "unknown config key 'trainer.lrr'; did you mean 'trainer.lr'"),
    ("trainer.lr=fast", "trainer.lr='fast' is not a number"),
    ("env.group_size=1", "env.group_size=1 must be >= 2"),
    ("estimator.name=ppo", "estimator"),
    ("model.path=tiny:layers=two", "model.path='tiny:layers=two'"),
    ("variant=a/b", "variant='a/b'"),
])
def test_config_errors_fail_before_any_compute(override, needle, tmp_path, capsys):
    from experiments.train import main

    with pytest.raises(SystemExit) as e:
        main([*FAST, override, f"output_dir={tmp_path / 'run'}"])
    assert e.value.code == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_config_error_exit_status_of_the_command(tmp_path):
    t = time.perf_counter()
    res = _cli([*FAST, "trainer.zero_stage=5", f"output_dir={tmp_path / 'run'}"])
    assert res.returncode == 2
    assert "trainer.zero_stage=5 must be one of [0, 1, 2, 3]" in res.stderr
    assert not (tmp_path / "run").exists()
    assert "deepspeed" not in res.stderr.lower()  # failed before the engine started
    print(f"config error in {time.perf_counter() - t:.1f} s")


def test_bad_split_and_model_folder_are_config_errors(tmp_path, capsys):
    from experiments.train import main

    assert main([*FAST, "env.eval_splits=[valid_seen]", f"output_dir={tmp_path / 'a'}"]) == 2
    assert "env.eval_splits: 'valid_seen' is not a split of TextCraft-v0" in capsys.readouterr().err
    assert json.loads((tmp_path / "a" / "run.json").read_text())["status"] == "failed"
    assert main([*FAST, f"model.path={tmp_path / 'nowhere'}", f"output_dir={tmp_path / 'b'}"]) == 2
    assert "model.path=" in capsys.readouterr().err and not (tmp_path / "b").exists()
    # a training goal beyond the split is only known once the env is built: still a config error, named
    assert main([*FAST, "env.train_pool=[3, 999]", f"output_dir={tmp_path / 'c'}"]) == 2
    err = capsys.readouterr().err
    assert "env.train_pool=[3, 999]" in err and "bad: [999]" in err


# --------------------------------------------------------------- rerun, kill -9 and resume, corrupt checkpoint
KILL_ARGS = [*FAST, "trainer.iterations=3", "eval.every=2"]  # evaluations at 0, 2, 3; a checkpoint every iteration


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    """An uninterrupted 3-iteration run through the command (checkpoint every iteration)."""
    out = tmp_path_factory.mktemp("ref") / "run"
    t = time.perf_counter()
    res = _cli([*KILL_ARGS, f"output_dir={out}"])
    assert res.returncode == 0, res.stderr[-3000:]
    print(f"reference run: {time.perf_counter() - t:.1f} s")
    return out


@pytest.mark.slow
def test_rerun_of_a_finished_run_does_nothing(reference_run):
    def stamps():  # every file of the run (the lock file records who holds the folder: not the run's)
        return {p: p.stat().st_mtime_ns for p in reference_run.rglob("*") if p.is_file() and p.name != ".lock"}

    before = stamps()
    res = _cli([*KILL_ARGS, f"output_dir={reference_run}"])
    assert res.returncode == 0
    assert "already finished" in res.stdout
    assert stamps() == before
    res = _cli([*KILL_ARGS, "estimator.name=gigpo", f"output_dir={reference_run}"])  # another experiment
    assert res.returncode == 2 and "estimator.name: 'bipace_q' -> 'gigpo'" in res.stderr
    assert stamps() == before


@pytest.mark.slow
def test_kill_9_at_a_random_point_then_resume_gives_identical_metrics(reference_run, tmp_path):
    seed = int(time.time()) % 10_000
    rng = random.Random(seed)
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "experiments.train", *KILL_ARGS, f"output_dir={out}"], cwd=REPO,
                            env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # wait for iteration 1 to be logged (its checkpoint follows), then kill somewhere in the next iterations
        deadline = time.monotonic() + 500
        while time.monotonic() < deadline:
            if (out / "metrics.jsonl").exists() and any(r["iteration"] >= 1
                                                        for r in _lines_safe(out / "metrics.jsonl")):
                break
            assert proc.poll() is None, "the run ended before it could be killed"
            time.sleep(0.05)
        # iterations 2 and 3 (longer prompts), two checkpoints and two evaluations remain: at least 2x iteration 1
        first = next(r for r in _lines_safe(out / "metrics.jsonl") if r["iteration"] == 1)
        delay = rng.uniform(0.0, 1.5 * first["perf/time_iteration"])
        time.sleep(delay)
        assert proc.poll() is None, f"the run finished before the kill (delay {delay:.2f} s, seed {seed})"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "running" and info["iterations_done"] < 3, info
    killed_at = max(r["iteration"] for r in _lines_safe(out / "metrics.jsonl"))
    res = _cli([*KILL_ARGS, f"output_dir={out}"])
    assert res.returncode == 0, res.stderr[-3000:]
    print(f"killed {delay:.2f} s after iteration 1 (last line: iteration {killed_at}; seed {seed}); {res.stdout}")
    assert json.loads((out / "run.json").read_text())["status"] == "finished"
    assert _comparable(_lines(out / "metrics.jsonl")) == _comparable(_lines(reference_run / "metrics.jsonl"))
    assert _comparable(_lines(out / "eval.jsonl")) == _comparable(_lines(reference_run / "eval.jsonl"))
    a = load_file(str(out / "checkpoints" / "iter_00000003" / "model" / "model.safetensors"))
    b = load_file(str(reference_run / "checkpoints" / "iter_00000003" / "model" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in b)


def _lines_safe(path: Path) -> list[dict]:
    out = []
    for x in path.read_text().splitlines():
        try:
            out.append(json.loads(x))
        except json.JSONDecodeError:
            pass  # the line being written
    return out


@pytest.mark.slow
def test_corrupt_latest_checkpoint_falls_back_and_extends(reference_run, tmp_path):
    from experiments.train import main

    out = tmp_path / "run"
    shutil.copytree(reference_run, out)
    weights = out / "checkpoints" / "iter_00000003" / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a torn write
    assert main([*KILL_ARGS, "trainer.iterations=4", f"output_dir={out}"]) == 0  # extend the finished run by one
    log = (out / "train.log").read_text()
    assert "iter_00000003" in log and "resumed from iter_00000002" in log
    ref = _comparable(_lines(reference_run / "metrics.jsonl"))
    got = _comparable(_lines(out / "metrics.jsonl"))
    assert [r["iteration"] for r in got] == [0, 1, 2, 3, 4]
    assert got[:3] == ref[:3]
    # iteration 3 recomputed from checkpoint 2 equals the original; it is no longer the last, so not evaluated
    assert got[3] == {k: v for k, v in ref[3].items() if not k.startswith("eval/")}
    assert [r["iteration"] for r in _lines(out / "eval.jsonl")] == [0, 2, 4]
    info = json.loads((out / "run.json").read_text())
    assert (info["status"], info["iterations_done"], info["resumed_from"]) == ("finished", 4, [2])


@pytest.mark.slow
def test_two_ranks_play_and_train_like_one_process(reference_run, tmp_path):
    """torchrun with 2 CPU ranks (gloo): each rank owns one of the P=2 groups; the rollouts equal the one-process
    run's (per-response seeds do not depend on the rank), the update equals it up to float reduction order."""
    from trainer.ppo_actor import free_port

    out = tmp_path / "run"
    env = child_env()
    env["DS_ACCELERATOR"] = "cpu"
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
                          "127.0.0.1", "--master_port", str(free_port()), "-m", "experiments.train", *KILL_ARGS,
                          "trainer.iterations=2", f"output_dir={out}"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    info = json.loads((out / "run.json").read_text())
    assert (info["status"], info["world_size"]) == ("finished", 2)
    assert (out / "train.log").exists() and (out / "train.rank1.log").exists()
    two, one = _lines(out / "metrics.jsonl"), _lines(reference_run / "metrics.jsonl")
    assert [r["iteration"] for r in two] == [0, 1, 2]  # rank 0 alone writes
    assert _comparable(two[:1]) == _comparable(one[:1])  # evaluation before training: same tasks, same weights
    for a, b in zip(two[1:], one[1:3]):
        for k in ("rollout/success_rate", "rollout/num_rows", "rollout/num_trajectories", "rollout/gen_tokens",
                  "group/rows", "loss/optimizer_steps"):
            assert a[k] == b[k], (k, a[k], b[k])
        for k in ("loss/policy", "loss/kl", "loss/entropy", "loss/total"):  # (no grad norm: stage 0, 2 ranks)
            assert abs(a[k] - b[k]) <= 1e-4 * max(1.0, abs(b[k])), (k, a[k], b[k])
    w2 = load_file(str(out / "checkpoints" / "iter_00000002" / "model" / "model.safetensors"))
    w1 = load_file(str(reference_run / "checkpoints" / "iter_00000002" / "model" / "model.safetensors"))
    assert max(float((w2[k] - w1[k]).abs().max()) for k in w1) < 1e-5


@pytest.mark.slow
def test_the_deepspeed_launcher_runs_two_cpu_ranks(tmp_path):
    """``deepspeed --num_accelerators 2 --module experiments.train ...`` (DS_ACCELERATOR=cpu): the launcher adds
    ``--local_rank=N`` to each rank's command, which the command line accepts; one iteration on 2 gloo ranks
    finishes (~30 s on the 2-core machine). ``deepspeed.launcher.runner`` is what the ``deepspeed`` script runs."""
    from trainer.ppo_actor import free_port

    out = tmp_path / "run"
    env = child_env()
    env["DS_ACCELERATOR"] = "cpu"
    res = subprocess.run([sys.executable, "-m", "deepspeed.launcher.runner", "--num_accelerators", "2",
                          "--master_addr", "127.0.0.1", "--master_port", str(free_port()), "--module",
                          "experiments.train", *FAST, "trainer.iterations=1", "eval.every=0", "eval.at_start=false",
                          f"output_dir={out}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    assert "--local_rank=1" in res.stdout + res.stderr  # the launcher did pass it
    info = json.loads((out / "run.json").read_text())
    assert (info["status"], info["iterations_done"], info["world_size"]) == ("finished", 1, 2)
    assert (out / "train.rank1.log").exists()


def test_warm_started_folder_as_model_path_or_init_from(tmp_path, initial_weights):
    """A plain Hugging Face folder (what the SFT warm start writes) is a model: as ``model.path`` (its folder name
    names the run) or as ``sft.init_from`` (weights and KL reference from it, the run keeps model.path's name).
    With lr = 0 the final checkpoint holds exactly the starting weights."""
    from safetensors.torch import save_file

    from experiments.train import main
    from trainer.models import resolve_model_folder

    warm = tmp_path / "warm-start"
    shutil.copytree(resolve_model_folder(TINY), warm)
    g = torch.Generator().manual_seed(0)
    perturbed = {k: v + 0.01 * torch.randn(v.shape, generator=g) for k, v in initial_weights.items()}
    save_file(perturbed, str(warm / "model.safetensors"), metadata={"format": "pt"})
    args = [*FAST, "trainer.iterations=1", "trainer.lr=0", "eval.every=0"]
    root = tmp_path / "runs"
    assert main([*args, f"model.path={warm}"], runs_root=str(root)) == 0
    assert main([*args, f"sft.init_from={warm}"], runs_root=str(root)) == 0
    for model_name in ("warm-start", "tiny-layers-2-hidden-64-heads-2"):
        ckpt = root / "textcraft" / model_name / "bipace_q" / "seed_0" / "checkpoints" / "iter_00000001"
        final = load_file(str(ckpt / "model" / "model.safetensors"))
        assert all(torch.equal(final[k], perturbed[k]) for k in perturbed), model_name


def test_an_epsilon_rule_that_cannot_decide_stops_the_run_with_its_name(tmp_path, monkeypatch, capsys):
    """epsilon_criterion=state_f1 (the oracle) on a batch where no two rows of a prompt group share a true state has
    no F1 to maximise: the run stops at its first batch with a message naming the rule, not with a traceback."""
    import estimators.calibrate as calibrate
    from experiments.train import main

    real = calibrate.scan_epsilon

    def no_shared_state(batch, *a, **k):  # every row its own state: no same-state pair, no F1
        rows = real(batch, *a, **k)
        return [{**r, "f1": float("nan")} for r in rows]

    monkeypatch.setattr(calibrate, "scan_epsilon", no_shared_state)
    out = tmp_path / "run"
    rc = main([*FAST, "estimator.name=bipace_q", "estimator.epsilon=auto", "estimator.epsilon_criterion=state_f1",
               "eval.every=0", f"output_dir={out}"])
    assert rc != 0
    err = capsys.readouterr()
    assert "epsilon_criterion=state_f1" in err.out + err.err and "true states" in err.out + err.err
    assert not (out / "epsilon.json").exists()


def _signal_after_iteration_1(args: list[str], out, sig, preexec_fn=None) -> tuple[int, str]:
    """Start ``experiments.train`` with ``args`` (200 iterations), send ``sig`` once iteration 1 is logged; (exit
    status, stderr)."""
    long = [a if a != "trainer.iterations=2" else "trainer.iterations=200" for a in args]
    proc = subprocess.Popen([sys.executable, "-m", "experiments.train", *long], cwd=REPO, env=child_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=preexec_fn)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if (out / "metrics.jsonl").exists() and any(r["iteration"] >= 1
                                                        for r in _lines_safe(out / "metrics.jsonl")):
                break
            time.sleep(0.1)
        assert proc.poll() is None, "the run ended before iteration 1 was logged"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, err


@pytest.mark.slow
def test_sigint_stops_a_run_started_with_sigint_ignored(tmp_path):
    """A run started in the background by a script (``cmd &``) inherits SIGINT ignored; the sweep's Ctrl-C and a
    Slurm preemption stop runs with SIGINT, so the run restores the handler and exits 130 at its checkpoint."""
    out = tmp_path / "run"
    rc, err = _signal_after_iteration_1([*FAST, f"output_dir={out}"], out, signal.SIGINT,
                                        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert rc == 130, err[-2000:]
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "interrupted" and info["iterations_done"] < 200, info


@pytest.mark.slow
def test_sigterm_stops_a_run_at_its_checkpoint_and_the_same_command_resumes_it(tmp_path):
    """scancel, a cluster's preemption and ``timeout`` send SIGTERM: the run stops as on Ctrl-C (marked
    ``interrupted``, exit 143, checkpoint kept; before, SIGTERM killed it with run.json still 'running'), and the same
    command resumes it to the end."""
    out = tmp_path / "run"
    args = [*FAST, "trainer.save_every=1", f"output_dir={out}"]
    rc, err = _signal_after_iteration_1(args, out, signal.SIGTERM)
    assert rc == 143, err[-2000:]
    assert "terminated (SIGTERM)" in err and "rerun the same command" in err
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "interrupted" and info["iterations_done"] < 200, info
    from experiments.train import main

    assert main([*args, "trainer.iterations=3"]) == 0  # the resume goes on from the checkpoint to the end
    assert json.loads((out / "run.json").read_text())["status"] == "finished"


def test_a_second_sigterm_is_ignored_while_the_run_stops():
    """Slurm signals every process of a job and the sweep's job passes SIGTERM on: the first stops the run, a second
    one must not interrupt it while it marks its folder."""
    from experiments.train import Terminated, _on_sigterm

    old = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, _on_sigterm)
        with pytest.raises(Terminated):
            _on_sigterm(signal.SIGTERM, None)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, old)


def test_epsilon_criteria_collect_lists_its_collections_and_refuses_an_empty_report(tmp_path, capsys):
    from experiments.epsilon_criteria import BATCHES, main

    assert main(["--collect", str(tmp_path), "--dry-run", "--skip", "webshop_smollm2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 + len(BATCHES) - 1 and all(ln.startswith("to do: ") for ln in lines)
    assert any("llm-gt-oversplit" in ln and "trainer.iterations=1" in ln for ln in lines)
    assert main(["--collect", str(tmp_path), "--report-only", "--out", str(tmp_path / "t.md")]) == 2
    assert "nothing collected" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--dry-run"])  # a collection option without --collect


def test_grouping_scan_logs_every_iteration_and_agrees_with_the_run_metrics(tmp_path):
    """logging.grouping_scan: one line per iteration with the anchors and every epsilon of AUTO_GRID; the row of the
    run's own epsilon is the grouping the estimator used (same cluster count and singleton rate as metrics.jsonl)."""
    from estimators.calibrate import AUTO_GRID
    from experiments.train import main

    out = tmp_path / "run"
    assert main([*FAST, "estimator.name=bigpo", "estimator.epsilon=0.001", "eval.every=0",
                 "logging.grouping_scan=true", f"output_dir={out}"]) == 0
    lines = _lines(out / "grouping_scan.jsonl")
    metrics = _lines(out / "metrics.jsonl")
    assert [ln["iteration"] for ln in lines] == [1, 2]
    for ln, m in zip(lines, metrics):
        scan = ln["scan"]
        assert scan[0]["epsilon"] is None and [r["epsilon"] for r in scan[1:]] == list(AUTO_GRID)
        assert ln["rows"] == m["group/rows"] and scan[0]["groups"] == m["group/num_anchor_groups"]
        row = next(r for r in scan[1:] if r["epsilon"] == 0.001)
        assert row["groups"] == m["group/num_clusters"]
        assert row["singleton_rate"] == pytest.approx(m["group/singleton_rate_cluster"])
        assert "return_loo" in row and "precision" in row  # TextCraft gives state_key
        assert m["perf/time_grouping_scan"] > 0
    # a restart starts the file over and keeps the old one with the run's other logs
    assert main([*FAST, "estimator.name=bigpo", "estimator.epsilon=0.001", "eval.every=0",
                 "logging.grouping_scan=true", "trainer.resume=false", f"output_dir={out}"]) == 0
    assert [ln["iteration"] for ln in _lines(out / "grouping_scan.jsonl")] == [1, 2]
    assert [len(_lines(f)) for f in out.glob("restarted_*/grouping_scan.jsonl")] == [2]
    # off by default: no file, no timer
    out2 = tmp_path / "plain"
    assert main([*FAST, "estimator.name=grpo", "eval.every=0", f"output_dir={out2}"]) == 0
    assert not (out2 / "grouping_scan.jsonl").exists()
    assert "perf/time_grouping_scan" not in _lines(out2 / "metrics.jsonl")[0]
