"""``python -m experiments.sweep --launcher slurm`` (lab/slurm.py): the sbatch options a sweep asks for, its errors,
``--status``, and a real sweep of 2 estimators x 2 seeds through submitit's local executor (the same job code,
signals and requeue as on Slurm) in which one run is preempted, requeued and resumed from its checkpoint."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path

import pytest

submitit = pytest.importorskip("submitit")

from lab import slurm, sweep  # noqa: E402
from tests.experiments.helpers import child_env, run_module  # noqa: E402
from tests.experiments.test_sweep import FAST, SMOKE, TINY, _fixture_run  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _main(argv: list[str]) -> int:
    """``python -m experiments.sweep`` in this process: lab.sweep with lab.slurm's launchers."""
    return sweep.main(argv, extensions=(slurm,))


def _args(**kw) -> Namespace:
    base = dict(time=1.5, partition="gpu", gpus_per_run=2, cpus_per_run=16, mem_gb=None, slurm_arg=[],
                max_requeues=3)
    base.update(kw)
    return Namespace(**base)


def test_the_sbatch_file_asks_for_partition_gpus_time_requeue_and_the_preemption_signal(tmp_path):
    params = slurm.slurm_parameters(_args(mem_gb=64, slurm_arg=["account=proj", "qos=high"]))
    text = submitit.slurm.slurm._make_sbatch_string(command="python -m x", folder=tmp_path, map_count=4, **params)
    for line in ["#SBATCH --partition=gpu", "#SBATCH --gpus-per-node=2", "#SBATCH --time=90", "#SBATCH --nodes=1",
                 "#SBATCH --ntasks-per-node=1", "#SBATCH --cpus-per-task=16", "#SBATCH --mem=64GB",
                 "#SBATCH --signal=USR2@120", "#SBATCH --requeue", "#SBATCH --account=proj", "#SBATCH --qos=high",
                 "#SBATCH --array=0-3%4", "#SBATCH --job-name=bipace-sweep"]:
        assert line in text.splitlines(), line
    # no GPUs asked: no GPU line
    assert "gpus" not in " ".join(slurm.slurm_parameters(_args(gpus_per_run=0, partition=None)))


@pytest.mark.parametrize("kw,needle", [
    (dict(time=None), "needs --time HOURS"),
    (dict(time=0), "--time 0 must be > 0"),
    (dict(gpus_per_run=-1), "--gpus-per-run -1"),
    (dict(slurm_arg=["account"]), "--slurm-arg 'account' must look like key=value"),
    (dict(slurm_arg=["account=proj\n#SBATCH --wrap=rm"]), "--slurm-arg 'account=proj.*holds control character"),
    (dict(slurm_arg=["comment=a\rb"]), "--slurm-arg 'comment=a.*holds control character"),
    (dict(partition="gpu\nhostile"), "--partition 'gpu.*holds control character"),
])
def test_bad_slurm_options_name_the_option(kw, needle):
    with pytest.raises(sweep.SweepError, match=needle.replace("(", r"\(")):
        slurm.slurm_parameters(_args(**kw))


def test_throttle_setup_lines_and_job_names_reach_the_job_script(tmp_path):
    """--max-running K is the array's %K, the setup lines (file, then --setup) come before the command in the order
    given, the job is named after the preset (after the run when it holds one run)."""
    setup = tmp_path / "setup.sh"
    setup.write_text("# the cluster's modules\nmodule load cuda/12.4\n\nsource /opt/conda/etc/profile.d/conda.sh\n")
    specs = sweep.expand([SMOKE], ["grpo", "bipace_q"], [0], (), FAST, tmp_path / "runs")
    args = _args(max_running=2, setup_file=str(setup), setup=["conda activate bipace"], config=[SMOKE])
    params = slurm.slurm_parameters(args, specs)
    text = submitit.slurm.slurm._make_sbatch_string(command="python -m x", folder=tmp_path, map_count=4, **params)
    lines = text.splitlines()
    assert "#SBATCH --array=0-3%2" in lines and "#SBATCH --job-name=bipace-textcraft_tiny" in lines
    at = [lines.index(x) for x in ["module load cuda/12.4", "source /opt/conda/etc/profile.d/conda.sh",
                                   "conda activate bipace"]]
    command = next(i for i, x in enumerate(lines) if x.endswith("python -m x"))
    assert at == sorted(at) and at[-1] < command
    (one,) = specs[:1]
    assert slurm.job_name(args, [one]) == "bipace-textcraft_tiny.grpo.s0"
    assert slurm.job_name(_args(job_name="abl-eps", config=[SMOKE]), specs) == "abl-eps"
    assert slurm.job_name(_args(config=[SMOKE, "configs/x/other.yaml"])) == "bipace-sweep"
    assert "array_parallelism" not in slurm.slurm_parameters(_args())  # submitit's default throttle


