"""Finding, building and announcing a cached warm start for a study or a sweep: the ``experiments.warmstart``
options of a run config's ``sft.warmstart``, where its cache entry is (``find_warmstart``), the command that builds
it (``warmstart_command``, ``run_warmstart``), the measured time of the builds made so far (``warmstart_estimate``),
and the run-config overrides that start RL from it (``warmstart_overrides``). The cache itself (layout, key) is
``warmstart.recipe``'s and ``warmstart.config``'s.
"""
from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

from common.fsio import ConsoleCopy, SettledLines
from envs.paths import portable_path, portable_text

__all__ = ["warmstart_cli_args", "warmstart_estimate", "find_warmstart", "warmstart_command",
           "missing_warmstart_message", "run_warmstart", "warmstart_overrides", "WARMSTART_MINUTES"]

REPO = Path(__file__).resolve().parents[1]


def warmstart_cli_args(settings: dict) -> list[str]:
    """``python -m experiments.warmstart`` options of a preset's ``sft.warmstart`` mapping (checked by
    ``from_run_config``), in its order: ``{epochs: 20, dagger_rounds: 0}`` -> ``--epochs 20 --dagger-rounds 0``."""
    out: list[str] = []
    for k, v in settings.items():
        text = json.dumps(v) if isinstance(v, (dict, list)) else ("true" if v is True else "false" if v is False
                                                                   else str(v))
        out += ["--" + k.replace("_", "-"), text]
    return out


def _is_model_folder(p: Path) -> bool:
    return (p / "config.json").is_file() and any(p.glob("*.safetensors"))


def _config_for(env: str, extra: list[str]):
    """The ``WarmStartConfig`` that ``python -m experiments.warmstart --env <env> <extra>`` builds, or None."""
    try:
        from warmstart.recipe import cli_parser, config_from_args

        return config_from_args(cli_parser().parse_args(["--env", env, *extra]))
    except (ImportError, ValueError, TypeError, SystemExit):
        return None


#: measured wall times of warm-start builds by cache key, on the 2-core machine with nothing else running
#: (results/warmstart/README.md has each build's row): the estimate a study prints before it builds one
WARMSTART_MINUTES: dict[str, str] = {
    "ee351835b46a": "~24 minutes on one core; row 15 of results/warmstart/README.md, measured 2026-12-01 to 12-03",
    "fd697b49a966": "~26 minutes on one core; row 13 of results/warmstart/README.md",
    "ec49e7aed20f": "~13-14 minutes on 2 idle cores, 25 CPU minutes; row 17 of results/warmstart/README.md",
    "6c0ca8f35c2f": "~9 minutes on 2 idle cores, 15-17 CPU minutes; row 24 of results/warmstart/README.md",
}


def warmstart_estimate(env: str, extra: list[str]) -> str:
    """How long the warm start ``python -m experiments.warmstart --env <env> <extra>`` took here, when measured."""
    from warmstart.config import cache_key

    cfg = _config_for(env, extra)
    measured = WARMSTART_MINUTES.get(cache_key(cfg)) if cfg is not None else None
    return measured or "no measured time for these settings; results/warmstart/README.md lists the builds measured"


