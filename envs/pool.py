"""The group pool: P prompt groups x G copies of an environment, stepped in worker processes.

Symbols: P prompt groups, G copies (trajectories) per group; env slot ``i`` of a group reset holds
group ``i // G``, copy ``i % G``.

Training (one iteration)::

    pool = EnvPool("ALFWorld-v0", num_envs=P * G, num_workers=2, env_kwargs={"expert": False})
    sampler = TaskSampler("train", pool.num_tasks("train"), seed=run_seed)
    obs, infos = pool.reset(sampler.sample(P), group_size=G)   # len P*G; copies of a group: same task+seed
    while pool.any_live():
        idx = pool.live_indices()                               # only live envs cost anything
        results = pool.step(idx, actions_for(idx))              # list of StepResult, one per index
        for i, (obs, reward, terminated, truncated, info) in zip(idx, results): ...

Evaluation: ``tasks = eval_tasks("valid_seen", pool.num_tasks("valid_seen"))`` is a fixed, seeded list
(the whole split when ``max_tasks`` is None); play it in chunks of at most ``num_envs`` tasks with
``pool.reset(chunk, group_size=1)`` (one copy per task). ``sampler.state_dict()`` /
``load_state_dict`` go into the trainer's checkpoint so a resumed run draws the same tasks.

Faults: a worker that dies (or does not answer within ``timeout_s`` per env operation of the call) is killed and
restarted with fresh envs; each restart is a warning (logger ``envs.pool``: the worker, its exit code, the count so
far) and is counted in ``EnvPool.restarts``, and the restart after ``max_restarts`` raises ``EnvWorkersFailed``
instead (a run whose workers keep dying stops rather than training on truncated batches). A worker that exits while
building its envs is reported with its exit code at once. Every live episode a restarted worker held is ended: the
env(s) stepped in that call get a ``StepResult`` with ``truncated=True``, reward 0, the last observation and
``info["error"]`` saying what happened; live envs of that worker not stepped in that call get the same at their
next ``step``. Other workers' envs are untouched. An exception raised inside one env ends only that env's episode,
the same way. A failed ``reset`` raises ``RuntimeError`` with the worker's message (after one retry on a restarted
worker when the worker died).

Modes: ``"process"`` (default; one OS process per worker, uses the cores), ``"thread"`` (same code in
threads: timeouts abandon the stuck thread instead of killing it) and ``"inline"`` (no workers, no
timeouts; for tests and debugging).
"""
from __future__ import annotations

import importlib
import logging
import multiprocessing as mp
import os
import queue
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

__all__ = ["Task", "TaskSampler", "training_pool", "eval_tasks", "StepResult", "EnvPool", "EnvWorkersFailed",
           "make_env"]

log = logging.getLogger("envs.pool")


class EnvWorkersFailed(RuntimeError):
    """Env workers were restarted more often than the pool's ``max_restarts`` allows."""


# ====================================================================== tasks
@dataclass(frozen=True)
class Task:
    """One task: ``index`` into ``split``'s task list, played with env seed ``seed``."""

    split: str
    index: int
    seed: int

    @property
    def task_id(self) -> tuple[str, int]:
        return (self.split, self.index)

    def reset_kwargs(self) -> dict:
        return {"seed": int(self.seed), "options": {"split": self.split, "task_index": int(self.index)}}


def _derived_seed(*keys: int) -> int:
    return int(np.random.SeedSequence([int(k) & 0xFFFFFFFF for k in keys]).generate_state(1)[0] % (2**31 - 1))