def test_a_container_wrapper_starts_the_jobs_and_the_runs_use_its_python(tmp_path):
    args = _args(job_python="apptainer exec --nv img.sif python", launcher="submitit-local", time=None,
                 setup=["export A=1"], max_requeues=3)
    ex = slurm._executor("submitit-local", tmp_path, args)
    assert ex._submitit_command_str.startswith("apptainer exec --nv img.sif python -u -m submitit.core._submit")
    assert ex.parameters["setup"] == ["export A=1"]
    (spec,) = sweep.expand([SMOKE], ["grpo"], [0], (), FAST, tmp_path)
    run = slurm.SlurmRun(spec, tmp_path, str(REPO), None, 0)  # None: the job's own interpreter
    assert run.command()[:2] == [sys.executable, "-m"]


def test_each_run_has_a_job_log_named_after_it(tmp_path):
    (spec,) = sweep.expand([SMOKE], ["grpo"], [1], (), FAST, tmp_path / "runs")
    logs = tmp_path / "runs" / "slurm" / "logs"
    for jid in ("123_4", "130_0"):  # submitted again: the link follows the new job
        job = Namespace(paths=submitit.core.utils.JobPaths(logs, job_id=jid, task_id=0))
        link = slurm._link_job_log(logs, spec, job)
        job.paths.stdout.parent.mkdir(parents=True, exist_ok=True)
        job.paths.stdout.write_text(f"log of {jid}\n")
        assert link == logs / "by-run" / f"textcraft.{TINY}.grpo.seed_1.out"
        assert link.read_text() == f"log of {jid}\n" and not Path(os.readlink(link)).is_absolute()
        assert os.readlink(link.with_suffix(".err")) == f"../{jid}_0_log.err"


@pytest.mark.parametrize("kw,needle", [
    (dict(max_running=0), "--max-running 0 must be >= 1"),
    (dict(setup=["module load cuda\nrm -rf x"]), "--setup 'module load cuda.*holds control character"),
    (dict(setup=[""]), "--setup '' is empty"),
    (dict(job_name="a\nb"), "--job-name 'a.*holds control character"),
    (dict(job_name="my sweep"), "--job-name 'my sweep' must be one word"),
    (dict(job_python="apptainer exec x.sif\rpython"), "--job-python 'apptainer.*holds control character"),
    (dict(job_python="  "), "--job-python '' is empty"),
    (dict(setup_file="/nonexistent/setup.sh"), "--setup-file '/nonexistent/setup.sh' cannot be read"),
])
def test_bad_throttle_setup_and_name_options_name_the_option(kw, needle):
    with pytest.raises(sweep.SweepError, match=needle.replace("(", r"\(")):
        slurm.slurm_parameters(_args(**kw))


def test_a_control_character_in_a_setup_file_names_its_line(tmp_path):
    f = tmp_path / "setup.sh"
    f.write_text("module load cuda\nexport A=1\rexport B=2\n")
    with pytest.raises(sweep.SweepError, match=r"--setup-file .*setup.sh line 2: 'export A=1\\rexport B=2' holds"):
        slurm.slurm_parameters(_args(setup_file=str(f)))