def find_warmstart(env: str, printed: list[str] | None = None, extra: list[str] | None = None) -> Path | None:
    """The final model folder of the default warm start of ``env``, or None.

    Looked up, in order: a model folder printed on the last lines of ``experiments.warmstart``'s output; the
    cache entry of ``python -m experiments.warmstart --env <env> <extra>`` (the study's settings; ``extra=[]``: the
    defaults); only when ``extra`` is None, the newest finished entry ``$BIPACE_CACHE/warmstart/<env>-*/final`` (with
    its ``DONE`` marker).
    """
    for line in reversed(printed or []):
        line = line.strip()
        value = line.split(": ", 1)[-1].split("; ")[0]  # "model: <path>", "done: <path>; ...": spaces allowed
        for tok in [value, *reversed(line.split())]:
            p = Path(tok.strip("'\"`,;:()"))
            if p.is_absolute() and _is_model_folder(p):
                return p
    try:
        from warmstart.recipe import cache_folder

        cfg = _config_for(env, list(extra or []))
        folder = cache_folder(cfg) if cfg is not None else None
        if folder is not None and (folder / "DONE").is_file() and _is_model_folder(folder / "final"):
            return folder / "final"
        if extra is not None:  # the study's own setting is not built yet: another setting's entry would mislead
            return None
    except (ImportError, ValueError, TypeError):
        pass
    from envs.paths import cache_dir

    root = cache_dir("warmstart", create=False)
    done = sorted((p for p in root.glob(f"{env}-*") if (p / "DONE").is_file() and _is_model_folder(p / "final")),
                  key=lambda p: (p / "DONE").stat().st_mtime)
    return done[-1] / "final" if done else None


WARMSTART_MODULE = "experiments.warmstart"
"""The warm-start command line (``python -m experiments.warmstart --env <env>``); it wraps ``warmstart.recipe``."""


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def warmstart_command(env: str, extra: list[str] = ()) -> list[str] | None:
    """The command that builds (or finds cached) the warm start of ``env`` in this checkout, or None.

    ``python -m experiments.warmstart --env <env> [extra]`` when that module exists; else, when only the library
    ``warmstart.recipe`` exists, a ``python -c`` call of ``warm_start(WarmStartConfig(env=<env>))`` (its default
    settings; ``extra`` is then refused, it belongs to the command line); else None.
    """
    if _has_module(WARMSTART_MODULE):
        return [sys.executable, "-m", WARMSTART_MODULE, "--env", env, *extra]
    if _has_module("warmstart.recipe"):
        if extra:
            raise RuntimeError(f"--warmstart-args {shlex.join(extra)!r} are options of `python -m {WARMSTART_MODULE}`, "
                               "which this checkout does not have (only warmstart/recipe.py): drop them, or pass "
                               "--init-from <model folder>")
        code = ("import sys; from warmstart.recipe import WarmStartConfig, warm_start; "
                "print('[warmstart] final model folder:', warm_start(WarmStartConfig(env=sys.argv[1])), flush=True)")
        return [sys.executable, "-c", code, env]
    return None


def missing_warmstart_message(env: str) -> str:
    """What to do when this checkout cannot make the warm start (the command that makes it, the alternatives)."""
    return (f"the SFT warm start of {env} is not cached and this checkout cannot build it: "
            f"`python -m {WARMSTART_MODULE} --env {env}` makes it (it comes with warmstart/recipe.py, branch `sft`; "
            f"`git merge main` once it has landed). Until then pass --init-from <model folder> (a warm-started "
            "Hugging Face folder, handed to the runs as sft.init_from) or --no-warmstart (RL from the preset's "
            "model as it is: a random tiny model learns nothing, pipeline checks only)")


def _drop_repeated_cache_hit(log_path: Path, start: int) -> None:
    """Undo the bytes a warm-start call appended to ``log_path`` from offset ``start`` when they are a cache-hit
    report already in the log (a study called again finds the same cached model): the log keeps the build and one
    report per distinct cache entry instead of a copy per call (the call's own timing is ignored)."""
    data = log_path.read_bytes()
    new, before = (re.sub(rb"this call [0-9.]+ s", b"", part) for part in (data[start:], data[:start]))
    if new.startswith(b"[warmstart] cache hit") and new in before:
        with log_path.open("r+b") as log:
            log.truncate(start)


def _portable_log(log_path: Path, start: int) -> None:
    """Rewrite the bytes appended from offset ``start`` with portable paths (``envs.paths.portable_text``): study
    folders are committed, and a log must not name this machine's folders."""
    data = log_path.read_bytes()
    new = portable_text(data[start:].decode("utf-8", "replace")).encode()
    if new != data[start:]:
        with log_path.open("r+b") as log:
            log.seek(start)
            log.write(new)
            log.truncate()


