"""The time of one training iteration of a preset on W GPUs, per phase: a model, every input stated.

    python -m experiments.plan_memory configs/paper/alfworld_qwen2.5-7b.yaml --gpus 4     # memory, disk and time
    python -m experiments.plan_time --paper --out results/benchmarks/time_plan.md          # the 6 paper presets

Nothing here ran on a GPU: the GPU rates are ASSUMPTIONS (H100 SXM figures and utilisations typical of such
passes, each printed), and so are the rollout's shape (mean episode length, prompt and response tokens), which only
a run of the trained 7B model gives. What the CPU can check is checked and cited: the token-position factors of
the row order (``benchmarks/switches/row_order.py``), the evaluation's turns chunked vs refilling
(``benchmarks/eval_refill.py``; the model below counts turns the same way), the ALFWorld env's step rate
(``results/benchmarks/envs.md``). Three scenarios (low / mid / high) bound what is not known.

Per rank (the ranks work in parallel; a rank owns B = env.groups x env.group_size / W trajectories):

* rows per iteration n = B x L (L: mean episode length, turns); row tokens t = T_p + T_r (mean prompt, response);
* **rollout**: ``turns`` batched generate calls (the longest episode of the rank's batch: the horizon unless every
  episode is won early). A call = prefill of its live rows' prompts (2 P T_p FLOPs per row at the prefill rate)
  + ``R_turn`` decode steps (the turn's longest response) at one step = 2 P bytes / (HBM bandwidth x decode
  efficiency) + the env step of its live rows (rows / env steps per s);
* **log-prob passes**: the old policy and the KL reference (``trainer.use_kl_loss``), each 2 P FLOPs per token
  position; positions = n x t x the row-order padding factor; with ``trainer.offload_params`` every forward of
  ``logprob_batch_rows`` rows brings the rank's parameter partition over PCIe (2 P / W bytes) and gathers the rest;
* **update**: 8 P FLOPs per token position (forward, recomputed forward under gradient checkpointing, backward at
  2x); per micro-batch two parameter gathers as above; per optimizer step (mini-batches: n W / mini_batch_rows)
  CPU Adam over P / W parameters at the thread count's rate plus the fp32 gradient partition down and bf16 weights
  up over PCIe (offloaded optimizer), or on the GPU (negligible) otherwise;
* **weight refresh**: the whole bf16 model gathered to each rank (2 P over NVLink, 2 P / W from the host with
  parameter offload) and loaded into vLLM, plus vLLM's sleep and wake (level 1: its 2 P weights to the host and
  back) ``sleep_wakes`` times per iteration;
* **evaluation**, amortised over ``eval.every`` (the iteration-0 pass over ``trainer.iterations``, or none with
  ``eval.share_start``: the plan is then of a sweep's runs after its first, which reuse its iteration 0): chunked, each
  split in chunks of the pool's size (B slots), each chunk ``eval turns`` turns; refilling (``eval.refill``),
  ceil(tasks x L_eval / B) + ``eval turns`` turns; a turn costs as in the rollout at the evaluation's live rows;
* **checkpoint**, amortised over ``trainer.save_every``: 2 P (HF export) + 12 P (every rank's optimizer state)
  bytes written at the disk rate.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

__all__ = ["GPURates", "Workload", "TimePlan", "SCENARIOS", "workload_from_config", "plan_time", "render_time",
           "paper_table", "PAPER_SECONDS", "main"]

PROG = "python -m experiments.plan_time"
#: the paper's time per ALFWorld/7B training iteration on 4 GPUs (docs/method.md, "Cost")
PAPER_SECONDS = 361.27
PHASES = ("rollout", "log-prob passes", "update", "weight refresh", "evaluation", "checkpoint")
#: eval split sizes (tasks) per environment [ALFWorld: the official valid_seen 140 / valid_unseen 134;
#: WebShop: env.kwargs num_test_goals 500; TextCraft: envs/textcraft.py's eval_depth2 58 + eval_depth3 117]
EVAL_TASKS = {"alfworld": (140, 134), "webshop": (500,), "textcraft": (58, 117)}


@dataclass(frozen=True)
class GPURates:
    """ASSUMED hardware rates (H100 SXM 80 GB node; none measured here: no GPU)."""

    peak_tflops: float = 989.0      # bf16 dense, NVIDIA H100 SXM datasheet
    prefill_util: float = 0.45      # share of peak a vLLM prefill reaches [assumption]
    forward_util: float = 0.40      # share of peak of the trainer's forwards, padded rows [assumption]
    update_util: float = 0.35       # share of peak of forward + backward under ZeRO-3 [assumption]
    hbm_gbs: float = 3350.0         # HBM3 bandwidth, datasheet
    decode_eff: float = 0.55        # share of it a decode step's weight read reaches (CUDA graphs) [assumption]
    pcie_gbs: float = 25.0          # host <-> GPU effective, PCIe 5 x16 pinned [assumption]
    nvlink_gbs: float = 300.0       # all-gather bus bandwidth per GPU [assumption]
    adam_params_per_s_thread: float = 0.35e9  # DeepSpeed CPU Adam per thread (fp32, AVX-512) [assumption; with the
    # 7B preset's 11 optimizer steps of 1.9e9 parameters per rank it gives the issue's +40-60 s on one thread]
    adam_mem_gbs: float = 50.0      # host memory bandwidth per rank (a node's ~200 GB/s over 4 ranks) [assumption];
    # an Adam step moves ~30 B per parameter, which caps the threads' rate
    adam_threads: int = 16          # trainer.optimizer_threads=0: a 64-core node's cores over 4 ranks
    disk_gbs: float = 2.0           # checkpoint write rate [assumption]


@dataclass(frozen=True)
class Workload:
    """The preset's batch shape (from its config) and the rollout's shape (ASSUMED per scenario)."""

    env: str
    params: int
    world: int
    trajectories: int               # env.groups x env.group_size, all ranks
    horizon: int                    # env.max_steps
    episode_len: float              # L: mean turns per training episode [scenario]
    rollout_turns: int              # turns of a rank's rollout (its longest episode) [scenario]
    prompt_tokens: float            # T_p mean [scenario]
    response_tokens: float          # T_r mean [scenario]
    turn_response_max: int          # R_turn: the longest response of a turn's batch [scenario]
    logprob_order_factor: float     # token positions / length order's, log-prob pass
    update_order_factor: float      # same, update
    use_kl: bool
    offload_params: bool
    offload_optimizer: bool
    logprob_batch_rows: int
    micro_batch_rows: int
    mini_batch_rows: int
    sleep_wakes: int                # vLLM sleep + wake cycles per iteration
    eval_tasks: tuple               # per split, all ranks
    eval_len: float                 # mean eval episode length [scenario]
    eval_turns: int                 # turns of a chunk (its longest episode) [scenario]
    eval_every: int
    eval_refill: bool
    eval_start_shared: bool         # eval.share_start: a sweep's later runs reuse its first run's iteration 0
    iterations: int
    save_every: int
    env_steps_per_s: float          # per rank, all its env workers


#: the rollout's shape per environment and scenario: (L, turns, T_p, T_r, R_turn, L_eval, eval turns) [assumption:
#: low = a trained policy winning early, high = an early policy running to the horizon; ALFWorld's verl-agent prompt
#: with two history steps and the admissible actions is ~1k-1.6k tokens, responses with <think> 100-300]
SCENARIOS = {
    "alfworld": {"low": (14, 35, 1000, 120, 300, 12, 35), "mid": (22, 50, 1300, 180, 420, 18, 50),
                 "high": (35, 50, 1600, 260, 512, 30, 50)},
    "textcraft": {"low": (8, 25, 700, 120, 300, 8, 30), "mid": (14, 50, 900, 180, 420, 14, 50),
                  "high": (25, 50, 1200, 260, 512, 25, 50)},
    "webshop": {"low": (6, 12, 1600, 120, 300, 6, 12), "mid": (9, 15, 2200, 180, 420, 9, 15),
                "high": (12, 15, 3000, 260, 512, 12, 15)},
}
#: row-order factors (positions / length order's): 1.0 now that rows go in length order where sharing is refused;
#: before that fix 1.36 (log-prob) and 1.21 (update) [issue 53's measurement on generated ALFWorld rows at the 7B
#: shape; results/benchmarks/row_order.md measured 1.03 / 1.07 on an untrained model's capped responses]
ORDER_BEFORE = (1.36, 1.21)


@dataclass
class TimePlan:
    workload: Workload
    rates: GPURates
    seconds: dict          # phase -> seconds per iteration
    detail: dict           # phase -> how (formula with numbers)

    @property
    def total(self) -> float:
        return sum(self.seconds.values())


def _turn_seconds(w: Workload, r: GPURates, live_rows: float) -> tuple[float, float, float]:
    """(prefill, decode, env) seconds of one generate call with ``live_rows`` prompts."""
    prefill = live_rows * w.prompt_tokens * 2 * w.params / (r.peak_tflops * 1e12 * r.prefill_util)
    decode = w.turn_response_max * 2 * w.params / (r.hbm_gbs * 1e9 * r.decode_eff)
    return prefill, decode, live_rows / w.env_steps_per_s


def eval_turns(w: Workload, slots: int) -> int:
    """Turns of one evaluation on one rank: chunked per split or one refilling pass."""
    per_rank = [math.ceil(n / w.world) for n in w.eval_tasks]
    if w.eval_refill:
        return math.ceil(sum(per_rank) * w.eval_len / slots) + w.eval_turns
    return sum(math.ceil(n / slots) for n in per_rank) * w.eval_turns


def plan_time(w: Workload, r: GPURates = GPURates()) -> TimePlan:
    P, W = w.params, w.world
    B = w.trajectories // W
    n = B * w.episode_len                              # rows per rank
    t = w.prompt_tokens + w.response_tokens
    s, d = {}, {}
    # rollout
    pre, dec, env = _turn_seconds(w, r, n / w.rollout_turns)
    s["rollout"] = w.rollout_turns * (pre + dec + env)
    d["rollout"] = (f"{w.rollout_turns} turns x (prefill {pre:.2f} + decode {dec:.2f} + env {env:.2f} s) at "
                    f"{n / w.rollout_turns:.0f} live rows per turn")
    # log-prob passes
    passes = 2 if w.use_kl else 1
    pos = n * t * w.logprob_order_factor
    compute = passes * 2 * P * pos / (r.peak_tflops * 1e12 * r.forward_util)
    fwd = passes * math.ceil(n / w.logprob_batch_rows)
    gather = fwd * (2 * P / W / (r.pcie_gbs * 1e9) if w.offload_params else 0) + fwd * 2 * P / (r.nvlink_gbs * 1e9)
    s["log-prob passes"] = compute + gather
    d["log-prob passes"] = (f"{passes} pass(es) x {pos / 1e6:.2f}M positions (x{w.logprob_order_factor:.2f} order) "
                            f"= {compute:.1f} s compute + {fwd} forwards' parameter gathers {gather:.1f} s")
    # update
    upos = n * t * w.update_order_factor
    ucompute = 8 * P * upos / (r.peak_tflops * 1e12 * r.update_util)
    steps = max(1, math.ceil(n * W / w.mini_batch_rows))
    micro = math.ceil(n / w.micro_batch_rows)
    ugather = 2 * micro * ((2 * P / W / (r.pcie_gbs * 1e9) if w.offload_params else 0) + 2 * P / (r.nvlink_gbs * 1e9))
    if w.offload_optimizer:
        adam = P / W / min(r.adam_params_per_s_thread * r.adam_threads, r.adam_mem_gbs * 1e9 / 30)
        adam += (4 * P / W + 2 * P / W) / (r.pcie_gbs * 1e9)
    else:
        adam = 0.0
    s["update"] = ucompute + ugather + steps * adam
    d["update"] = (f"{upos / 1e6:.2f}M positions (x{w.update_order_factor:.2f}) x 8P = {ucompute:.1f} s + {micro} "
                   f"micro-batches' gathers {ugather:.1f} s + {steps} optimizer step(s) x {adam:.1f} s "
                   f"(CPU Adam on {r.adam_threads} thread(s))" if w.offload_optimizer else
                   f"{upos / 1e6:.2f}M positions x 8P = {ucompute:.1f} s + gathers {ugather:.1f} s")
    # weight refresh
    refresh = 2 * P / (r.nvlink_gbs * 1e9) + (2 * P / W / (r.pcie_gbs * 1e9) if w.offload_params else 0)
    sleep = w.sleep_wakes * 2 * (2 * P) / (r.pcie_gbs * 1e9)
    s["weight refresh"] = refresh + sleep
    d["weight refresh"] = (f"gather + load {refresh:.1f} s + {w.sleep_wakes} sleep/wake x "
                           f"{sleep / max(w.sleep_wakes, 1):.1f} s")
    # evaluation
    turns = eval_turns(w, B)
    eval_rows = sum(math.ceil(k / W) for k in w.eval_tasks) * w.eval_len
    epre = eval_rows * w.prompt_tokens * 2 * P / (r.peak_tflops * 1e12 * r.prefill_util)
    _, edec, _ = _turn_seconds(w, r, 1)
    one = epre + turns * edec + eval_rows / w.env_steps_per_s
    per_iter = (1 / w.eval_every if w.eval_every else 0) + (0 if w.eval_start_shared else 1 / max(w.iterations, 1))
    s["evaluation"] = one * per_iter
    start = ("iteration 0 shared: a sweep's runs after its first" if w.eval_start_shared
             else f"iteration 0 over {w.iterations}")
    d["evaluation"] = (f"one evaluation {one:.0f} s ({turns} turns, {'refilling' if w.eval_refill else 'chunked'}, "
                       f"{eval_rows:.0f} rows per rank) x (1/{w.eval_every} + {start})")
    # checkpoint
    ck = (2 * P + 12 * P) / (r.disk_gbs * 1e9)
    s["checkpoint"] = ck / max(w.save_every, 1)
    d["checkpoint"] = f"{14 * P / 1e9:.0f} GB at {r.disk_gbs:g} GB/s = {ck:.0f} s every {w.save_every} iterations"
    return TimePlan(workload=w, rates=r, seconds=s, detail=d)


def workload_from_config(cfg, gpus: int, params: int, scenario: str = "mid", *, before_fixes: bool = False
                         ) -> Workload:
    """The ``Workload`` of a loaded preset on ``gpus`` ranks under ``scenario``; ``before_fixes``: prompt-ordered
    rows, chunked evaluation, an iteration-0 evaluation in every run, one CPU Adam thread and two vLLM sleep/wake
    cycles per iteration, the state first modelled."""
    env = cfg.env_name
    L, turns, tp, tr, rmax, le, et = SCENARIOS[env][scenario]
    horizon = int(cfg.env.max_steps or 50)
    return Workload(
        env=env, params=params, world=gpus, trajectories=cfg.env.groups * cfg.env.group_size, horizon=horizon,
        episode_len=min(L, horizon), rollout_turns=min(turns, horizon), prompt_tokens=tp, response_tokens=tr,
        turn_response_max=min(rmax, cfg.rollout.max_response_tokens),
        logprob_order_factor=ORDER_BEFORE[0] if before_fixes else 1.0,
        update_order_factor=ORDER_BEFORE[1] if before_fixes else 1.0, use_kl=cfg.trainer.use_kl_loss,
        offload_params=cfg.trainer.offload_params, offload_optimizer=cfg.trainer.offload_optimizer,
        logprob_batch_rows=cfg.trainer.logprob_batch_rows, micro_batch_rows=cfg.trainer.micro_batch_rows,
        mini_batch_rows=cfg.trainer.mini_batch_rows,
        sleep_wakes=2 if before_fixes else 1,  # before: the rollout's and the refresh's; after: the refresh stays awake
        eval_tasks=EVAL_TASKS[env], eval_len=min(le, horizon), eval_turns=min(et, horizon),
        eval_every=cfg.eval.every, eval_refill=bool(cfg.eval.refill) and not before_fixes,
        eval_start_shared=bool(cfg.eval.share_start) and not before_fixes,
        iterations=cfg.trainer.iterations, save_every=cfg.trainer.save_every,
        env_steps_per_s=400.0 if env == "alfworld" else 1000.0)


RATES_BEFORE = {"adam_threads": 1}  # torchrun's OMP_NUM_THREADS=1 before trainer.optimizer_threads


def preset_plans(path_or_cfg, gpus: int, params: int | None = None) -> dict:
    """{(scenario, fixes): TimePlan} of a preset (path or loaded config) on ``gpus`` ranks; fixes in ("before",
    "after")."""
    from agents.models.shapes import param_count, resolve_shape
    from trainer.config import load_config

    cfg = load_config(path_or_cfg) if isinstance(path_or_cfg, (str, Path)) else path_or_cfg
    P = params if params is not None else param_count(resolve_shape(cfg.model.path))
    out = {}
    for sc in ("low", "mid", "high"):
        for fixes in ("before", "after"):
            w = workload_from_config(cfg, gpus, P, sc, before_fixes=fixes == "before")
            rates = replace(GPURates(), **RATES_BEFORE) if fixes == "before" and w.offload_optimizer else GPURates()
            out[(sc, fixes)] = plan_time(w, rates)
    return out


def render_time(plans: dict, title: str) -> str:
    """Markdown: per phase the mid scenario after the fixes with its formula, and every scenario's total."""
    mid = plans[("mid", "after")]
    w, r = mid.workload, mid.rates
    lines = [f"## Time plan: {title}", "",
             f"P = {w.params:,}; W = {w.world}; {w.trajectories} trajectories per iteration "
             f"({w.trajectories // w.world} per rank), horizon {w.horizon}. Mid scenario (ASSUMED rollout shape): "
             f"L = {w.episode_len} turns per episode, {w.rollout_turns} rollout turns, T_p = {w.prompt_tokens:g}, "
             f"T_r = {w.response_tokens:g}, a turn's longest response {w.turn_response_max}; evaluation "
             f"{'+'.join(map(str, w.eval_tasks))} tasks, L_eval = {w.eval_len}, {w.eval_turns} turns per chunk.", "",
             "| phase | s / iteration (mid, after fixes) | how |", "|---|---|---|"]
    for ph in PHASES:
        lines.append(f"| {ph} | {mid.seconds[ph]:.1f} | {mid.detail[ph]} |")
    lines.append(f"| **total** | **{mid.total:.0f}** | paper: {PAPER_SECONDS} s per ALFWorld/7B iteration on 4 GPUs |")
    lines += ["", "| scenario | before fixes (prompt order, chunked eval, each run's own iteration 0, 1 Adam thread, "
              "2 sleep/wakes) | "
              "after fixes | of which evaluation (after) |", "|---|---|---|---|"]
    for sc in ("low", "mid", "high"):
        b, a = plans[(sc, "before")], plans[(sc, "after")]
        lines.append(f"| {sc} | {b.total:.0f} s | {a.total:.0f} s | {a.seconds['evaluation']:.0f} s |")
    lines += ["", "GPU and host rates (ASSUMED, none measured here: no GPU): " + ", ".join(
        f"{k} {v:g}" for k, v in asdict(r).items()) + ".",
        "Measured on CPU and used: the evaluation's turns (benchmarks/eval_refill.py: the chunked count is exact, "
        "the refilling count an upper bound), the row-order factors (before: 1.36 / 1.21, the issue's measurement; "
        "results/benchmarks/row_order.md: 1.03 / 1.07 on capped responses), ALFWorld env steps (~100 per s per "
        "worker, results/benchmarks/envs.md). Model: python -m experiments.plan_time --help."]
    return "\n".join(lines)