@pytest.mark.parametrize("args,needle", [
    (["--launcher", "slurm"], "needs --time HOURS"),
    (["--launcher", "slurm", "--time", "1", "--jobs", "2"], "--jobs is the local launcher's"),
    (["--launcher", "slurm", "--time", "1", "--nproc", "2"], "not both"),
    (["--launcher", "slurm", "--time", "1", "--slurm-arg", "x"], "must look like key=value"),
    (["--launcher", "submitit-local", "--max-running", "0"], "--max-running 0 must be >= 1"),
    (["--launcher", "submitit-local", "--setup", "a\nb"], "--setup 'a\\nb' holds control character"),
])
def test_command_line_errors_exit_2_and_submit_nothing(args, needle, tmp_path, capsys):
    assert _main(["--config", SMOKE, "--estimators", "grpo", "--runs-root", str(tmp_path), *args, *FAST]) == 2
    assert needle in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


@pytest.mark.skipif(__import__("shutil").which("srun") is not None, reason="a Slurm machine")
def test_without_slurm_the_slurm_launcher_says_what_to_do(tmp_path, capsys):
    assert _main(["--config", SMOKE, "--estimators", "grpo", "--runs-root", str(tmp_path / "runs"), "--launcher",
                  "slurm", "--time", "1", *FAST]) == 2
    err = capsys.readouterr().err
    assert "srun" in err and "--launcher submitit-local" in err
    assert not (tmp_path / "runs" / "slurm" / "jobs.jsonl").exists()