def run_warmstart(env: str, extra: list[str], log_path: Path) -> Path:
    """Run (or find cached) the warm start of ``env`` (``warmstart_command``); its output goes to the terminal and
    ``log_path``. Returns the final model folder; raises ``RuntimeError`` with the fix when it cannot."""
    cmd = warmstart_command(env, extra)
    if cmd is None:
        raise RuntimeError(missing_warmstart_message(env))
    shown = shlex.join(["python", *cmd[1:]]) if cmd[1] == "-m" else f"warmstart.recipe.warm_start(env={env!r})"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    print(f"[study] warm start: {shown} (cached after the first run)", flush=True)
    with subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc, \
            log_path.open("ab") as log:
        start = log.tell()
        buf = b""
        settled = SettledLines()  # the log keeps the progress bars' last frames
        sys.stdout.flush()
        screen = ConsoleCopy(sys.stdout)  # a terminal gets the bars as drawn, a redirected output settled lines
        for chunk in iter(lambda: proc.stdout.read1(4096), b""):
            screen(chunk)
            log.write(settled.feed(chunk))
            buf = (buf + chunk)[-8192:]
        log.write(settled.close())
        screen.close()
        rc = proc.wait()
    _portable_log(log_path, start)
    _drop_repeated_cache_hit(log_path, start)
    tail = buf.decode("utf-8", "replace").replace("\r", "\n").splitlines()[-20:]
    if rc != 0:
        raise RuntimeError(f"`{shown}` failed with exit status {rc}: see {log_path} (its last lines are above)")
    folder = find_warmstart(env, tail, extra=list(extra))
    if folder is None:
        raise RuntimeError(f"`{shown}` finished but no warm-start model folder was found (looked in its output "
                           f"and under $BIPACE_CACHE/warmstart/{env}-*/final); pass --init-from <folder>")
    return folder


def warmstart_overrides(folder: Path, preset_model_path: str, preset_history: int | None = None) -> list[str]:
    """Overrides that start RL from a warm-started folder with the settings it was trained under.

    ``sft.enabled=true sft.init_from=<folder>``; ``env.kwargs.<k>=<v>`` for the env options the warm start used
    (``final/warmstart.json``: TextCraft's ``show_inventory``, which changes what the model sees), except
    ``max_steps``: the RL horizon is the preset's ``env.max_steps``; ``rollout.history_length`` when the warm
    start was trained on prompts with another number of past turns (``settings.history_length``), so RL prompts
    look like the ones it learned on; and, when the folder is a tiny Qwen2 whose shape differs from the preset's
    ``tiny:`` spec, a ``model.path`` spec of its shape, so that run folders are named after the model that is
    really trained.
    """
    folder = Path(folder)
    ov = ["sft.enabled=true", f"sft.init_from={portable_path(folder)}"]
    info = {}
    for cand in (folder / "warmstart.json", folder.parent / "final" / "warmstart.json"):
        if cand.is_file():
            info = json.loads(cand.read_text())
            break
    for k, v in sorted((info.get("env_kwargs") or {}).items()):
        if k != "max_steps":
            ov.append(f"env.kwargs.{k}={json.dumps(v)}")
    hist = (info.get("settings") or {}).get("history_length")
    if isinstance(hist, int) and not isinstance(hist, bool) and hist != preset_history:
        ov.append(f"rollout.history_length={hist}")
    if preset_model_path.startswith("tiny:") and (folder / "config.json").is_file():
        from trainer.models import parse_tiny_spec

        c = json.loads((folder / "config.json").read_text())
        want = {"layers": c.get("num_hidden_layers"), "hidden": c.get("hidden_size"),
                "heads": c.get("num_attention_heads")}
        have = parse_tiny_spec(preset_model_path)
        if any(v is not None and getattr(have, k) != v for k, v in want.items()):
            ov.append("model.path=tiny:" + ",".join(f"{k}={v}" for k, v in want.items() if v is not None))
    return ov
