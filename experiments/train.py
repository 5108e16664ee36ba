"""Run one experiment: one environment, model, estimator and seed.

    python -m experiments.train --config configs/cpu/textcraft_tiny.yaml estimator.name=gigpo seed=1
    python -m experiments.train --help-config            # every config key with its meaning

On GPUs, launch the same command under ``torchrun --nproc_per_node W -m experiments.train ...`` or
``deepspeed --num_gpus W --module experiments.train ...`` (multi-node: a hostfile); each of the W ranks owns
``env.groups / W`` prompt groups end to end (its environment pool, rollout engine and advantages), DeepSpeed
reduces gradients, rank 0 writes the run folder. ``env.groups`` must be divisible by W. The ``--local_rank=N``
that the ``deepspeed`` launcher adds to each rank's command is accepted (on CPU: ``DS_ACCELERATOR=cpu deepspeed
--num_accelerators 2 --module experiments.train ...`` runs 2 gloo ranks).

The run folder (``results/runs/<env>/<model>/<method>/seed_<k>/`` or ``output_dir``) is described in
``trainer/run_folder.py``, with what protects it (a lock, its identity, its logs). Behaviour on an existing
folder: a finished run says so and exits 0; an unfinished one (killed, failed, or extended with a larger
``trainer.iterations``) resumes from its newest usable checkpoint; ``--restart`` (``trainer.resume=false``)
starts it over, keeping the old logs in ``<run>/restarted_<date>/``. A folder another process is running, one
whose experiment is unknown, or one with logs but no usable checkpoint is refused (exit 2, nothing changed).

Exit status: 0 finished (or nothing to do), 2 configuration error, a refused run folder or a stale DeepSpeed build
lock (nothing computed; the message names the file or field),
3 the run stopped on NaN/Inf or a broken estimator output (``run.json`` says why; it resumes from its last
checkpoint once fixed), 4 the disk is full (``run.json`` says ``interrupted``; free space and rerun to resume),
130 interrupted (resumable), 1 any other error.
"""
from __future__ import annotations

import os
import signal
import sys
import traceback

__all__ = ["main"]

PROG = "python -m experiments.train"


