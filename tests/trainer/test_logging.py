"""Every logger sink writes what it should, and reads back."""
from __future__ import annotations

import io
import math

import pytest

from trainer.config import LoggingConfig
from trainer.logging import MetricLogger, check_metric_names, read_jsonl


def _tb_scalars(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_jsonl_tensorboard_and_progress_bar(tmp_path):
    bar = io.StringIO()
    cfg = LoggingConfig(tensorboard=True, wandb=False, progress_bar=True)
    with MetricLogger(tmp_path, cfg, run_name="grpo__seed0", total_iterations=3, progress_file=bar) as lg:
        lg.log(1, {"rollout/success_rate": 0.25, "loss/policy": -0.5, "eval/textcraft/depth2/success": 0.1})
        lg.log(2, {"rollout/success_rate": 0.5, "loss/policy": float("nan")})
        lg.log(3, {"rollout/success_rate": 0.75, "perf/iteration_s": 1.5})
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert rows[0]["eval/textcraft/depth2/success"] == 0.1 and rows[2]["perf/iteration_s"] == 1.5
    assert rows[1]["loss/policy"] is None  # NaN becomes null (strict JSON)
    tb = _tb_scalars(tmp_path / "tb")
    assert tb["rollout/success_rate"] == [(1, 0.25), (2, 0.5), (3, 0.75)]
    assert tb["eval/textcraft/depth2/success"] == [(1, pytest.approx(0.1))]
    assert math.isnan(tb["loss/policy"][1][1])
    text = bar.getvalue()
    assert "3/3" in text and "success=0.750" in text and "s/it=" in text
    # not a terminal (a console.log): one plain line per iteration, no carriage-return frames
    assert "\r" not in text and text.count("\n") == 3 and text.splitlines()[0].startswith("grpo__seed0: 1/3 it")


def test_the_progress_bar_on_a_terminal_is_tqdm(tmp_path):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    bar = Tty()
    with MetricLogger(tmp_path, LoggingConfig(tensorboard=False), total_iterations=2, progress_file=bar) as lg:
        lg.log(1, {"rollout/success_rate": 0.5})
        lg.log(2, {"rollout/success_rate": 0.5})
    assert "\r" in bar.getvalue() and "2/2" in bar.getvalue()


def test_resume_truncates_later_iterations(tmp_path):
    cfg = LoggingConfig(tensorboard=True, wandb=False, progress_bar=False)
    with MetricLogger(tmp_path, cfg) as lg:
        for it in range(1, 6):
            lg.log(it, {"loss/policy": float(it)})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"iteration": 6, "loss/pol')  # torn line of a killed process
    with MetricLogger(tmp_path, cfg, start_iteration=3) as lg:  # resumed from the iteration-3 checkpoint
        lg.log(4, {"loss/policy": 40.0})
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    assert [(r["iteration"], r["loss/policy"]) for r in rows] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]
    assert _tb_scalars(tmp_path / "tb")["loss/policy"][-2:] == [(3, 3.0), (4, 40.0)]
    # a fresh run (start 0) starts a fresh file
    with MetricLogger(tmp_path, cfg) as lg:
        lg.log(1, {"loss/policy": 7.0})
    assert [r["loss/policy"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [7.0]


def test_jsonl_digits_round_only_the_jsonl(tmp_path):
    cfg = LoggingConfig(tensorboard=True, wandb=False, progress_bar=False, jsonl_digits=4)
    with MetricLogger(tmp_path, cfg) as lg:
        lg.log(1, {"groundtruth/gigpo/pearson": 0.123456789, "perf/time_rollout": 12345.678,
                   "loss/policy": float("inf"), "rollout/num_rows": 111})
    row = read_jsonl(tmp_path / "metrics.jsonl")[0]
    assert row["groundtruth/gigpo/pearson"] == 0.1235 and row["perf/time_rollout"] == 12350.0
    assert row["loss/policy"] is None and row["rollout/num_rows"] == 111.0
    assert row["time"] > 1e9 and row["time"] != float(f"{row['time']:.4g}")  # the time stamp keeps every digit
    assert _tb_scalars(tmp_path / "tb")["groundtruth/gigpo/pearson"] == [(1, pytest.approx(0.123456789))]


@pytest.mark.parametrize("bad", [-1, 18, 2.5])
def test_jsonl_digits_is_checked(bad):
    with pytest.raises(ValueError, match="logging.jsonl_digits"):
        LoggingConfig(jsonl_digits=bad).validate()


def test_wandb_offline_run_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = LoggingConfig(tensorboard=False, wandb=True, wandb_mode="offline", wandb_project="bipace-test",
                        progress_bar=False)
    with MetricLogger(tmp_path, cfg, run_name="bipace_q__seed1", group="exp1",
                      config={"seed": 1, "estimator": {"name": "bipace_q"}}) as lg:
        run = lg.sinks[1].run
        assert run.name == "bipace_q__seed1" and run.group == "exp1" and run.project == "bipace-test"
        assert run.config["estimator"]["name"] == "bipace_q"
        lg.log(1, {"rollout/success_rate": 0.5})
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].glob("*.wandb")), "the offline run file is missing"
    assert (tmp_path / "metrics.jsonl").exists()  # JSONL is written whatever the other sinks


