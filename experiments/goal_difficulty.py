"""How often a model wins each training goal at the rollout temperature: the table that picks a learning study's goals.

    python -m experiments.goal_difficulty --model $BIPACE_CACHE/warmstart/textcraft-tiny-<key>/final \\
        --tasks 0-59 --episodes 16 --out results/learning/goal_difficulty.md

Plays ``--episodes`` episodes of every task of ``--split`` (env seeds ``1000 * task + copy``) at ``--temperature``
(default 1.0, RL's rollout temperature [GiGPO]) with the prompt RL uses from that model: a warm-start folder is played
with the env options, prompt history and response cap it was trained with (``warmstart.json``). The learning study
(configs/cpu/textcraft_learning.yaml) trains on goals the warm start wins rarely but not never, so that RL has room to
improve and wins to learn from. Prints (and with ``--out`` writes) one row per task: wins / episodes.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from common.tables import emit_table
from envs.paths import portable_path


def _tasks(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi) + 1) if hi else [int(lo)])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.goal_difficulty", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a model folder (a warm start's final/)")
    ap.add_argument("--env", default="TextCraft-v0", help="gymnasium id (default TextCraft-v0)")
    ap.add_argument("--split", default="train")
    ap.add_argument("--tasks", default="0-59", help="task indices: ranges and lists, e.g. 0-59 or 3,23")
    ap.add_argument("--episodes", type=int, default=16, help="episodes per task (default 16)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=7, help="sampler seed (default 7)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="also write the table (markdown) here")
    args = ap.parse_args(argv)
    try:
        tasks = _tasks(args.tasks)
    except ValueError:
        ap.error(f"--tasks {args.tasks!r} must look like 0-59 or 3,23")
    model_dir = Path(args.model).expanduser()
    if not (model_dir / "config.json").is_file():
        print(f"error: --model {model_dir} is not a model folder (no config.json)", file=sys.stderr)
        return 2
    if args.episodes < 1 or not tasks:
        ap.error("--episodes must be >= 1 and --tasks must name at least one task")

    import torch

    from agents.models import load_model, load_tokenizer
    from agents.rollout import prompt_config_for
    from envs.pool import Task
    from warmstart import sft

    torch.set_num_threads(max(1, args.threads))
    ws = {}
    if (model_dir / "warmstart.json").is_file():
        ws = json.loads((model_dir / "warmstart.json").read_text())
    settings = ws.get("settings", {})
    env_kwargs = dict(ws.get("env_kwargs") or {})
    history = int(settings.get("history_length", 2))
    max_tokens = int(settings.get("max_response_tokens", 128))
    model, tok = load_model(model_dir, dtype="float32"), load_tokenizer(model_dir)
    plays = [Task(args.split, k, 1000 * k + c) for k in tasks for c in range(args.episodes)]
    t0 = time.perf_counter()
    with sft.acting(model, tok, args.env, env_kwargs=env_kwargs, prompt_config=prompt_config_for(tok, 2048, history),
                    batch_envs=64) as agent:
        res = sft.play(agent, plays, sampling=sft.play_sampling(args.temperature, max_tokens), seed=args.seed)
    wins: dict[int, list[bool]] = {k: [] for k in tasks}
    names: dict[int, str] = {}
    for e in res.episodes:
        wins[e.task[1]].append(e.won)
    import gymnasium as gym

    import envs  # noqa: F401  (registers the ids)

    env = gym.make(args.env, **env_kwargs)
    for k in tasks:
        _, info = env.reset(seed=0, options={"split": args.split, "task_index": k})
        names[k] = str(info.get("task", ""))
    lines = [f"# Wins per {args.split} task at T = {args.temperature:g}",
             "",
             f"Command: `python -m experiments.goal_difficulty --model {portable_path(model_dir.resolve())} --tasks "
             f"{args.tasks} "
             f"--episodes {args.episodes}`; prompt history {history}, env options {env_kwargs}, "
             f"{time.perf_counter() - t0:.0f} s. Overall {res.success:.3f}.",
             "", "| task | goal | wins |", "|---|---|---|"]
    lines += [f"| {k} | {names[k]} | {sum(wins[k])}/{len(wins[k])} |" for k in tasks]
    emit_table("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
