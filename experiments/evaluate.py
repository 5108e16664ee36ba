"""Evaluate a model folder on an environment's fixed evaluation splits, outside of training.

    python -m experiments.evaluate --model $BIPACE_CACHE/warmstart/textcraft-tiny-<key>/final
    python -m experiments.evaluate --model DIR --splits eval_depth2,train --temperature 0 --max-steps 15
    python -m experiments.evaluate --model DIR --repeats 3 --json out.json

Plays the fixed, seeded task list of each split (``envs.pool.eval_tasks``, the list RL runs evaluate on) with the
Hugging Face engine (``warmstart.sft.evaluate``), sampled at ``--temperature`` (0 = greedy; default 0.4, the
protocol's validation temperature [GiGPO]). ``--repeats R`` plays the list R times with evaluation seeds
``seed, seed+1, ...`` (other env seeds and sampler seeds) and reports the mean and each repeat. A warm-start folder
(one with ``warmstart.json``) is played with the env options, prompt history and response cap it was trained
with unless the options below say otherwise; ``--max-steps`` sets the horizon (default: the RL presets' 20 for
TextCraft, else the env's).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m experiments.evaluate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a Hugging Face model folder (e.g. a warm start's final/)")
    ap.add_argument("--env", default=None, help="textcraft | alfworld | webshop or a gymnasium id "
                                                "(default: the warm start's env, else textcraft)")
    ap.add_argument("--splits", default=None, help="comma-separated splits (default: the env's eval splits)")
    ap.add_argument("--temperature", type=float, default=0.4, help="sampling temperature; 0 = greedy (default 0.4)")
    ap.add_argument("--max-steps", type=int, default=None, help="horizon (default: 20 for TextCraft, else the env's)")
    ap.add_argument("--max-tasks", type=int, default=None, help="tasks per split, a fixed seeded subset (default: all)")
    ap.add_argument("--repeats", type=int, default=1, help="plays of the task list with seeds seed..seed+R-1")
    ap.add_argument("--seed", type=int, default=12345, help="evaluation seed (EvalConfig.seed's default)")
    ap.add_argument("--env-kwargs", type=json.loads, default=None, help="env options as JSON (default: the warm "
                                                                         "start's)")
    ap.add_argument("--history-length", type=int, default=None, help="past turns in prompts (default: the warm "
                                                                      "start's, else 2)")
    ap.add_argument("--max-response-tokens", type=int, default=None, help="generation cap (default: the warm "
                                                                           "start's, else 128)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--json", default=None, help="also write the results to this JSON file")
    return ap


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    model_dir = Path(args.model).expanduser()
    if not (model_dir / "config.json").is_file():
        print(f"error: --model {model_dir} is not a model folder (no config.json); a warm start's is "
              "$BIPACE_CACHE/warmstart/<env>-<model>-<key>/final (`python -m experiments.warmstart --print-path`)",
              file=sys.stderr)
        return 2
    if args.repeats < 1 or (args.max_tasks is not None and args.max_tasks < 1) or args.temperature < 0:
        print("error: --repeats and --max-tasks must be >= 1 and --temperature >= 0", file=sys.stderr)
        return 2
    info = {}
    if (model_dir / "warmstart.json").is_file():
        info = json.loads((model_dir / "warmstart.json").read_text())
    settings = info.get("settings") or {}
    from warmstart.recipe import ENV_PRESETS

    env_id = args.env or info.get("env") or "TextCraft-v0"
    env_id = ENV_PRESETS[env_id][0] if env_id in ENV_PRESETS else env_id
    env_kwargs = dict(args.env_kwargs if args.env_kwargs is not None else (info.get("env_kwargs") or {}))
    env_kwargs.pop("max_steps", None)
    max_steps = args.max_steps if args.max_steps is not None else (20 if env_id == "TextCraft-v0" else None)
    if max_steps is not None:
        env_kwargs["max_steps"] = int(max_steps)
    history = args.history_length if args.history_length is not None else int(settings.get("history_length", 2))
    cap = args.max_response_tokens or int(settings.get("max_response_tokens", 128))

    import torch

    import envs  # noqa: F401  (registers the ids)
    from agents.models import load_model, load_tokenizer
    from agents.rollout import prompt_config_for
    from envs.pool import make_env
    from warmstart import sft

    if args.threads:
        torch.set_num_threads(args.threads)
    env = make_env(env_id, env_kwargs)
    try:
        inner = env.unwrapped
        splits = [s for s in (args.splits.split(",") if args.splits else inner.eval_splits) if s]
        for s in splits:
            inner.check_split(s)
    except ValueError as e:
        print(f"error: --splits: {e}", file=sys.stderr)
        return 2
    finally:
        env.close()
    tokenizer = load_tokenizer(model_dir)
    model = load_model(model_dir, dtype="float32")
    pcfg = prompt_config_for(tokenizer, int(settings.get("max_prompt_tokens", 2048)), history)
    from envs.paths import portable_path

    out = {"model": portable_path(model_dir.resolve()), "env": env_id, "env_kwargs": env_kwargs,
           "temperature": args.temperature, "history_length": history, "max_response_tokens": cap, "seed": args.seed,
           "splits": {}}
    print(f"{env_id} {json.dumps(env_kwargs)}, T={args.temperature:g}, history {history}, cap {cap} tokens, "
          f"{args.repeats} repeat(s)")
    print("| split | tasks | success (mean) | per repeat | steps/episode | invalid | seconds "
          "|\n|---|---|---|---|---|---|---|")
    sampling = sft.play_sampling(args.temperature, cap)
    for split in splits:
        reps = []
        t0 = time.time()
        for r in range(args.repeats):
            with sft.acting(model, tokenizer, env_id, env_kwargs=env_kwargs, prompt_config=pcfg) as agent:
                res = sft.evaluate(agent, split, sampling=sampling, seed=args.seed + r, max_tasks=args.max_tasks)
            reps.append({**res.summary(), "by_family": res.by_family()})
        succ = [x["success"] for x in reps]
        row = {"success": _mean(succ), "per_repeat": succ, "episodes": int(sum(x["episodes"] for x in reps)),
               "mean_steps": _mean([x["mean_steps"] for x in reps]),
               "invalid_rate": _mean([x["invalid_rate"] for x in reps]), "seconds": round(time.time() - t0, 1)}
        out["splits"][split] = row
        print(f"| {split} | {int(reps[0]['episodes'])} | {row['success']:.3f} | "
              f"{', '.join(f'{x:.3f}' for x in succ)} | {row['mean_steps']:.1f} | {row['invalid_rate']:.3f} | "
              f"{row['seconds']:.0f} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