class TaskSampler:
    """Seeded, reproducible draws of training tasks from one split, or from a fixed pool of its tasks.

    ``pool`` (optional): the task indices training may draw, e.g. ``training_pool(num_tasks, K, seed)``; null =
    the whole split. ``replacement=False`` (default): tasks are drawn without replacement within an epoch (a seeded
    permutation of the pool), so every task is seen once per epoch [choice; the reference draws with replacement]
    and a batch of ``n <= len(pool)`` tasks holds distinct tasks even across an epoch boundary.
    ``replacement=True``: each task of a batch is drawn uniformly from the pool, independently (repeats allowed).
    Each draw also gets its own env seed (``Task.seed``), a function of ``(seed, draw number)``, so a goal drawn
    again is played in a fresh env episode.
    """

    def __init__(self, split: str, num_tasks: int, seed: int = 0, pool: Sequence[int] | None = None,
                 replacement: bool = False):
        if not isinstance(num_tasks, (int, np.integer)) or num_tasks < 1:
            raise ValueError(f"TaskSampler: split {split!r} has num_tasks={num_tasks!r}; need at least 1 task")
        self.split, self.num_tasks, self.seed = str(split), int(num_tasks), int(seed)
        if pool is None:
            self.pool = list(range(self.num_tasks))
        else:
            self.pool = [int(k) for k in pool]
            bad = [k for k in self.pool if not 0 <= k < self.num_tasks]
            if not self.pool or bad or len(set(self.pool)) != len(self.pool):
                raise ValueError(
                    f"TaskSampler: pool {list(pool)!r} must be distinct task indices of split {split!r} "
                    f"(0..{self.num_tasks - 1}); bad: {bad or 'duplicates or empty'}")
        self.replacement = bool(replacement)
        self._epoch = 0
        self._order = self._permutation(0)
        self._pos = 0
        self._draws = 0

    def _permutation(self, epoch: int) -> list[int]:
        perm = np.random.default_rng([self.seed & 0xFFFFFFFF, epoch]).permutation(len(self.pool)).tolist()
        return [self.pool[i] for i in perm]

    @property
    def epoch(self) -> int:
        return self._epoch

    def sample(self, n: int) -> list[Task]:
        """The next ``n`` tasks (``n`` prompt groups)."""
        if n < 0:
            raise ValueError(f"TaskSampler.sample: n={n} must be >= 0")
        picked: list[int] = []
        if self.replacement:
            rng = np.random.default_rng([self.seed & 0xFFFFFFFF, 2, self._draws])
            picked = [self.pool[int(i)] for i in rng.integers(0, len(self.pool), size=n)]
        while len(picked) < n:
            if self._pos >= len(self._order):
                self._epoch += 1
                order = self._permutation(self._epoch)
                taken = set(picked)
                if len(taken) < len(self.pool):  # keep the batch distinct: repeats go to the epoch's end
                    order = [k for k in order if k not in taken] + [k for k in order if k in taken]
                self._order, self._pos = order, 0
            picked.append(self._order[self._pos])
            self._pos += 1
        tasks = []
        for k in picked:
            tasks.append(Task(self.split, int(k), _derived_seed(self.seed, 1, self._draws)))
            self._draws += 1
        return tasks

    def state_dict(self) -> dict:
        state = {
            "split": self.split,
            "num_tasks": self.num_tasks,
            "seed": self.seed,
            "epoch": self._epoch,
            "order": list(self._order),
            "pos": self._pos,
            "draws": self._draws,
        }
        if self.pool != list(range(self.num_tasks)) or self.replacement:
            state["pool"], state["replacement"] = list(self.pool), self.replacement
        return state

    def load_state_dict(self, state: dict) -> None:
        for key in ("split", "num_tasks", "seed"):
            if state.get(key) != getattr(self, key):
                raise ValueError(
                    f"TaskSampler.load_state_dict: checkpoint has {key}={state.get(key)!r} but this sampler has "
                    f"{getattr(self, key)!r} (the split's task list changed or a different run's state was given)"
                )
        pool = [int(k) for k in state.get("pool", range(self.num_tasks))]
        if pool != self.pool or bool(state.get("replacement", False)) != self.replacement:
            raise ValueError(
                f"TaskSampler.load_state_dict: checkpoint's training pool {pool if len(pool) <= 20 else '...'} / "
                f"replacement={state.get('replacement', False)} differ from this run's "
                f"({self.pool if len(self.pool) <= 20 else '...'} / {self.replacement}): env.train_pool or "
                "env.train_sampling changed since the checkpoint; restore them or start a new run folder")
        order = [int(k) for k in state["order"]]
        if sorted(order) != sorted(self.pool):
            raise ValueError("TaskSampler.load_state_dict: 'order' is not a permutation of the training pool")
        self._epoch, self._order = int(state["epoch"]), order
        self._pos, self._draws = int(state["pos"]), int(state["draws"])


def training_pool(num_tasks: int, size: int, seed: int = 0) -> list[int]:
    """A fixed seeded subset of ``size`` task indices (sorted) out of ``num_tasks``: the same for every run seed,
    so the runs of a study train on the same goals. ``size >= num_tasks`` gives every task."""
    if size < 1:
        raise ValueError(f"training_pool: size={size} must be >= 1")
    if size >= num_tasks:
        return list(range(num_tasks))
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, 3])
    return sorted(int(k) for k in rng.choice(num_tasks, size=size, replace=False))


