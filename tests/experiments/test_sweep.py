"""``python -m experiments.sweep``: expansion, variant names, skipping finished runs, config errors, and a real
two-run sweep on the tiny smoke preset (with an interruption and a resume)."""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab import sweep
from tests.experiments.helpers import child_env, run_module
from trainer.config import load_config, save_config

REPO = Path(__file__).resolve().parents[2]
SMOKE = "configs/cpu/textcraft_tiny.yaml"
TINY = "tiny-layers-2-hidden-64-heads-2"
FAST = ["env.groups=2", "env.group_size=2", "env.max_steps=3", "rollout.max_response_tokens=16",
        "trainer.iterations=2", "trainer.save_every=1", "eval.every=2", "eval.max_tasks_per_split=1",
        "env.eval_splits=[eval_depth2]", "logging.tensorboard=false"]


def _sweep(args: list[str], **kw) -> subprocess.CompletedProcess:
    return run_module("experiments.sweep", list(args), 900, **kw)


# ------------------------------------------------------------------------------------------------ expansion
def test_variant_names():
    assert sweep.variant_name("bipace_q", [("estimator.epsilon", "0.10")]) == "bipace_q_eps0.10"
    assert sweep.variant_name("bigpo", [("model.hidden_layer", "-8")]) == "bigpo_layer-8"
    assert sweep.variant_name("bipace_v", [("estimator.pace_key", "first_tokens")]) == "bipace_v_key-first_tokens"
    assert sweep.variant_name("bipace_q", [("estimator.pace_fallback", "none"), ("estimator.epsilon", "0.05")]) == \
        "bipace_q_fallback-none_eps0.05"
    assert sweep.variant_name("grpo", [("trainer.lr", "1e-5")]) == "grpo_lr1e-5"
    assert sweep.variant_name("gigpo", [("env.max_steps", "20")]) == "gigpo_max_steps20"  # unknown key: last part
    assert sweep.variant_name("gigpo", [("env.eval_splits", "[eval_depth2,eval_depth3]")]) == \
        "gigpo_eval_splits-eval_depth2-eval_depth3"


def test_parse_grid_and_its_errors():
    assert sweep.parse_grid(["estimator.epsilon=0.05,0.1", "env.eval_splits=[a,b],[c]"]) == \
        [("estimator.epsilon", ["0.05", "0.1"]), ("env.eval_splits", ["[a,b]", "[c]"])]
    for bad, needle in [("estimator.epsilon", "key=v1,v2"), ("seed=1,2", "--seeds"),
                        ("estimator.name=grpo", "--estimators"),
                        ("x=", "at least one value")]:
        with pytest.raises(sweep.SweepError, match=needle):
            sweep.parse_grid([bad])
    with pytest.raises(sweep.SweepError, match="given twice"):
        sweep.parse_grid(["estimator.epsilon=0.1", "estimator.epsilon=0.2"])


def test_expansion_order_overrides_and_folders(tmp_path):
    specs = sweep.expand([SMOKE], ["grpo", "bipace_q"], [0, 1], sweep.parse_grid(["estimator.epsilon=0.05,0.10"]),
                         ["trainer.iterations=3"], tmp_path / "runs")
    assert len(specs) == 8
    # seed outermost, then grid point, then estimator
    assert [(s.seed, s.method) for s in specs[:4]] == [(0, "grpo_eps0.05"), (0, "bipace_q_eps0.05"),
                                                       (0, "grpo_eps0.10"), (0, "bipace_q_eps0.10")]
    s = specs[3]
    assert s.run_dir == tmp_path / "runs" / "textcraft" / TINY / "bipace_q_eps0.10" / "seed_0"
    assert s.overrides == ["trainer.iterations=3", "estimator.name=bipace_q", "estimator.epsilon=0.10", "seed=0",
                           "variant=bipace_q_eps0.10", f"output_dir={s.run_dir}"]
    cfg = load_config(SMOKE, s.overrides)  # the command's overrides give the same run
    assert (cfg.estimator.name, cfg.estimator.epsilon, cfg.seed, cfg.variant, cfg.trainer.iterations) == \
        ("bipace_q", 0.10, 0, "bipace_q_eps0.10", 3)
    assert s.command(["python", "-m"])[:5] == ["python", "-m", "experiments.train", "--config", SMOKE]
    # the default root adds no output_dir (the command is what a user would type)
    (d,) = sweep.expand([SMOKE], ["gigpo"], [2], (), (), sweep.DEFAULT_RUNS_ROOT)
    assert d.overrides == ["estimator.name=gigpo", "seed=2"]
    assert d.run_dir == Path("results/runs/textcraft") / TINY / "gigpo" / "seed_2"
    # no --estimators: the preset's
    (p,) = sweep.expand([SMOKE], None, [0], (), (), tmp_path)
    assert p.estimator == "bipace_q" and "estimator.name=" not in " ".join(p.overrides)