PAPER_GPUS = {"1.5b": 2, "7b": 4}


def paper_table() -> str:
    """One row per paper preset and scenario: every phase (after the fixes) and the totals."""
    rows = ["# Modelled time per training iteration, the paper presets", "",
            f"Command: `{PROG} --paper`. A model, not a measurement (no GPU here): every input is stated in "
            f"`{PROG} --preset <preset> --gpus N` and in experiments/plan_time.py. Paper: {PAPER_SECONDS} s per "
            "ALFWorld/7B iteration on 4 GPUs (docs/method.md, \"Cost\"); no other preset's time is published.", "",
            "| preset | GPUs | scenario | " + " | ".join(PHASES) + " | total after fixes | before fixes |",
            "|---|---|---|" + "---|" * len(PHASES) + "---|---|"]
    for path in sorted((Path(__file__).resolve().parents[1] / "configs" / "paper").glob("*.yaml")):
        gpus = PAPER_GPUS["7b" if "7b" in path.stem else "1.5b"]
        plans = preset_plans(str(path), gpus)
        for sc in ("low", "mid", "high"):
            a, b = plans[(sc, "after")], plans[(sc, "before")]
            rows.append(f"| {path.stem} | {gpus} | {sc} | " + " | ".join(f"{a.seconds[p]:.0f}" for p in PHASES)
                        + f" | **{a.total:.0f}** | {b.total:.0f} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default=None, help="one preset (with --gpus)")
    ap.add_argument("--gpus", type=int, default=None)
    ap.add_argument("--paper", action="store_true", help="the table of the 6 paper presets")
    ap.add_argument("--out", default=None, help="also write the output to this file")
    args = ap.parse_args(argv)
    from common.tables import emit_table

    if args.paper:
        emit_table(paper_table(), args.out)
        return 0
    if not args.preset or not args.gpus or args.gpus < 1:
        print(f"{PROG}: error: pass --paper, or --preset PRESET --gpus N (N >= 1)", file=sys.stderr)
        return 2
    emit_table(render_time(preset_plans(args.preset, args.gpus), f"{args.preset} on {args.gpus} GPU(s)"), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
