"""The group pool: group resets, live-only stepping, determinism across modes, crash/hang recovery,
the seeded task sampler and evaluation lists."""
from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from envs.pool import EnvPool, Task, TaskSampler, eval_tasks

COUNTER = "tests.envs.helpers:CounterEnv"


def run_counter_episodes(pool, tasks, group_size):
    obs, infos = pool.reset(tasks, group_size=group_size)
    log = {i: [obs[i]] for i in range(len(obs))}
    turns = 0
    while pool.any_live():
        idx = pool.live_indices()
        for i, r in zip(idx, pool.step(idx, ["inc"] * len(idx))):
            log[i].append((r.obs, r.reward, r.terminated, r.truncated, r.info["won"]))
        turns += 1
    return log, turns


@pytest.mark.parametrize("mode", ["inline", "thread", "process"])
def test_groups_share_tasks_and_modes_agree(mode):
    tasks = [Task("train", 0, 11), Task("train", 3, 12)]  # targets 2 and 5
    with EnvPool(COUNTER, 8, num_workers=2, mode=mode) as pool:
        assert pool.splits == ("train", "eval") and pool.num_tasks("train") == 5
        log, turns = run_counter_episodes(pool, tasks, group_size=3)
        assert sorted(log) == list(range(6)) and not pool.live[6:].any()
        assert log[0] == log[1] == log[2] and log[3] == log[4] == log[5] and log[0] != log[3]
        assert "(seed 11, target 2)" in log[0][0] and len(log[0]) == 3 and len(log[3]) == 6 and turns == 5
        assert log[3][-1] == ("count 5", 10.0, True, False, True)
        assert pool.group_of.tolist() == [0, 0, 0, 1, 1, 1, -1, -1]
        if mode != "inline":
            assert len({pool.worker_of(i) for i in range(8)}) == 2



def test_finished_envs_are_not_stepped_and_bad_calls_are_explained():
    with EnvPool(COUNTER, 4, mode="inline") as pool:
        pool.reset([Task("train", 0, 0)], group_size=2)
        r = pool.step([0, 1], ["inc", "nothing"])
        assert r[0].info["step"] == 1 and r[1].info["noop"]
        pool.step([0], ["inc"])
        assert pool.live_indices() == [1]
        with pytest.raises(ValueError, match="not live"):
            pool.step([0], ["inc"])
        with pytest.raises(ValueError, match="2 indices but 1 actions"):
            pool.step([1, 2], ["inc"])
        with pytest.raises(ValueError, match="num_envs >= 6"):
            pool.reset([Task("train", 0, 0)] * 3, group_size=2)
        with pytest.raises(RuntimeError, match="out of range"):
            pool.reset([Task("train", 9, 0)])


@pytest.mark.parametrize("mode", ["inline", "process"])
def test_refill_resets_only_the_given_idle_slots(mode):
    with EnvPool(COUNTER, 3, num_workers=2, mode=mode) as pool:
        pool.reset([Task("train", 0, 1), Task("train", 3, 2)])  # targets 2 and 5
        pool.step([0, 1], ["inc", "inc"])
        pool.step([0, 1], ["inc", "inc"])  # slot 0 won
        assert pool.live_indices() == [1]
        obs, infos = pool.refill([(2, Task("eval", 1, 7)), (0, Task("train", 4, 8))])
        assert "(seed 7, target 3)" in obs[0] and "(seed 8, target 6)" in obs[1] and infos[1]["won"] is False
        assert pool.live_indices() == [0, 1, 2] and pool.tasks[2] == Task("eval", 1, 7)
        assert pool.group_of.tolist() == [-1, 1, -1]
        assert pool.step([1], ["inc"])[0].obs == "count 3"  # slot 1 kept its episode
        with pytest.raises(ValueError, match="slot 1 is live"):
            pool.refill([(1, Task("train", 0, 0))])
        with pytest.raises(ValueError, match="given twice"):
            pool.refill([(1, Task("train", 0, 0)), (1, Task("train", 0, 0))])
        pool.release([1])
        assert pool.live_indices() == [0, 2]
        assert "(seed 9" in pool.refill([(1, Task("train", 0, 9))])[0][0]


def test_killed_worker_truncates_only_its_episodes_and_restarts():
    with EnvPool(COUNTER, 4, num_workers=2, mode="process") as pool:
        pool.reset([Task("train", 4, 1), Task("train", 4, 2)], group_size=2)  # target 6
        pool.step(pool.live_indices(), ["inc"] * 4)
        victim = pool.worker_of(0)
        assert [pool.worker_of(i) for i in range(4)] == [victim, 1 - victim, victim, 1 - victim]
        old_pid = pool.worker_pids()[victim]
        os.kill(old_pid, signal.SIGKILL)
        time.sleep(0.2)
        idx = pool.live_indices()
        results = pool.step(idx, ["inc"] * len(idx))
        lost = [i for i, r in zip(idx, results) if "error" in r.info]
        assert lost == [0, 2]
        for i, r in zip(idx, results):
            if i in lost:
                assert r.truncated and not r.terminated and r.reward == 0.0 and "died" in r.info["error"]
                assert r.info["task"] == "count to 6"
            else:
                assert r.obs == "count 2" and not r.truncated
        assert pool.live_indices() == [1, 3] and pool.restarts == 1 and pool.worker_pids()[victim] != old_pid
        while pool.any_live():
            idx = pool.live_indices()
            results = pool.step(idx, ["inc"] * len(idx))
        assert all(r.info["won"] for r in results)
        obs, _ = pool.reset([Task("train", 0, 3)], group_size=4)  # the restarted worker serves again
        assert len(obs) == 4