def test_expansion_errors_name_the_run(tmp_path):
    with pytest.raises(sweep.SweepError, match=r"run \[.*estimator.name=ppo seed=0\]: config error"):
        sweep.expand([SMOKE], ["ppo"], [0], (), (), tmp_path)
    with pytest.raises(sweep.SweepError, match="estimator.epsilon=7"):
        sweep.expand([SMOKE], ["bipace_q"], [0], sweep.parse_grid(["estimator.epsilon=0.1,7"]), (), tmp_path)
    with pytest.raises(sweep.SweepError, match="does not exist"):
        sweep.expand(["configs/cpu/nope.yaml"], ["grpo"], [0], (), (), tmp_path)
    with pytest.raises(sweep.SweepError, match="share the folder"):  # the same grid value twice
        sweep.expand([SMOKE], ["grpo"], [0], [("estimator.epsilon", ["0.1", "0.1"])], (), tmp_path)
    with pytest.raises(sweep.SweepError, match="not a seed"):
        sweep._seeds("0,x")


# -------------------------------------------------------------------------------------- plan: skip / resume
def _fixture_run(spec: sweep.RunSpec, status: str, done: int, config_overrides=()) -> None:
    """A run folder as experiments.train leaves it (config.yaml + run.json), without running anything."""
    cfg = load_config(spec.config, [*spec.overrides, *config_overrides])
    spec.run_dir.mkdir(parents=True)
    save_config(cfg, spec.run_dir / "config.yaml")
    (spec.run_dir / "run.json").write_text(json.dumps({"status": status, "iterations_done": done,
                                                       "iterations_total": cfg.trainer.iterations}))


def test_plan_skips_finished_runs_and_resumes_the_others(tmp_path):
    root = tmp_path / "runs"
    specs = sweep.expand([SMOKE], ["grpo", "gigpo", "bipace_q", "rloo"], [0], (), FAST, root)
    _fixture_run(specs[0], "finished", 2)
    _fixture_run(specs[1], "running", 1)          # killed: resumes
    _fixture_run(specs[2], "finished", 1)          # finished a shorter run: extended, i.e. resumed
    sweep.plan(specs)
    assert [s.status for s in specs] == ["finished", "resume", "resume", "new"]
    assert [s.iterations_done for s in specs] == [2, 1, 1, 0]  # what the study's time estimate counts from
    # the dry run says so, and shows the commands of the runs to do only
    res = _sweep(["--config", SMOKE, "--estimators", "grpo,gigpo,bipace_q,rloo", "--runs-root", str(root),
                  "--dry-run", *FAST])
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert out.splitlines()[0] == "# 4 runs: 1 finished (skipped), 2 to resume, 1 new"
    assert f"# skip (finished, 2 iterations): {specs[0].run_dir}" in out
    assert f"# resume (running, 1/2 saved): {specs[1].run_dir}" in out
    assert f"# new: {specs[3].run_dir}" in out
    cmds = [shlex.split(x) for x in out.splitlines() if not x.startswith("#")]
    assert [c[c.index("experiments.train") + 1:][-3] for c in cmds] == \
        ["estimator.name=gigpo", "estimator.name=bipace_q", "estimator.name=rloo"]
    assert all(c[1:3] == ["-m", "experiments.train"] for c in cmds)