def _wandb_cfg(**kw):
    return LoggingConfig(tensorboard=False, wandb=True, wandb_mode="offline", wandb_project="bipace-test",
                         progress_bar=False, **kw)


def _offline_history(folder):
    from trainer.logging import read_wandb_history

    runs = sorted((folder / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, f"expected one offline W&B run, found {[r.name for r in runs]}"
    return read_wandb_history(next(runs[0].glob("*.wandb")))


def test_a_resumed_runs_wandb_history_equals_its_metrics_jsonl(tmp_path, monkeypatch):
    """A crash after iteration 5, a resume from the iteration-3 checkpoint: W&B must not keep iterations 4-5 of
    the first attempt (W&B itself drops steps below its current one); its history is metrics.jsonl's."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    with MetricLogger(tmp_path, _wandb_cfg(), run_name="gigpo__seed0", group="exp/gigpo") as lg:
        for it in range(1, 6):
            lg.log(it, {"rollout/success_rate": it / 10, "loss/policy": -it})
    first_id = (tmp_path / "wandb" / "run_id").read_text().strip()
    with MetricLogger(tmp_path, _wandb_cfg(), run_name="gigpo__seed0", group="exp/gigpo", start_iteration=3) as lg:
        for it in range(4, 7):
            lg.log(it, {"rollout/success_rate": 0.5 + it / 100, "loss/policy": it})
    assert (tmp_path / "wandb" / "run_id").read_text().strip() != first_id
    history = _offline_history(tmp_path)  # the first attempt's offline run is gone
    jsonl = read_jsonl(tmp_path / "metrics.jsonl")
    assert [h["_step"] for h in history] == [r["iteration"] for r in jsonl] == [1, 2, 3, 4, 5, 6]
    for h, r in zip(history, jsonl):
        assert h["rollout/success_rate"] == pytest.approx(r["rollout/success_rate"])
        assert h["loss/policy"] == pytest.approx(r["loss/policy"])
    assert history[3]["loss/policy"] == 4 and history[4]["rollout/success_rate"] == pytest.approx(0.55)


def test_a_restart_opens_a_new_wandb_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    ids = []
    for _ in range(2):  # --restart starts the folder over: start_iteration 0 again
        with MetricLogger(tmp_path / "run", _wandb_cfg()) as lg:
            lg.log(1, {"rollout/success_rate": 0.5})
            ids.append(lg.sinks[1].run.id)
    assert ids[0] != ids[1]


def test_wandb_group_per_method_and_tags(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    with MetricLogger(tmp_path, _wandb_cfg(wandb_tags=["ablation"]), run_name="bipace_q__seed1",
                      group="exp1/bipace_q", tags=["env:textcraft", "seed:1"]) as lg:
        run = lg.sinks[1].run
        assert run.group == "exp1/bipace_q"
        assert set(run.tags) == {"env:textcraft", "seed:1", "ablation"}
    with pytest.raises(ValueError, match="logging.wandb_tags"):
        LoggingConfig(wandb_tags=["a\nb"]).validate()


def test_verl_metric_names_overlay_in_tensorboard_and_wandb(tmp_path, monkeypatch):
    from trainer.logging import VERL_NAMES, verl_named

    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = LoggingConfig(tensorboard=True, wandb=True, wandb_mode="offline", wandb_project="bipace-test",
                        progress_bar=False, metric_names="verl")
    with MetricLogger(tmp_path, cfg) as lg:
        lg.log(1, {"rollout/success_rate": 0.25, "loss/policy": -0.5,
                   "eval/textcraft/eval_depth2/success_rate": 0.125})
    tb = _tb_scalars(tmp_path / "tb")
    assert tb["episode/success_rate"] == [(1, 0.25)] and tb["actor/pg_loss"] == [(1, -0.5)]
    assert tb["val/eval_depth2/success_rate"] == [(1, 0.125)] and tb["val/success_rate"] == [(1, 0.125)]
    assert tb["rollout/success_rate"] == [(1, 0.25)]  # this repo's names stay
    h = _offline_history(tmp_path)[0]
    assert h["episode/success_rate"] == 0.25 and h["val/success_rate"] == 0.125
    row = read_jsonl(tmp_path / "metrics.jsonl")[0]
    assert "episode/success_rate" not in row and "actor/pg_loss" not in row  # the JSONL keeps one namespace
    two = verl_named({"eval/a/s1/success_rate": 0.1, "eval/a/s2/success_rate": 0.2})
    assert "val/success_rate" not in two and two["val/s2/success_rate"] == 0.2  # two splits: no single val score
    assert len(set(VERL_NAMES.values())) == len(VERL_NAMES)  # one verl name per metric


def test_only_rank0_writes(tmp_path):
    with MetricLogger(tmp_path / "r1", LoggingConfig(), rank=1, total_iterations=3) as lg:
        lg.log(1, {"loss/policy": 1.0})
    assert not (tmp_path / "r1").exists()


@pytest.mark.parametrize(
    "metrics,needle",
    [
        ({"policy_loss": 1.0}, "outside the namespace"),
        ({"eval/success": 1.0}, "eval/<env>/<split>/<metric>"),
        ({"loss/policy": "high"}, "metrics are numbers"),
    ],
)
def test_metric_names_are_checked(metrics, needle):
    with pytest.raises(ValueError, match=needle):
        check_metric_names(metrics)