def test_crash_inside_step_and_exceptions_are_isolated():
    with EnvPool(COUNTER, 4, num_workers=2, mode="process") as pool:
        pool.reset([Task("train", 4, 1)], group_size=4)
        results = pool.step([0, 1, 2, 3], ["exit", "raise", "inc", "inc"])
        # env 0 killed its worker (env 2 shares it); env 1's exception became a no-op step that reports it
        assert [("error" in r.info) for r in results] == [True, True, True, False]
        assert [r.truncated for r in results] == [True, False, True, False]
        assert results[1].info["noop"] and "boom" in results[1].info["error"]
        assert results[3].obs == "count 1" and pool.live_indices() == [1, 3]


def test_hung_worker_times_out():
    with EnvPool(COUNTER, 2, num_workers=2, mode="process", timeout_s=1.0) as pool:
        pool.reset([Task("train", 4, 1)], group_size=2)
        start = time.monotonic()
        results = pool.step([0, 1], ["sleep 30", "inc"])
        assert time.monotonic() - start < 15
        assert results[0].truncated and "hung" in results[0].info["error"]
        assert results[1].obs == "count 1" and pool.live_indices() == [1]


def test_thread_mode_times_out_too():
    with EnvPool(COUNTER, 2, num_workers=2, mode="thread", timeout_s=0.5) as pool:
        pool.reset([Task("train", 4, 1)], group_size=2)
        results = pool.step([0, 1], ["sleep 3", "inc"])
        assert results[0].truncated and "hung" in results[0].info["error"] and results[1].obs == "count 1"


def test_construction_errors_reach_the_caller():
    with pytest.raises(RuntimeError, match="max_steps"):
        EnvPool(COUNTER, 2, num_workers=1, mode="process", env_kwargs={"max_steps": -1})
    with pytest.raises(ValueError, match="mode"):
        EnvPool(COUNTER, 2, mode="fibers")


def test_task_sampler_is_seeded_epochwise_and_resumable():
    a, b = TaskSampler("train", 10, seed=5), TaskSampler("train", 10, seed=5)
    draws = [a.sample(4) for _ in range(5)]
    assert draws == [b.sample(4) for _ in range(5)]
    flat = [t.index for batch in draws for t in batch]
    assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:20]) == list(range(10))
    assert all(len({t.index for t in batch}) == 4 for batch in draws)  # distinct inside a batch
    assert len({t.seed for batch in draws for t in batch}) == 20
    assert TaskSampler("train", 10, seed=6).sample(4) != TaskSampler("train", 10, seed=5).sample(4)
    state = a.state_dict()
    c = TaskSampler("train", 10, seed=5)
    c.load_state_dict(state)
    assert c.sample(7) == a.sample(7)
    with pytest.raises(ValueError, match="num_tasks"):
        TaskSampler("train", 11, seed=5).load_state_dict(state)


def test_a_training_pool_repeats_its_goals():
    # the default sampler draws as before the option existed: a seeded permutation of the whole split
    import numpy as np

    from envs.pool import training_pool

    plain = [t.index for t in TaskSampler("train", 10, seed=5).sample(10)]
    assert plain == np.random.default_rng([5, 0]).permutation(10).tolist()
    s = TaskSampler("train", 50, seed=3, pool=[4, 9])
    batches = [[t.index for t in s.sample(2)] for _ in range(6)]
    assert all(sorted(b) == [4, 9] for b in batches)  # every goal of the pool in every batch of its size
    assert s.epoch == 5
    r = TaskSampler("train", 50, seed=3, pool=[1, 2, 3], replacement=True)
    many = [t.index for t in r.sample(300)]
    assert set(many) == {1, 2, 3} and all(70 < many.count(k) < 130 for k in (1, 2, 3))
    assert any(len(set(b)) < 3 for b in ([t.index for t in r.sample(3)] for _ in range(20)))  # repeats happen
    assert len({t.seed for t in r.sample(50)}) == 50  # a goal drawn again gets a fresh env seed
    a = TaskSampler("train", 50, seed=3, pool=[4, 9, 11])
    a.sample(2)
    b = TaskSampler("train", 50, seed=3, pool=[4, 9, 11])
    b.load_state_dict(a.state_dict())
    assert b.sample(5) == a.sample(5)
    with pytest.raises(ValueError, match="train_pool"):
        TaskSampler("train", 50, seed=3).load_state_dict(a.state_dict())
    for bad in ([50], [1, 1], []):
        with pytest.raises(ValueError, match="distinct task indices"):
            TaskSampler("train", 50, pool=bad)
    # a K-goal pool is fixed by its own seed, not the run's
    p = training_pool(233, 4, seed=0)
    assert p == training_pool(233, 4, seed=0) == sorted(set(p)) and len(p) == 4 and max(p) < 233
    assert p != training_pool(233, 4, seed=1) and training_pool(3, 5) == [0, 1, 2]