def main(argv: list[str] | None = None, *, runs_root: str = "results/runs") -> int:
    """The command line (see the module docstring)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from trainer.config import ConfigError, config_from_argv
    from trainer.run_folder import RunFolder, RunFolderError
    from warmstart.config import from_run_config

    cfg = config_from_argv(argv, prog=PROG)  # exits with status 2 on a bad key or value
    rank = int(os.environ.get("RANK", "0"))
    folder = RunFolder(cfg, runs_root, rank=rank)
    lock = None
    try:
        try:
            cfg.check_paths()
            cfg.check_warm_start()  # before the run folder is touched
            from_run_config(cfg)  # sft.warmstart: the warm start's settings, checked by their own package
            cfg.check_before_compute()
            folder.check_location()
            if rank == 0:
                lock = folder.lock()  # held until this process ends: no second process on the folder
            folder.check_compatible()  # first: a changed experiment must not pass as "already finished"
            if cfg.trainer.resume and folder.is_finished():
                if rank == 0:
                    print(f"[train] {folder.path} is already finished ({cfg.trainer.iterations} iterations): nothing "
                          "to do (raise trainer.iterations to extend it, or rerun with --restart to start it over)")
                return 0
            folder.check_resumable(world_size=int(os.environ.get("WORLD_SIZE", "1")))  # before compute
        except RunFolderError as e:
            print(f"{PROG}: refused: {e}", file=sys.stderr)
            return 2
        except ConfigError as e:
            print(f"{PROG}: config error: {e}", file=sys.stderr)
            return 2
        except OSError as e:  # the run folder cannot be made or written (a read-only or special file system)
            print(f"{PROG}: the run folder {folder.path} cannot be created or written: "
                  f"{e.strerror or e} ({e.filename or folder.path}); set output_dir to a folder this user can write "
                  "(or fix its permissions), then rerun", file=sys.stderr)
            return 2
        if not cfg.trainer.resume:
            kept = folder.start_fresh()
            if kept is not None:
                print(f"[train] starting {folder.path} over: the previous run's logs are in {kept}")
        return _train(cfg, folder)
    finally:
        if lock is not None:
            lock.release()


def _train(cfg, folder) -> int:
    from common.fsio import disk_full
    from envs.pool import EnvWorkersFailed
    from groundtruth.live import probe_for
    from trainer.config import ConfigError
    from trainer.loop import Trainer, TrainingFailed
    from trainer.ppo_actor import BuildLockError, NonFiniteError
    from trainer.run_folder import RunFolderError

    trainer = Trainer(cfg, folder, batch_probe=probe_for(cfg))
    try:
        trainer.run()
        return 0
    except BuildLockError as e:  # at the start of DeepSpeed, before any compute
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    except RunFolderError as e:  # found once the checkpoints are read: nothing was written
        print(f"{PROG}: refused: {e}", file=sys.stderr)
        return 2
    except ConfigError as e:  # problems only the built environment can reveal (splits, world size)
        print(f"{PROG}: config error: {e}", file=sys.stderr)
        folder.write_info("failed", _done(trainer, folder), error=f"config error: {e}")
        return 2
    except (NonFiniteError, TrainingFailed, EnvWorkersFailed, FloatingPointError) as e:
        workers = isinstance(e, EnvWorkersFailed) or isinstance(e.__cause__, EnvWorkersFailed)
        msg = f"training stopped: {e}" if workers else f"training stopped at a non-finite or broken value: {e}"
        print(f"{PROG}: {msg}", file=sys.stderr)
        import logging

        logging.getLogger("trainer.loop").error(msg)
        folder.write_info("failed", _done(trainer, folder), world_size=trainer.world_size, error=msg)
        return 3
    except KeyboardInterrupt as e:
        how = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
        print(f"{PROG}: {how}; rerun the same command to resume from iteration {_done(trainer, folder)}",
              file=sys.stderr)
        folder.write_info("interrupted", _done(trainer, folder), world_size=trainer.world_size)
        return 143 if isinstance(e, Terminated) else 130
    except Exception as e:
        full = disk_full(e)
        if full is not None:
            return _disk_full(folder, trainer, full)
        folder.write_info("failed", _done(trainer, folder), world_size=trainer.world_size,
                          error=f"{type(e).__name__}: {e}")
        import logging

        logging.getLogger("trainer.loop").error("run failed:\n%s", traceback.format_exc())
        raise
    finally:
        trainer.close()
        if trainer.world_size > 1:
            from trainer.ppo_actor import shutdown_distributed

            shutdown_distributed()


def _done(trainer, folder) -> int:
    """Iteration of the newest checkpoint: this process's, or (if it saved or loaded none yet) the folder's."""
    return trainer.saved_iteration or (folder.status().iterations_done if folder.checkpoints.exists() else 0)


def _disk_full(folder, trainer, err: OSError) -> int:
    """One message for a full disk: which path, how much space a checkpoint takes, how to resume; temporary
    files removed and ``run.json`` marked ``interrupted`` (exit status 4)."""
    import logging
    import shutil

    from common.fsio import format_bytes, free_bytes

    logging.raiseExceptions = False  # a log handler that cannot write must not print a second traceback
    for p in [*folder.path.glob("*.tmp*"), *folder.checkpoints.glob("*.tmp*"), *folder.checkpoints.glob("*.partial")]:
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    need = folder.checkpoint_bytes()
    where = err.filename or folder.path
    done = _done(trainer, folder)
    msg = (f"the disk is full: writing {where} failed ({err.strerror or err}). The file system of {folder.path} has "
           f"{format_bytes(free_bytes(folder.path))} free; a checkpoint of this run takes about "
           f"{format_bytes(need) if need else 'as much as the model and its optimizer state'}, plus the logs. Free "
           f"that much space (or more) and rerun the same command: the run resumes from iteration {done}, its last "
           "complete checkpoint; nothing it holds was lost.")
    print(f"{PROG}: {msg}", file=sys.stderr)
    try:
        folder.write_info("interrupted", done, world_size=trainer.world_size, error=f"disk full: {where}")
    except OSError:
        print(f"{PROG}: run.json could not be updated either (the disk is still full); it still says 'running'",
              file=sys.stderr)
    logging.getLogger("trainer.loop").error(msg)
    return 4


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the run is (``scancel``, a cluster's preemption, ``timeout``, ``docker stop``): the run
    stops as on Ctrl-C, at its last checkpoint, marked ``interrupted``, and exits 143 (128 + SIGTERM)."""


def _on_sigterm(signum, frame):
    """The first SIGTERM stops the run; later ones are ignored while it saves its state and marks its folder (Slurm
    signals every process of a job, and a sweep's job passes the signal on as well: two may arrive at once)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated()


def honour_stop_signals() -> None:
    """SIGINT and SIGTERM are how a sweep, Slurm (``scancel``, preemption) or a user stops a run at its last
    checkpoint (exit 130 and 143). A process started in the background by a non-interactive shell (``cmd &`` in a
    script) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler, so the run would go on
    to its end: restore the handler. SIGTERM's default would kill the run without marking its folder: raise
    ``Terminated`` instead (a SIGTERM deliberately ignored by the caller stays ignored)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


if __name__ == "__main__":
    honour_stop_signals()
    sys.exit(main())