def test_a_sweep_of_finished_runs_starts_nothing(tmp_path, capsys):
    root = tmp_path / "runs"
    (spec,) = sweep.expand([SMOKE], ["grpo"], [0], (), FAST, root)
    _fixture_run(spec, "finished", 2)
    assert sweep.main(["--config", SMOKE, "--estimators", "grpo", "--runs-root", str(root), *FAST]) == 0
    assert "1 already finished, 0 to run" in capsys.readouterr().out
    assert not (spec.run_dir / "console.log").exists() and not (root / "sweep.jsonl").exists()


def test_a_folder_holding_another_experiment_is_an_error_before_anything_runs(tmp_path, capsys):
    root = tmp_path / "runs"
    (spec,) = sweep.expand([SMOKE], ["grpo"], [0], (), FAST, root)
    _fixture_run(spec, "finished", 2, ["trainer.lr=0.5"])
    assert sweep.main(["--config", SMOKE, "--estimators", "grpo", "--runs-root", str(root), *FAST]) == 2
    err = capsys.readouterr().err
    assert "hold a different experiment" in err and "trainer.lr: 0.5 -> 0.0001" in err


@pytest.mark.parametrize("args,needle", [
    (["--estimators", "grpo,ppo"], "'ppo' is not a registered estimator"),
    (["--estimators", "grpo", "trainer.lrr=1"], "unknown config key 'trainer.lrr'"),
    (["--estimators", "grpo", "--jobs", "0"], "--jobs 0 must be >= 1"),
    (["--estimators", "grpo", "--seeds", "a"], "'a' is not a seed"),
    (["--estimators", "grpo", "--nproc", "2", "--launcher", "x -m"], "not both"),
    (["--estimators", "grpo", "configs/cpu/textcraft_tiny.yaml"], "did you mean --config"),
])
def test_command_line_errors_exit_2(args, needle, tmp_path, capsys):
    assert sweep.main(["--config", SMOKE, "--runs-root", str(tmp_path), *args]) == 2
    assert needle in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_launchers():
    class A:
        launcher, nproc = None, None
    a = A()
    assert sweep.launcher_from_args(a) == [sys.executable, "-m"]
    a.nproc = 4
    assert sweep.launcher_from_args(a) == [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                           "--nproc_per_node=4", "-m"]
    a.nproc, a.launcher = None, "deepspeed --hostfile h --module"
    assert sweep.launcher_from_args(a) == ["deepspeed", "--hostfile", "h", "--module"]
    env = sweep._child_env(1, 2, 2, ["0", "1", "2", "3"])
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    if "OMP_NUM_THREADS" not in os.environ:
        assert env["OMP_NUM_THREADS"] == str(max(1, (os.cpu_count() or 1) // 2))


def test_a_deepspeed_launcher_prefix_makes_the_documented_command(tmp_path, capsys):
    """``--launcher 'deepspeed --hostfile h --module'``: each run is ``deepspeed --hostfile h --module
    experiments.train --config <preset> <overrides>`` (the launcher adds ``--local_rank=N``, which
    ``experiments.train`` accepts)."""
    root = tmp_path / "runs"
    assert sweep.main(["--config", SMOKE, "--estimators", "grpo", "--runs-root", str(root), "--launcher",
                       "deepspeed --hostfile h --module", "--dry-run", *FAST]) == 0
    (cmd,) = [shlex.split(x) for x in capsys.readouterr().out.splitlines() if not x.startswith("#")]
    assert cmd[:7] == ["deepspeed", "--hostfile", "h", "--module", "experiments.train", "--config", SMOKE]
    assert "estimator.name=grpo" in cmd and f"output_dir={root / 'textcraft' / TINY / 'grpo' / 'seed_0'}" in cmd


@pytest.mark.parametrize("record,rc,word", [
    ("finished", 130, "finished"),       # the signal came after the run had written that it finished
    ("finished", 1, "finished"),         # broke while closing its logs, after the run finished
    ("interrupted", 130, "interrupted"),
    ("running", 1, "failed"),
    ("finished-short", 130, "interrupted"),  # "finished" a shorter run: not this one
])
def test_a_runs_exit_status_is_read_with_its_own_record(tmp_path, record, rc, word):
    """A run counts as finished when its ``run.json`` says it finished every iteration, whatever its exit status
    (CI once saw a run write "finished" and exit 130 from a Ctrl-C that reached it while it closed its logs)."""
    root = tmp_path / "runs"
    (spec,) = sweep.expand([SMOKE], ["grpo"], [0], (), FAST, root)
    status, done = ("finished", 1) if record == "finished-short" else (record, spec.iterations)
    child = (f"import json, pathlib, sys; d = pathlib.Path({str(spec.run_dir)!r}); d.mkdir(parents=True, "
             f"exist_ok=True); (d / 'run.json').write_text(json.dumps({{'status': {status!r}, "
             f"'iterations_done': {done}}})); sys.exit({rc})")
    summary = sweep.run_sweep([spec], launcher=[sys.executable, "-c", child], runs_root=root, progress=False,
                              say=lambda *_: None)
    assert {k: summary[k] for k in ("finished", "interrupted", "failed")} == \
        {k: [spec.label] if k == word else [] for k in ("finished", "interrupted", "failed")}
    (t,) = [json.loads(x) for x in (root / "sweep.jsonl").read_text().splitlines()]
    assert t["exit"] == rc  # the record keeps the true exit status


def test_progress_off_a_terminal_is_plain_lines(tmp_path, monkeypatch, capfd):
    """stderr not a terminal (nohup, Slurm): no carriage-return frames, a plain progress line every
    ``PLAIN_PROGRESS_S`` (0 here: at every poll) naming the runs and their iterations."""
    root = tmp_path / "runs"
    (spec,) = sweep.expand([SMOKE], ["grpo"], [0], (), FAST, root)
    child = (f"import json, pathlib, time; d = pathlib.Path({str(spec.run_dir)!r}); d.mkdir(parents=True, "
             "exist_ok=True); time.sleep(1.2); (d / 'run.json').write_text(json.dumps({'status': 'finished', "
             f"'iterations_done': {spec.iterations}}}))")
    monkeypatch.setattr(sweep, "PLAIN_PROGRESS_S", 0.0)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    summary = sweep.run_sweep([spec], launcher=[sys.executable, "-c", child], runs_root=root, progress=True,
                              say=lambda *_: None)
    assert summary["finished"] == [spec.label]
    err = capfd.readouterr().err
    assert "\r" not in err and f"[sweep] 0/{spec.iterations} iterations; running: grpo/s0 0/{spec.iterations}" in err


def test_console_logs_hold_no_progress_bar_frames(tmp_path, capfd):
    """A run's console.log: with ``--tee`` the sweep's output gets the child's bars (settled lines where it is not a
    terminal, ``common.fsio.ConsoleCopy``) and the log their last frames; without, the child is asked for no
    Hub/transformers bars (``HF_HUB_DISABLE_PROGRESS_BARS``) since it writes the log."""
    root = tmp_path / "runs"
    (spec,) = sweep.expand([SMOKE], ["grpo"], [0], (), FAST, root)
    child = (f"import json, os, pathlib, sys; d = pathlib.Path({str(spec.run_dir)!r}); d.mkdir(parents=True, "
             "exist_ok=True); sys.stdout.write('\\rLoading 0%\\rLoading 100%\\nbars off: ' + "
             "os.environ.get('HF_HUB_DISABLE_PROGRESS_BARS', '-') + '\\n'); (d / 'run.json').write_text("
             f"json.dumps({{'status': 'finished', 'iterations_done': {spec.iterations}}}))")
    for tee, flag in ((True, "-"), (False, "1")):
        (spec.run_dir / "console.log").unlink(missing_ok=True)
        summary = sweep.run_sweep([spec], launcher=[sys.executable, "-c", child], runs_root=root, progress=False,
                                  tee=tee, say=lambda *_: None)
        assert summary["finished"] == [spec.label], summary
        log = (spec.run_dir / "console.log").read_text()
        assert "\r" not in log and f"Loading 100%\nbars off: {flag}\n" in log, (tee, log)
        (spec.run_dir / "run.json").unlink()
    out = capfd.readouterr().out  # captured: not a terminal, so the teed copy is settled too
    assert "\r" not in out and "Loading 100%\nbars off: -\n" in out


# ------------------------------------------------------------------------------------------- a real sweep
@pytest.mark.slow
def test_two_runs_two_at_a_time_then_interrupt_and_resume(tmp_path):
    """Two tiny runs, 2 jobs: both finish, each with its log and timing; a rerun skips both. Then a third run
    (iterations raised to 3 for one of them) is interrupted with SIGINT and resumed by the same command."""
    from analysis.runs import find_runs

    root = tmp_path / "runs"
    # extending a finished run below needs its optimizer state, which a sweep drops by default at a run's end
    args = ["--config", SMOKE, "--estimators", "grpo,bipace_q", "--seeds", "0", "--runs-root", str(root),
            "--jobs", "2", "--no-progress", "--keep-optimizer", *FAST]
    t = time.perf_counter()
    res = _sweep(args)
    assert res.returncode == 0, res.stdout + res.stderr
    print(f"two tiny runs, 2 at a time: {time.perf_counter() - t:.0f} s")
    runs = find_runs(root)
    assert [(r.method, r.seed, r.info["status"], len(r.metrics)) for r in runs] == \
        [("bipace_q", 0, "finished", 3), ("grpo", 0, "finished", 3)]
    for r in runs:
        assert "finished 2 iterations" in (r.path / "console.log").read_text()
    timings = [json.loads(x) for x in (root / "sweep.jsonl").read_text().splitlines()]
    assert sorted(t["run"].split("/")[2] for t in timings) == ["bipace_q", "grpo"]
    assert all(t["exit"] == 0 and t["cpu_s"] > 0 and t["wall_s"] > 0 and t["omp_threads"] == "1" for t in timings)
    # rerun: nothing to do
    res = _sweep(args)
    assert res.returncode == 0 and "2 already finished, 0 to run" in res.stdout

    # extend grpo to 4 iterations, interrupt it during training, resume
    ext = ["--config", SMOKE, "--estimators", "grpo", "--seeds", "0", "--runs-root", str(root), "--no-progress",
           *FAST[:4], "trainer.iterations=4", *FAST[5:]]
    proc = subprocess.Popen([sys.executable, "-m", "experiments.sweep", *ext], cwd=REPO, env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    run_dir = root / "textcraft" / TINY / "grpo" / "seed_0"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if "resumed from iter_00000002" in (run_dir / "train.log").read_text():
            break
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode in (130, 0), out  # 0 if it finished before the signal arrived
    print(f"interrupted sweep exit status {proc.returncode}")
    info = json.loads((run_dir / "run.json").read_text())
    if proc.returncode == 130:
        # the run's own record and the sweep's word for it agree, even when the signal came after the run had
        # finished (CI once saw that race: the run wrote "finished", then exited 130 while closing its logs)
        assert "interrupted: rerun the same command" in out
        if info["status"] == "finished":
            assert "[sweep] finished" in out and "interrupted (exit" not in out, out
        else:
            assert info["status"] == "interrupted" and "[sweep] interrupted (exit" in out, out
    res = _sweep(ext)
    assert res.returncode == 0, res.stdout + res.stderr
    (run,) = [r for r in find_runs(root) if r.method == "grpo"]
    assert run.info["status"] == "finished" and [m["iteration"] for m in run.metrics] == [0, 1, 2, 3, 4]