def eval_tasks(split: str, num_tasks: int, max_tasks: int | None = None, seed: int = 0) -> list[Task]:
    """The fixed evaluation list of ``split``: every task in order when ``max_tasks`` is None or at least
    ``num_tasks``, else a seeded subset of ``max_tasks`` tasks (sorted). Env seeds depend on
    ``(seed, task index)`` only, so the list is the same in every run and at every evaluation [protocol]."""
    if num_tasks < 1:
        raise ValueError(f"eval_tasks: split {split!r} has no tasks")
    if max_tasks is None or max_tasks >= num_tasks:
        indices = list(range(num_tasks))
    else:
        if max_tasks < 1:
            raise ValueError(f"eval_tasks: max_tasks={max_tasks} must be >= 1")
        rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, 2])
        indices = sorted(rng.choice(num_tasks, size=max_tasks, replace=False).tolist())
    return [Task(split, int(k), _derived_seed(seed, 2, k)) for k in indices]


# ====================================================================== env construction
def make_env(env: str | Callable[..., Any], env_kwargs: dict | None = None):
    """Build one env from a gymnasium id ("ALFWorld-v0"), an entry point ("pkg.mod:Class") or a callable."""
    kwargs = dict(env_kwargs or {})
    if callable(env):
        return env(**kwargs)
    import gymnasium as gym

    import envs  # noqa: F401  (registers the repo's ids)

    if env in gym.registry:
        return gym.make(env, disable_env_checker=True, **kwargs)
    if isinstance(env, str) and ":" in env:
        module, _, name = env.partition(":")
        return getattr(importlib.import_module(module), name)(**kwargs)
    raise ValueError(f"unknown env {env!r}: give a registered gymnasium id, 'module:Class' or a callable")


class StepResult(NamedTuple):
    obs: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict


# ====================================================================== worker side
def _format_exc(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def _handle(envs: dict[int, Any], cmd: str, payload: Any) -> Any:
    """Execute one command on this worker's envs. Per-env exceptions are returned, not raised."""
    if cmd == "reset":
        out = []
        for slot, kwargs in payload:
            try:
                obs, info = envs[slot].reset(**kwargs)
                out.append((slot, "ok", (obs, info)))
            except Exception as exc:
                out.append((slot, "error", f"{_format_exc(exc)}\n{traceback.format_exc(limit=8)}"))
        return out
    if cmd == "step":
        out = []
        for slot, action in payload:
            try:
                obs, reward, terminated, truncated, info = envs[slot].step(action)
                out.append((slot, "ok", (obs, float(reward), bool(terminated), bool(truncated), info)))
            except Exception as exc:
                out.append((slot, "error", _format_exc(exc)))
        return out
    if cmd == "call":
        name, args, slots = payload
        out = []
        for slot in slots:
            try:
                out.append((slot, "ok", getattr(envs[slot].unwrapped, name)(*args)))
            except Exception as exc:
                out.append((slot, "error", _format_exc(exc)))
        return out
    if cmd == "describe":
        env = envs[min(envs)].unwrapped
        splits = tuple(getattr(env, "splits", ()))
        return {
            "env_name": getattr(env, "env_name", type(env).__name__),
            "splits": splits,
            "eval_splits": tuple(getattr(env, "eval_splits", ())),
            "num_tasks": {s: int(env.num_tasks(s)) for s in splits},
        }
    if cmd == "pid":
        return os.getpid()
    raise ValueError(f"unknown pool command {cmd!r}")


def _build_envs(env, env_kwargs, slots) -> dict[int, Any]:
    return {slot: make_env(env, env_kwargs) for slot in slots}


def _worker_loop(conn, env, env_kwargs, slots) -> None:
    """Process/thread worker: build the envs, say ready (or why not), then serve commands."""
    try:
        envs = _build_envs(env, env_kwargs, slots)
        conn.send(("ready", os.getpid()))
    except BaseException as exc:  # report construction errors (e.g. missing data) to the parent
        conn.send(("failed", f"{_format_exc(exc)}\n{traceback.format_exc(limit=12)}"))
        return
    while True:
        try:
            cmd, payload = conn.recv()
        except (EOFError, OSError):
            break
        if cmd == "close":
            break
        try:
            result = _handle(envs, cmd, payload)
            conn.send(("ok", result))
        except BaseException as exc:
            conn.send(("error", _format_exc(exc)))
    for e in envs.values():
        try:
            e.close()
        except Exception:
            pass


def _process_main(conn, env, env_kwargs, slots) -> None:  # pragma: no cover - runs in a child process
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        _worker_loop(conn, env, env_kwargs, slots)
    finally:
        conn.close()


class _QueueConn:
    """One end of a thread 'pipe' (send/recv/poll like ``multiprocessing.Connection``)."""

    def __init__(self, inbox: queue.Queue, outbox: queue.Queue):
        self._in, self._out, self._peek = inbox, outbox, []

    def send(self, obj):
        self._out.put(obj)

    def recv(self):
        if self._peek:
            return self._peek.pop()
        obj = self._in.get()
        if obj is _CLOSED:
            raise EOFError
        return obj

    def poll(self, timeout=None):
        if self._peek:
            return True
        try:
            self._peek.append(self._in.get(timeout=timeout))
        except queue.Empty:
            return False
        if self._peek[-1] is _CLOSED:
            self._peek.clear()
            raise EOFError
        return True

    def close(self):
        self._out.put(_CLOSED)


_CLOSED = object()


class _Worker:
    """Parent-side handle of one worker (process, thread or inline)."""

    def __init__(self, wid: int, mode: str, env, env_kwargs, slots: list[int], ctx, start_timeout: float):
        self.wid, self.mode, self.slots = wid, mode, list(slots)
        self._env, self._env_kwargs, self._ctx = env, env_kwargs, ctx
        self.process = None
        self.thread = None
        self.pid = os.getpid()
        self._pending = None
        self._start(start_timeout)

    def _start(self, start_timeout: float) -> None:
        if self.mode == "inline":
            self.envs = _build_envs(self._env, self._env_kwargs, self.slots)
            return
        if self.mode == "process":
            parent, child = self._ctx.Pipe(duplex=True)
            self.process = self._ctx.Process(
                target=_process_main, args=(child, self._env, self._env_kwargs, self.slots),
                name=f"envpool-worker-{self.wid}", daemon=True,
            )
            self.process.start()
            child.close()
            self.conn = parent
        else:
            a, b = queue.Queue(), queue.Queue()
            self.conn = _QueueConn(a, b)
            child = _QueueConn(b, a)
            self.thread = threading.Thread(
                target=_worker_loop, args=(child, self._env, self._env_kwargs, self.slots),
                name=f"envpool-worker-{self.wid}", daemon=True,
            )
            self.thread.start()
        deadline = time.monotonic() + start_timeout
        msg = None
        try:
            while True:  # in short polls, so a worker that exits is seen at once (a grandchild may hold the pipe)
                left = deadline - time.monotonic()
                if self.conn.poll(max(0.0, min(1.0, left))):
                    msg = self.conn.recv()
                    break
                if left <= 0 or (self.process is not None and not self.process.is_alive()):
                    break
        except (EOFError, OSError):
            msg = None
        if msg is None:
            code = self.exit_code(wait=1.0)
            self.kill()
            if code is not None:
                raise RuntimeError(f"EnvPool worker {self.wid} exited with code {code} while building its "
                                   "environments, before it was ready (a crash or a kill: see the lines above, and "
                                   "the system log for an out-of-memory kill)")
            raise RuntimeError(f"EnvPool worker {self.wid} did not start within {start_timeout:.0f} s")
        if msg[0] == "failed":
            self.kill()
            raise RuntimeError(f"EnvPool worker {self.wid} could not build its environments:\n{msg[1]}")
        self.pid = msg[1]

    # -------------------------------------------------------------- requests
    def send(self, cmd: str, payload: Any) -> None:
        if self.mode == "inline":
            try:
                self._pending = ("ok", _handle(self.envs, cmd, payload))
            except Exception as exc:
                self._pending = ("error", _format_exc(exc))
            return
        self.conn.send((cmd, payload))

    def recv(self, timeout: float | None) -> tuple[str, Any]:
        """``("ok", result)``, ``("error", message)`` or ``("dead", why)``."""
        if self.mode == "inline":
            out, self._pending = self._pending, None
            return out
        try:
            if not self.conn.poll(timeout):
                return ("dead", f"no answer within {timeout:.1f} s (hung)")
            return self.conn.recv()
        except (EOFError, OSError, ConnectionError) as exc:
            code = self.process.exitcode if self.process is not None else None
            if self.process is not None:
                self.process.join(timeout=1.0)
                code = self.process.exitcode
            return ("dead", f"died (exit code {code}; {type(exc).__name__})")

    def exit_code(self, wait: float = 0.0) -> int | None:
        """The worker process's exit code (negative: killed by that signal), None while it runs (or for a thread)."""
        if self.process is None:
            return None
        if wait > 0 and self.process.exitcode is None:
            self.process.join(timeout=wait)
        return self.process.exitcode

    def kill(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=5.0)
        if self.thread is not None:
            try:
                self.conn.close()  # the abandoned thread exits when it next reads
            except Exception:
                pass

    def restart(self, start_timeout: float) -> None:
        self.kill()
        self._start(start_timeout)

    def close(self) -> None:
        if self.mode == "inline":
            for e in self.envs.values():
                try:
                    e.close()
                except Exception:
                    pass
            return
        try:
            self.conn.send(("close", None))
        except (OSError, EOFError, BrokenPipeError):
            pass
        if self.process is not None:
            self.process.join(timeout=5.0)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(timeout=5.0)
        if self.thread is not None:
            self.thread.join(timeout=5.0)


# ====================================================================== the pool
class EnvPool:
    """``num_envs`` env slots spread over ``num_workers`` workers (see module docstring).

    Args:
        env: gymnasium id ("TextCraft-v0", "ALFWorld-v0", "WebShop-v0"), "module:Class" or a callable
            (the callable must be picklable in process mode).
        num_envs: slots (P * G for training; chunk size for evaluation).
        num_workers: workers (default: the CPU count, at most ``num_envs``). Slot i lives on worker
            ``i mod num_workers``, so every worker holds copies of every group and the load stays
            balanced (ALFWorld's per-process caches make a game new to a worker cheap to load).
        mode: "process" | "thread" | "inline".
        env_kwargs: constructor arguments of every env (e.g. ``{"max_steps": 50}``).
        timeout_s: seconds one env operation may take; a call on a worker waits
            ``timeout_s * (its envs in the call)`` before declaring the worker hung.
        start_timeout_s: seconds a worker may take to build its envs.
        max_restarts: worker restarts allowed over the pool's life; the next one raises ``EnvWorkersFailed``
            (None: no limit).
        start_method: multiprocessing start method ("spawn" by default: safe with torch/CUDA in the
            parent; the main module needs an ``if __name__ == "__main__":`` guard).
    """

    def __init__(
        self,
        env: str | Callable[..., Any],
        num_envs: int,
        *,
        num_workers: int | None = None,
        mode: str = "process",
        env_kwargs: dict | None = None,
        timeout_s: float = 120.0,
        start_timeout_s: float = 600.0,
        max_restarts: int | None = None,
        start_method: str = "spawn",
    ):
        if mode not in ("process", "thread", "inline"):
            raise ValueError(f"EnvPool: mode={mode!r}; choose 'process', 'thread' or 'inline'")
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"EnvPool: num_envs={num_envs!r} must be a positive integer")
        if timeout_s <= 0:
            raise ValueError(f"EnvPool: timeout_s={timeout_s} must be > 0")
        if max_restarts is not None and (isinstance(max_restarts, bool) or not isinstance(max_restarts, int)
                                         or max_restarts < 0):
            raise ValueError(f"EnvPool: max_restarts={max_restarts!r} must be an integer >= 0, or None for no limit")
        self.max_restarts = max_restarts
        workers = (os.cpu_count() or 1) if num_workers is None else num_workers
        if mode == "inline":
            workers = 1
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"EnvPool: num_workers={num_workers!r} must be a positive integer")
        workers = min(workers, num_envs)
        self.env, self.num_envs, self.mode = env, num_envs, mode
        self.timeout_s, self.start_timeout_s = float(timeout_s), float(start_timeout_s)
        ctx = mp.get_context(start_method) if mode == "process" else None
        # slots are dealt to workers in turn (slot i -> worker i mod W): the G copies of a group, which cost
        # about the same, spread over the workers, so the load stays balanced as groups finish [choice]
        self._slot_worker = np.arange(num_envs, dtype=np.int64) % workers
        self._workers: list[_Worker] = []
        try:
            for w in range(workers):
                slots = np.flatnonzero(self._slot_worker == w).tolist()
                self._workers.append(_Worker(w, mode, env, env_kwargs, slots, ctx, self.start_timeout_s))
        except BaseException:
            self.close()
            raise
        self.live = np.zeros(num_envs, dtype=bool)  # (num_envs,) episode running
        self.group_of = np.full(num_envs, -1, dtype=np.int64)  # (num_envs,) group of the last reset, -1 idle
        self.tasks: list[Task | None] = [None] * num_envs
        self._last_obs = [""] * num_envs
        self._last_info: list[dict] = [{} for _ in range(num_envs)]
        self._lost: dict[int, str] = {}  # live slots whose worker was restarted: error to report
        self.restarts = 0
        self.restart_log: list[str] = []  # one line per restart, in order (the trainer prints the new ones)
        try:
            self._description = self._request_one(0, "describe", None)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ description
    @property
    def num_workers(self) -> int:
        return len(self._workers)

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self._description["splits"])

    @property
    def eval_splits(self) -> tuple[str, ...]:
        return tuple(self._description["eval_splits"])

    @property
    def env_name(self) -> str:
        return self._description["env_name"]

    def num_tasks(self, split: str) -> int:
        if split not in self._description["num_tasks"]:
            raise ValueError(f"EnvPool: unknown split {split!r}; the env has {list(self.splits)}")
        return self._description["num_tasks"][split]

    def worker_pids(self) -> list[int]:
        """OS process ids of the workers (this process's id for thread/inline workers)."""
        return [w.pid for w in self._workers]

    def worker_of(self, slot: int) -> int:
        return int(self._slot_worker[slot])

    def live_indices(self) -> list[int]:
        return np.flatnonzero(self.live).tolist()

    def any_live(self) -> bool:
        return bool(self.live.any())

    # ------------------------------------------------------------------ transport
    def _request_one(self, wid: int, cmd: str, payload: Any) -> Any:
        worker = self._workers[wid]
        worker.send(cmd, payload)
        status, result = worker.recv(self.timeout_s)
        if status != "ok":
            raise RuntimeError(f"EnvPool worker {wid} failed on {cmd!r}: {result}")
        return result

    def _scatter(self, cmd: str, per_worker: dict[int, list]) -> dict[int, tuple[str, Any]]:
        """Send ``per_worker[w]`` to each worker, then gather; dead/hung workers are restarted."""
        for wid, items in per_worker.items():
            try:
                self._workers[wid].send(cmd, items)
            except (OSError, EOFError, BrokenPipeError):
                pass  # found dead in recv
        out = {}
        start = time.monotonic()
        for wid, items in per_worker.items():
            budget = self.timeout_s * max(1, len(items))
            remaining = max(0.0, start + budget - time.monotonic())
            status, result = self._workers[wid].recv(remaining)
            if status == "dead":
                self._restart(wid, result)
            out[wid] = (status, result)
        return out

    def _restart(self, wid: int, why: str) -> None:
        worker = self._workers[wid]
        message = f"env worker {wid} (pid {worker.pid}) {why}; it was restarted and this episode truncated"
        for slot in worker.slots:
            if self.live[slot]:  # stays live until its next step reports the loss
                self._lost[slot] = message
        self.restarts += 1
        worker.kill()
        code = worker.exit_code(wait=1.0)
        held = sum(1 for slot in worker.slots if self.live[slot])
        limit = "no limit" if self.max_restarts is None else f"at most {self.max_restarts}"
        line = (f"env worker {wid} (pid {worker.pid}) {why}, exit code {code}: restart {self.restarts} ({limit}); "
                f"{held} live episode(s) it held end truncated")
        self.restart_log.append(line)
        if self.max_restarts is not None and self.restarts > self.max_restarts:
            log.error(line)
            raise EnvWorkersFailed(
                f"env workers of {self.env_name if hasattr(self, '_description') else self.env} were restarted "
                f"{self.restarts} times, more than the {self.max_restarts} allowed (env.max_worker_restarts); the "
                f"last: {line}. Find why they die (memory: an out-of-memory kill shows exit code -9; a crash in the "
                "environment), then rerun the same command to resume, or raise env.max_worker_restarts")
        log.warning(line)
        worker.restart(self.start_timeout_s)

    def _by_worker(self, items: list[tuple[int, Any]]) -> dict[int, list]:
        per: dict[int, list] = {}
        for slot, value in items:
            per.setdefault(int(self._slot_worker[slot]), []).append((slot, value))
        return per

    # ------------------------------------------------------------------ API
    def reset(self, tasks: Sequence[Task], group_size: int = 1) -> tuple[list[str], list[dict]]:
        """Reset ``len(tasks) * group_size`` envs: slot ``g * group_size + c`` plays ``tasks[g]`` (copy c).

        Returns ``(obs, infos)`` for those slots, in slot order. Other slots are idle (not live) until
        the next reset. Raises ``ValueError`` when there are too few slots.
        """
        if not isinstance(group_size, int) or group_size < 1:
            raise ValueError(f"EnvPool.reset: group_size={group_size!r} must be a positive integer")
        n = len(tasks) * group_size
        if n > self.num_envs:
            raise ValueError(
                f"EnvPool.reset: {len(tasks)} task(s) x group_size {group_size} = {n} envs, but the pool has "
                f"{self.num_envs}; build the pool with num_envs >= {n} or pass fewer tasks"
            )
        self.live[:] = False
        self.group_of[:] = -1
        self._lost.clear()
        items = []
        for g, task in enumerate(tasks):
            if not isinstance(task, Task):
                raise TypeError(f"EnvPool.reset: tasks[{g}] is {type(task).__name__}, expected envs.pool.Task")
            for c in range(group_size):
                slot = g * group_size + c
                items.append((slot, task.reset_kwargs()))
                self.tasks[slot] = task
                self.group_of[slot] = g
        for slot in range(n, self.num_envs):
            self.tasks[slot] = None
        results = self._reset_items(items, "EnvPool.reset")
        self._lost.clear()
        return self._started(results, range(n))

    def refill(self, assignments: Sequence[tuple[int, Task]]) -> tuple[list[str], list[dict]]:
        """Reset only the idle slots of ``assignments`` (``(slot, task)`` pairs): each plays its task, the other
        slots (live or not) are untouched. What an evaluation that refills its slots calls when episodes end.

        Returns ``(obs, infos)`` in the order of ``assignments``. ``group_of`` of a refilled slot is -1 (it belongs
        to no group reset). Raises ``ValueError`` for a live or out-of-range slot.
        """
        if len({int(slot) for slot, _ in assignments}) != len(assignments):
            raise ValueError("EnvPool.refill: a slot is given twice")
        items = []
        for slot, task in assignments:
            slot = int(slot)
            if not 0 <= slot < self.num_envs:
                raise ValueError(f"EnvPool.refill: env slot {slot} out of range (pool has {self.num_envs} envs)")
            if self.live[slot]:
                raise ValueError(f"EnvPool.refill: env slot {slot} is live; refill only slots whose episode ended")
            if not isinstance(task, Task):
                raise TypeError(f"EnvPool.refill: slot {slot} got {type(task).__name__}, expected envs.pool.Task")
            items.append((slot, task.reset_kwargs()))
            self.tasks[slot] = task
            self.group_of[slot] = -1
        results = self._reset_items(items, "EnvPool.refill")
        for slot, _ in items:
            self._lost.pop(slot, None)
        return self._started(results, [slot for slot, _ in items])

    def _started(self, results: dict[int, tuple[str, dict]], slots) -> tuple[list[str], list[dict]]:
        """Record the reset ``results`` of ``slots`` (live, with their first observation) and return
        ``(obs, infos)`` in the order of ``slots``."""
        obs, infos = [], []
        for slot in slots:
            o, info = results[slot]
            self._last_obs[slot], self._last_info[slot] = o, info
            self.live[slot] = True
            obs.append(o)
            infos.append(info)
        return obs, infos

    def release(self, slots: Sequence[int]) -> None:
        """Mark ``slots`` idle without stepping them (an episode given up, e.g. at a rollout's turn bound), so that
        ``refill`` may reuse them."""
        for slot in slots:
            slot = int(slot)
            if not 0 <= slot < self.num_envs:
                raise ValueError(f"EnvPool.release: env slot {slot} out of range (pool has {self.num_envs} envs)")
            self.live[slot] = False
            self._lost.pop(slot, None)

    def _reset_items(self, items: list[tuple[int, dict]], who: str) -> dict[int, tuple[str, dict]]:
        """Reset the slots of ``items`` (``(slot, reset kwargs)``) on their workers, a dead worker retried once."""
        results: dict[int, tuple[str, dict]] = {}
        pending = self._by_worker(items)
        for attempt in range(2):
            replies = self._scatter("reset", pending)
            retry: dict[int, list] = {}
            for wid, (status, result) in replies.items():
                if status == "dead":
                    if attempt == 1:
                        raise RuntimeError(f"{who}: env worker {wid} {result} twice during reset")
                    retry[wid] = pending[wid]
                    continue
                if status == "error":
                    raise RuntimeError(f"{who}: env worker {wid} failed: {result}")
                for slot, st, value in result:
                    if st != "ok":
                        raise RuntimeError(f"{who}: env slot {slot} ({self.tasks[slot]}) failed:\n{value}")
                    results[slot] = value
            if not retry:
                break
            pending = retry
        return results

    def _failure(self, slot: int, message: str) -> StepResult:
        info = dict(self._last_info[slot])
        info.update(noop=True, won=False, error=message)
        info["step"] = int(info.get("step", 0)) + 1
        self.live[slot] = False
        return StepResult(self._last_obs[slot], 0.0, False, True, info)

    def step(self, indices: Sequence[int], actions: Sequence[Any]) -> list[StepResult]:
        """Step the live envs ``indices`` with ``actions`` (same length; any action text is accepted).

        Returns one ``StepResult(obs, reward, terminated, truncated, info)`` per index, in order. An env
        whose episode ends (terminated or truncated) stops being live.
        """
        idx = [int(i) for i in indices]
        if len(idx) != len(actions):
            raise ValueError(f"EnvPool.step: {len(idx)} indices but {len(actions)} actions")
        if len(set(idx)) != len(idx):
            raise ValueError("EnvPool.step: duplicate env indices")
        for i in idx:
            if not 0 <= i < self.num_envs:
                raise ValueError(f"EnvPool.step: env index {i} out of range (pool has {self.num_envs} envs)")
            if not self.live[i]:
                raise ValueError(
                    f"EnvPool.step: env {i} is not live (its episode ended or it was never reset); "
                    f"step only pool.live_indices()"
                )
        out: dict[int, StepResult] = {}
        items = []
        for i, action in zip(idx, actions):
            if i in self._lost:
                out[i] = self._failure(i, self._lost.pop(i))
            else:
                items.append((i, action))
        per_worker = self._by_worker(items)
        replies = self._scatter("step", per_worker)
        for wid, (status, result) in replies.items():
            slots = [slot for slot, _ in per_worker[wid]]
            if status == "dead":
                for slot in slots:
                    out[slot] = self._failure(slot, self._lost.pop(slot, f"env worker {wid} {result}"))
                continue
            if status == "error":
                for slot in slots:
                    out[slot] = self._failure(slot, f"env worker {wid} failed: {result}")
                continue
            for slot, st, value in result:
                if st != "ok":
                    out[slot] = self._failure(slot, f"env {slot} raised during step: {value}")
                    continue
                obs, reward, terminated, truncated, info = value
                self._last_obs[slot], self._last_info[slot] = obs, info
                if terminated or truncated:
                    self.live[slot] = False
                out[slot] = StepResult(obs, reward, terminated, truncated, info)
        return [out[i] for i in idx]

    def call(self, indices: Sequence[int], method: str, *args: Any) -> list[Any]:
        """``env.unwrapped.<method>(*args)`` on each env of ``indices`` (e.g. "expert_action")."""
        items = [(int(i), None) for i in indices]
        per = {w: (method, args, [s for s, _ in v]) for w, v in self._by_worker(items).items()}
        out: dict[int, Any] = {}
        for wid, payload in per.items():
            self._workers[wid].send("call", payload)
        for wid in per:
            status, result = self._workers[wid].recv(self.timeout_s * max(1, len(per[wid][2])))
            if status == "dead":
                self._restart(wid, result)
                raise RuntimeError(f"EnvPool.call({method!r}): env worker {wid} {result}")
            if status != "ok":
                raise RuntimeError(f"EnvPool.call({method!r}): worker {wid} failed: {result}")
            for slot, st, value in result:
                if st != "ok":
                    raise RuntimeError(f"EnvPool.call({method!r}) on env {slot}: {value}")
                out[slot] = value
        return [out[int(i)] for i in indices]

    def expert_actions(self, indices: Sequence[int]) -> list[str]:
        """The expert's next action for each env of ``indices``."""
        return self.call(indices, "expert_action")

    def close(self) -> None:
        for w in getattr(self, "_workers", []):
            try:
                w.close()
            except Exception:
                pass
        self._workers = []

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass
