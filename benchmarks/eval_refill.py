"""Benchmark: an evaluation played in chunks of the pool's size vs one that refills its slots (``eval.refill``), on
the generated ALFWorld set's eval splits, with a scripted policy whose episode lengths differ.

    python -m benchmarks.eval_refill                       # pool sizes 11 and 4, every eval task of the set
    python -m benchmarks.eval_refill --slots 11 --out results/benchmarks/eval_refill.md

The trainer evaluates each split on one rank's pool (``env.groups / ranks x env.group_size`` slots: 32 on the 7B
presets, ~35 valid_seen and ~34 valid_unseen ALFWorld tasks per rank). Chunked: each split in chunks of the pool's
size, each chunk waiting for its longest episode. Refilling: one pass over both splits, a slot whose episode ended
taking the next task at once (``agents.rollout.play(refill=True)``). ``--slots 11`` puts the generated set's 12 tasks
per split at about the 7B preset's 35 / 32 tasks per slot (two chunks per split, the second nearly empty).

Policy (no model; deterministic): each prompt is answered with the env expert's next action with probability
``skill`` of its task, else ``look`` (a valid action that changes nothing), drawn from the prompt's sampling seed;
``skill`` cycles over ``--skills`` by task index, so some episodes are won in a few steps and some run to the
50-step horizon (the preset's ``env.max_steps``). Both modes play the same episodes with the same seeds, so the rows
are equal (checked); what differs is how many batched generate calls (turns) carry them. On a GPU a turn's cost is
that of a batched decode, nearly independent of how many of the pool's slots it carries: evaluation time there
scales with the turns column. The CPU wall time here is the env steps, prompt building and this process's
overhead only (no model runs).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time

SKILLS = (0.9, 0.6, 0.35, 0.0)


class ExpertMixEngine:
    """A ``RolloutEngine`` stand-in: the expert's action with probability ``skill`` of the prompt's task, else
    ``look``. Prompts arrive in ascending slot order of the pool's live envs (the rollout's documented order)."""

    name = "expert-mix"

    def __init__(self, tokenizer, pool, skills: tuple[float, ...]):
        self.tokenizer, self.pool, self.skills = tokenizer, pool, skills
        self.calls: list[int] = []

    def generate(self, prompt_token_ids, sampling, seeds=None):
        from agents.engines.base import Generation

        slots = self.pool.live_indices()
        if len(slots) != len(prompt_token_ids):
            raise RuntimeError("prompts must come one per live env, in slot order")
        self.calls.append(len(slots))
        experts = self.pool.expert_actions(slots)
        out = []
        for slot, seed, expert in zip(slots, seeds, experts):
            skill = self.skills[self.pool.tasks[slot].index % len(self.skills)]
            action = expert if (int(seed) % 10_000) / 10_000 < skill else "look"
            text = f"<think>plan</think><action>{action}</action>"
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            out.append(Generation(token_ids=list(ids), text=text, finish_reason="stop", logprobs=None))
        return out

    def update_weights(self, named_tensors) -> int:
        return 0


def run_mode(pool, tok, tasks: dict, skills, refill: bool, max_steps: int) -> dict:
    """One evaluation of ``tasks`` ({split: [Task]}) as the trainer plays it: per split in chunks, or one
    refilling pass; returns turns, prompts, wall time, rows and metrics."""
    from agents.engines import SamplingConfig
    from agents.rollout import Agent, evaluate, prompt_config_for

    engine = ExpertMixEngine(tok, pool, skills)
    agent = Agent(pool=pool, engine=engine, tokenizer=tok, prompt_config=prompt_config_for(tok, 2048),
                  max_prompt_tokens=2048, env_name="alfworld")
    sampling = SamplingConfig(temperature=0.4, max_tokens=512)
    calls = [[t for ts in tasks.values() for t in ts]] if refill else list(tasks.values())
    t0 = time.perf_counter()
    metrics, rows = {}, []
    for call in calls:
        m, batch = evaluate(agent, call, sampling=sampling, seed=12345, refill=refill)
        metrics.update({k: v for k, v in m.items() if k.startswith("eval/")})
        rows += list(zip(batch.task_id, batch.traj_id.tolist(), batch.step.tolist(), batch.action))
    wall = time.perf_counter() - t0
    return {"turns": len(engine.calls), "prompts": sum(engine.calls), "wall": wall, "rows": sorted(rows),
            "metrics": metrics, "full": sum(1 for n in engine.calls if n == pool.num_envs)}


def summarise(results: list[dict], lengths: list[int], n_tasks: dict, skills, cmd: str, machine: str,
              load_txt: str) -> str:
    lines = ["# Evaluation in chunks vs refilling its slots (`eval.refill`)", "",
             f"Command: `{cmd}`.", f"Machine: {machine}; {load_txt}.", "",
             "Tasks: every eval task of the generated ALFWorld set ("
             + ", ".join(f"{s} {n}" for s, n in n_tasks.items())
             + "), one episode each, horizon 50 steps (the preset's env.max_steps). Policy: the "
             f"expert's action with probability skill (cycling {list(skills)} by task index), else `look`; episode "
             f"lengths: min {min(lengths)}, median {sorted(lengths)[len(lengths) // 2]}, max {max(lengths)}, "
             f"{sum(lengths)} steps in all. Rows and metrics of both modes are equal (checked).", "",
             "Turns = batched generate calls (on a GPU, each about one batched decode); prompts per turn = the pool's "
             "fill; wall = this CPU's time for env steps and prompts (no model).", "",
             "| pool slots | mode | turns | prompts per turn | full turns | wall s | turns ratio | wall ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        for mode in ("chunked", "refill"):
            x, base = r[mode], r["chunked"]
            lines.append(f"| {r['slots']} | {mode} | {x['turns']} | {x['prompts'] / max(x['turns'], 1):.1f} | "
                         f"{x['full']} | {x['wall']:.1f} | {x['turns'] / base['turns']:.2f}x | "
                         f"{x['wall'] / base['wall']:.2f}x |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.eval_refill", description=__doc__.split("\n\n")[0])
    ap.add_argument("--slots", default="11,4", help="comma-separated pool sizes (one rank's env slots)")
    ap.add_argument("--skills", default=",".join(str(s) for s in SKILLS), help="per-task expert probabilities")
    ap.add_argument("--workers", type=int, default=2, help="env worker processes")
    ap.add_argument("--out", default=None, help="also write the table to this markdown file")
    args = ap.parse_args(argv)
    try:
        slots = [int(s) for s in args.slots.split(",")]
        skills = tuple(float(s) for s in args.skills.split(","))
    except ValueError:
        print("--slots takes integers and --skills numbers, comma-separated", file=sys.stderr)
        return 2
    if not slots or min(slots) < 1 or not skills or not all(0 <= s <= 1 for s in skills):
        print("--slots must be >= 1 and --skills in [0, 1]", file=sys.stderr)
        return 2
    from transformers import AutoTokenizer

    from agents.models.tiny import TinyModelConfig, build_tiny_model
    from common.machine import describe, loadavg
    from common.tables import emit_table
    from envs.pool import EnvPool, eval_tasks

    load0 = loadavg()
    with tempfile.TemporaryDirectory(prefix="eval_refill-") as tmp:
        tok = AutoTokenizer.from_pretrained(str(build_tiny_model(f"{tmp}/tiny", TinyModelConfig(layers=1))))
    results, lengths, n_tasks = [], [], {}
    for n in slots:
        with EnvPool("ALFWorld-v0", n, num_workers=min(args.workers, n), env_kwargs={"expert": True,
                                                                                      "max_steps": 50}) as pool:
            tasks = {s: eval_tasks(s, pool.num_tasks(s), seed=12345) for s in pool.eval_splits}
            n_tasks = {s: len(ts) for s, ts in tasks.items()}
            res = {"slots": n}
            for refill in (False, True):
                res["refill" if refill else "chunked"] = run_mode(pool, tok, tasks, skills, refill, 50)
                print(f"[eval_refill] {n} slots, {'refill' if refill else 'chunked'}: "
                      f"{res['refill' if refill else 'chunked']['turns']} turns", file=sys.stderr, flush=True)
        if res["refill"]["rows"] != res["chunked"]["rows"] or res["refill"]["metrics"] != res["chunked"]["metrics"]:
            print("the two modes played different episodes: a bug", file=sys.stderr)
            return 1
        if not lengths:
            per: dict = {}
            for tid, _c, _s, _a in res["chunked"]["rows"]:
                per[tid] = per.get(tid, 0) + 1
            lengths = sorted(per.values())
        results.append(res)
    shown = ["python -m benchmarks.eval_refill"] + ([f"--slots {args.slots}"] if args.slots != "11,4" else [])
    emit_table(summarise(results, lengths, n_tasks, skills, " ".join(shown), describe(threads=False),
                         f"load average before / after: {load0} / {loadavg()}"), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