def test_a_dry_run_shows_the_commands_inside_the_jobs_and_the_sbatch_options(tmp_path, capsys):
    root = tmp_path / "runs"
    assert _main(["--config", SMOKE, "--estimators", "grpo,bipace_q", "--runs-root", str(root), "--launcher",
                       "slurm", "--partition", "a100", "--gpus-per-run", "4", "--time", "24", "--dry-run", *FAST]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "# 2 runs: 0 finished (skipped), 0 to resume, 2 new"
    cmds = [x for x in out if not x.startswith("#")]
    assert len(cmds) == 2 and all("torch.distributed.run --standalone --nproc_per_node=4 -m experiments.train" in c
                                  for c in cmds)
    params = json.loads(out[-1].removeprefix("# sbatch: "))
    assert params["partition"] == "a100" and params["gpus_per_node"] == 4 and params["time"] == 24 * 60
    assert not root.exists()


def test_a_dry_run_shows_the_throttle_setup_lines_name_and_job_python(tmp_path, capsys):
    assert _main(["--config", SMOKE, "--estimators", "grpo", "--runs-root", str(tmp_path / "runs"), "--launcher",
                  "slurm", "--time", "2", "--max-running", "3", "--setup", "module load cuda", "--job-python",
                  "apptainer exec x.sif python", "--dry-run", *FAST]) == 0
    out = capsys.readouterr().out.splitlines()
    params = json.loads(out[-2].removeprefix("# sbatch: "))
    assert params["array_parallelism"] == 3 and params["setup"] == ["module load cuda"]
    assert params["job_name"] == "bipace-textcraft_tiny.grpo.s0"  # one run: named after it
    assert out[-1].startswith("# each job starts with: apptainer exec x.sif python")


@pytest.mark.parametrize("finished,progress,job,word", [
    (True, True, "RUNNING", "finished"),   # the run folder decides first
    (False, False, None, "not submitted"),
    (False, True, None, "interrupted"),
    (False, False, "PENDING", "queued"),
    (False, True, "REQUEUED", "queued"),
    (False, True, "RUNNING", "running"),
    (False, True, "COMPLETED", "failed"),  # the job ended but the run did not finish
    (False, True, "CANCELLED by 1234", "failed"),
    (False, True, "TIMEOUT", "failed"),
    (False, True, "NODE_FAIL", "failed"),
    (False, True, "UNKNOWN (FileNotFoundError)", "unknown (UNKNOWN (FileNotFoundError))"),
])
def test_state_words(finished, progress, job, word):
    assert slurm.state_word(finished, progress, job) == word


@pytest.mark.parametrize("job", ["CANCELLED by 1234", "PREEMPTED", "TIMEOUT"])
def test_a_run_that_caught_the_signal_is_interrupted_as_its_folder_says(job):
    """scancel / preemption / time limit: the run checkpointed and wrote 'interrupted'; --status must agree."""
    assert slurm.state_word(False, True, job, "interrupted") == "interrupted"
    assert slurm.state_word(False, True, job, "failed") == "failed"
    assert slurm.state_word(False, True, job, "running") == "failed"  # killed without a word: not resumable-clean


def test_status_reads_the_run_folders_and_the_jobs(tmp_path, capsys):
    root = tmp_path / "runs"
    specs = sweep.expand([SMOKE], ["grpo", "gigpo", "bipace_q", "rloo", "hgpo"], [0], (), FAST, root)
    _fixture_run(specs[0], "finished", 2)
    _fixture_run(specs[1], "interrupted", 1)
    _fixture_run(specs[2], "running", 1)
    _fixture_run(specs[3], "running", 0)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    jobs = root / "slurm" / "jobs.jsonl"
    jobs.parent.mkdir(parents=True)
    jobs.write_text("".join(json.dumps({"event": "submitted", "run": s.label, "job_id": str(jid),
                                        "launcher": "submitit-local"}) + "\n"
                            for s, jid in [(specs[2], os.getpid()), (specs[3], dead.pid)]))
    assert _main(["--config", SMOKE, "--estimators", "grpo,gigpo,bipace_q,rloo,hgpo", "--runs-root", str(root),
                       "--status", *FAST]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "# 5 runs: 0 queued, 1 running, 1 finished, 1 failed, 1 interrupted, 1 not submitted"
    assert [x.split()[0] for x in out[1:]] == ["finished", "interrupted", "running", "failed", "not"]
    assert f"job {os.getpid()} (RUNNING)" in out[3] and f"job {dead.pid} (INTERRUPTED)" in out[4]


def test_a_job_pickles_and_its_checkpoint_is_the_same_job(tmp_path):
    import cloudpickle

    (spec,) = sweep.expand([SMOKE], ["grpo"], [0], (), FAST, tmp_path)
    job = slurm.SlurmRun(spec, tmp_path, str(REPO), sys.executable, 2, kind="submitit-local")
    job._proc = subprocess.Popen([sys.executable, "-c", "pass"])  # a process handle never travels
    job._proc.wait()
    copy = cloudpickle.loads(cloudpickle.dumps(job))
    assert copy._proc is None and copy.command() == job.command()
    assert job.command()[:6] == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                                 "-m"]
    delayed = job.checkpoint()
    assert isinstance(delayed, submitit.helpers.DelayedSubmission)
    assert delayed.function.command() == job.command() and delayed.function._proc is None
    (event,) = [json.loads(x) for x in (tmp_path / "slurm" / "jobs.jsonl").read_text().splitlines()]
    assert event["event"] == "requeue" and event["run"] == spec.label


def test_a_signal_taken_by_another_thread_runs_its_handler_while_the_job_waits():
    """The preemption signal may land on any thread of the job's process; its Python handler runs in the main
    thread, which waits for the run. A blocking ``wait4`` is not interrupted by a signal another thread takes, so the
    handler (which stops the run) would run only after the run ended; ``slurm._wait`` polls instead."""
    import threading

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"])
    old = signal.signal(signal.SIGUSR2, lambda *_: os.kill(child.pid, signal.SIGTERM))  # what a preemption does
    try:
        other = threading.Thread(target=lambda: (time.sleep(0.5), signal.pthread_kill(threading.get_ident(),
                                                                                      signal.SIGUSR2)))
        other.start()
        rc, _ = slurm._wait(child.pid, None)
        other.join()
    finally:
        signal.signal(signal.SIGUSR2, old)
        if child.poll() is None:
            child.kill()
    assert rc == -signal.SIGTERM  # stopped by the handler, not run to its end (exit 0 after 20 s)


# ------------------------------------------------------------------------------------------- a real sweep
def _events(root: Path) -> list[dict]:
    p = root / "slurm" / "jobs.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


@pytest.mark.slow
def test_two_by_two_local_executor_sweep_is_preempted_requeued_and_finishes(tmp_path):
    """grpo and bipace_q x seeds 0 and 1 on the tiny preset, as four submitit jobs; once the first run has saved its
    first checkpoint, its job gets the scheduler's preemption signal (SIGUSR2, as Slurm sends it with submitit's
    ``--signal``): the run stops at its checkpoint, the job is requeued and the run resumes and finishes. Every run
    ends with the same iterations as an uninterrupted run, ``--status`` says finished, a resubmission submits
    nothing."""
    from analysis.runs import find_runs

    root = tmp_path / "runs"
    fast = [*FAST[:4], "trainer.iterations=5", *FAST[5:]]  # iterations left after the first checkpoint
    args = ["--config", SMOKE, "--estimators", "grpo,bipace_q", "--seeds", "0,1", "--runs-root", str(root),
            "--launcher", "submitit-local", "--time", "1", "--no-progress", *fast]
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "experiments.sweep", *args, "--wait"], cwd=REPO, env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    target = root / "textcraft" / TINY / "grpo" / "seed_0"
    label = f"textcraft/{TINY}/grpo/seed_0"
    deadline = time.time() + 600
    pid = None
    while time.time() < deadline and proc.poll() is None:
        starts = [e for e in _events(root) if e["event"] == "start" and e["run"] == label]
        if starts and (target / "checkpoints" / "iter_00000001").exists():
            pid = starts[-1]["pid"]
            os.kill(pid, signal.SIGUSR2)
            break
        time.sleep(0.2)
    assert pid is not None, "the first run never saved a checkpoint"
    status_seen = run_module("experiments.sweep", [*args, "--status"], 300).stdout  # while the jobs run
    out, _ = proc.communicate(timeout=1200)
    wall = time.perf_counter() - t0
    print(f"2 x 2 local-executor sweep with one preemption: {wall:.0f} s")
    assert proc.returncode == 0, out
    assert "running" in status_seen.splitlines()[0] and " 0 running" not in status_seen.splitlines()[0], status_seen

    runs = find_runs(root)
    assert sorted((r.method, r.seed, r.info["status"]) for r in runs) == \
        [("bipace_q", 0, "finished"), ("bipace_q", 1, "finished"), ("grpo", 0, "finished"), ("grpo", 1, "finished")]
    for r in runs:  # each iteration logged once, resumed or not
        assert [m["iteration"] for m in r.metrics] == [0, 1, 2, 3, 4, 5], r.path
    assert "resumed from iter_" in (target / "train.log").read_text()
    events = _events(root)
    mine = [e for e in events if e["run"] == label]
    assert [e["event"] for e in mine] == ["submitted", "start", "requeue", "start", "end"], mine
    assert len({e["job_id"] for e in mine}) == 1  # requeued: the same job
    assert sum(e["event"] == "submitted" for e in events) == 4
    attempts = [json.loads(x) for x in (root / "sweep.jsonl").read_text().splitlines()]
    pre = [a for a in attempts if a["preempted"]]
    assert [(a["run"], a["exit"]) for a in pre] == [(label, 130)], pre
    done = [a for a in attempts if not a["preempted"]]
    assert sorted(a["run"].split("/", 2)[2] for a in done) == \
        ["bipace_q/seed_0", "bipace_q/seed_1", "grpo/seed_0", "grpo/seed_1"]
    assert all(a["exit"] == 0 and a["cpu_s"] > 0 and a["launcher"] == "submitit-local" for a in done)
    assert [a["status_before"] for a in done if a["run"] == label] == ["resume"]

    res = run_module("experiments.sweep", [*args, "--status"], 300)
    assert res.returncode == 0 and res.stdout.splitlines()[0].startswith("# 4 runs: 0 queued, 0 running, 4 finished")
    res = run_module("experiments.sweep", args, 300)  # submit again: nothing to do
    assert res.returncode == 0 and "4 already finished, 0 queued or running already, 0 to submit" in res.stdout
    assert sum(e["event"] == "submitted" for e in _events(root)) == 4


@pytest.mark.slow
def test_a_local_executor_sweep_stopped_by_sigterm_resumes_when_relaunched(tmp_path):
    """``scancel`` signals the job with SIGTERM: here the job's submitit controller gets it (it passes it to the job,
    which passes it to its run). The run stops at its last checkpoint and says ``interrupted``; the sweep says so
    (``--wait``: exit 130, ``--status``: interrupted); the same command relaunched resumes the run from that
    checkpoint and it ends with every iteration's metrics, once each."""
    root = tmp_path / "runs"
    fast = [*FAST[:4], "trainer.iterations=5", *FAST[5:]]
    args = ["--config", SMOKE, "--estimators", "grpo", "--seeds", "0", "--runs-root", str(root),
            "--launcher", "submitit-local", "--time", "1", "--no-progress", *fast]
    target = root / "textcraft" / TINY / "grpo" / "seed_0"
    label = f"textcraft/{TINY}/grpo/seed_0"
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "experiments.sweep", *args, "--wait"], cwd=REPO, env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 600
    job_id = None
    while time.time() < deadline and proc.poll() is None:
        events = _events(root)
        if any(e["event"] == "start" for e in events) and (target / "checkpoints" / "iter_00000001").exists():
            (job_id,) = [e["job_id"] for e in events if e["event"] == "submitted"]
            os.kill(int(job_id), signal.SIGTERM)  # the local job's id is its controller's pid
            break
        time.sleep(0.2)
    assert job_id is not None, "the run never saved a checkpoint"
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 130, out
    assert f"[sweep] interrupted: {label}" in out and "interrupted at its last checkpoint" in out

    info = json.loads((target / "run.json").read_text())
    assert info["status"] == "interrupted" and 1 <= info["iterations_done"] < 5, info
    assert (target / "checkpoints" / f"iter_{info['iterations_done']:08d}").is_dir()
    assert "terminated (SIGTERM)" in (target / "console.log").read_text()
    mine = [e for e in _events(root) if e["run"] == label]
    assert [e["event"] for e in mine] == ["submitted", "start", "end"], mine
    assert mine[-1]["exit"] == 143 and mine[-1]["interrupted"] is True
    (attempt,) = [json.loads(x) for x in (root / "sweep.jsonl").read_text().splitlines()]
    assert attempt["exit"] == 143 and not attempt["preempted"]
    res = run_module("experiments.sweep", [*args, "--status"], 300)
    assert res.stdout.splitlines()[1].startswith("interrupted"), res.stdout
    link = root / "slurm" / "logs" / "by-run" / f"textcraft.{TINY}.grpo.seed_0.out"
    assert link.resolve() == (root / "slurm" / "logs" / f"{job_id}_0_log.out").resolve() and link.exists()

    res = run_module("experiments.sweep", [*args, "--wait"], 900)  # the same command: resubmitted, resumed
    print(f"local-executor sweep stopped by SIGTERM and relaunched: {time.perf_counter() - t0:.0f} s")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "1 to submit" in res.stdout and "interrupted" in res.stdout  # submitted as a resume of that state
    info = json.loads((target / "run.json").read_text())
    assert info["status"] == "finished" and info["iterations_done"] == 5
    metrics = [json.loads(x) for x in (target / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in metrics] == [0, 1, 2, 3, 4, 5]
    assert "resumed from iter_" in (target / "train.log").read_text()
    mine = [e for e in _events(root) if e["run"] == label]
    assert [e["event"] for e in mine] == ["submitted", "start", "end", "submitted", "start", "end"], mine
    assert mine[-1]["exit"] == 0 and mine[3]["status_before"] == "resume"
    assert os.readlink(link) != f"../{job_id}_0_log.out"  # the link follows the new job