def test_eval_tasks_fixed_list():
    full = eval_tasks("valid_seen", 7)
    assert [t.index for t in full] == list(range(7)) and full == eval_tasks("valid_seen", 7)
    sub = eval_tasks("valid_seen", 100, max_tasks=10, seed=1)
    assert len(sub) == 10 and [t.index for t in sub] == sorted(t.index for t in sub)
    assert sub == eval_tasks("valid_seen", 100, max_tasks=10, seed=1) != eval_tasks("valid_seen", 100, 10, seed=2)
    assert {t.seed for t in full} == {t.seed for t in eval_tasks("valid_seen", 7, seed=0)}


def test_textcraft_pool_with_expert_in_processes():
    from envs.pool import eval_tasks as ev

    with EnvPool("TextCraft-v0", 6, num_workers=2, mode="process") as pool:
        tasks = ev("eval_depth3", pool.num_tasks("eval_depth3"), max_tasks=6, seed=0)
        obs, infos = pool.reset(tasks, group_size=1)
        assert [i["task_family"] for i in infos] == ["depth3"] * 6
        won = np.zeros(6, dtype=bool)
        while pool.any_live():
            idx = pool.live_indices()
            for i, r in zip(idx, pool.step(idx, pool.expert_actions(idx))):
                won[i] |= r.info["won"]
        assert won.all()


def test_alfworld_groups_in_worker_processes(alfworld_data):
    env_kwargs = {"data_path": str(alfworld_data)}
    with EnvPool("ALFWorld-v0", 4, num_workers=2, mode="process", env_kwargs=env_kwargs) as pool:
        assert pool.env_name == "alfworld" and pool.eval_splits == ("valid_seen", "valid_unseen")
        tasks = eval_tasks("valid_unseen", pool.num_tasks("valid_unseen"))
        obs, infos = pool.reset(tasks, group_size=2)
        assert obs[0] == obs[1] and infos[0]["state_key"] == infos[1]["state_key"] and obs[0] != obs[2]
        won = {}
        while pool.any_live():
            idx = pool.live_indices()
            for i, r in zip(idx, pool.step(idx, pool.expert_actions(idx))):
                won[i] = r.info["won"]
        assert won == {0: True, 1: True, 2: True, 3: True}


def test_webshop_pool_and_prompt():
    """The pool and the prompt builder serve any env of the contract (here the WebShop engineer's)."""
    from agents.prompts import Transcript, get_prompt_builder

    with EnvPool("WebShop-v0", 2, mode="inline") as pool:
        tasks = eval_tasks("test", pool.num_tasks("test"), max_tasks=1)
        obs, infos = pool.reset(tasks, group_size=2)
        assert obs[0] == obs[1]
        text = get_prompt_builder("WebShop-v0").build(Transcript.start(obs[0], infos[0]))
        assert "WebShop" in text and "'search[" in text and infos[0]["task"] in text
        while pool.any_live():
            idx = pool.live_indices()
            results = pool.step(idx, pool.expert_actions(idx))
        assert all(r.info["raw_score"] is not None for r in results)


def _dies_while_building(**kwargs):
    os._exit(7)


def test_a_worker_that_dies_at_start_is_reported_with_its_exit_code():
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="exited with code 7 while building") as e:
        EnvPool(_dies_while_building, 2, num_workers=1, mode="process", start_timeout_s=120)
    assert "did not start within" not in str(e.value) and time.monotonic() - start < 60


def test_each_worker_restart_is_a_warning_with_its_exit_code_and_the_limit_stops(caplog):
    from envs.pool import EnvWorkersFailed

    with pytest.raises(ValueError, match="max_restarts"):
        EnvPool(COUNTER, 2, mode="inline", max_restarts=-1)
    caplog.set_level("WARNING", logger="envs.pool")
    with EnvPool(COUNTER, 2, num_workers=1, mode="process", max_restarts=1) as pool:
        pool.reset([Task("train", 4, 1)], group_size=2)
        os.kill(pool.worker_pids()[0], signal.SIGKILL)
        time.sleep(0.2)
        results = pool.step([0, 1], ["inc", "inc"])
        assert all(r.truncated for r in results) and pool.restarts == 1
        warned = [r for r in caplog.records if r.name == "envs.pool" and r.levelname == "WARNING"]
        assert len(warned) == 1 and "exit code -9" in warned[0].getMessage()
        assert "restart 1 (at most 1)" in pool.restart_log[0]
        pool.reset([Task("train", 4, 1)], group_size=2)
        os.kill(pool.worker_pids()[0], signal.SIGKILL)
        time.sleep(0.2)
        with pytest.raises(EnvWorkersFailed, match="restarted 2 times, more than the 1 allowed"):
            pool.step([0, 1], ["inc", "inc"])
