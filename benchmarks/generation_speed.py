"""Benchmark: generated tokens per second, Hugging Face engine (its own decode step and the lean one) vs vLLM
(CPU build here), by batch size.

    python -m benchmarks.generation_speed              # SmolLM2-135M and the default tiny model, batches 1, 16, 64
    python -m benchmarks.generation_speed --quick      # tiny model only, batches 1 and 4, few tokens

One command produces the whole table: the HF rows run in this interpreter, once with Hugging Face's decode step
(``decode="hf"``, the plain reference) and once with ``agents/engines/lean.py`` (``decode="lean"``, the
default now); the vLLM rows run in a
subprocess of the interpreter that has vLLM (this one if it can import vllm, else ``.venv-vllm/bin/python``
from ``make setup-vllm``), with the same prompts, sampling config, seeds and thread count. Each cell:
one small warm-up call per engine and model, then the median over ``--repeats`` timed calls of ``engine.generate`` on B
prompts. Tokens/s = generated tokens (EOS or max_tokens) / wall time. Sampling at temperature 1, no stop
string, so rows run to ``--max-tokens`` unless the model emits EOS. Writes
``results/benchmarks/generation.md`` (or ``--out``).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common.tables import emit_table

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results" / "benchmarks"


def _models(quick: bool) -> dict[str, Path]:
    """Model folders to benchmark (built / converted once into the cache)."""
    from agents.models.smollm2 import convert_smollm2
    from agents.models.tiny import TinyModelConfig, build_tiny_model
    from envs.paths import cache_dir

    tiny = cache_dir("models", create=False) / "tiny-bench-4x256"
    if not (tiny / "config.json").is_file():
        build_tiny_model(tiny, TinyModelConfig(layers=4, hidden=256, heads=4), force=True)
    out = {"tiny 4x256 (3.4M)": tiny}
    if not quick:
        out = {"SmolLM2-135M": convert_smollm2(), **out}
    return out


def _prompts(tokenizer, n: int, group_size: int = 1) -> list[list[int]]:
    """n prompts: ceil(n / group_size) distinct protocol-style TextCraft prompts, each repeated group_size times in
    a row (a rollout's group: G trajectories of one task start from the same prompt)."""
    from agents.models.corpus import protocol_corpus

    k = -(-n // group_size)
    texts = [t for t in protocol_corpus(seed=0, n_steps=max(k, 8)) if not t.startswith("<think>")][:k]
    distinct = [tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                              tokenize=True, return_dict=False) for t in texts]
    return [distinct[i // group_size] for i in range(n)]


def run_cells(engine_name: str, models: dict[str, str], batches: list[int], max_tokens: int, repeats: int,
              threads: int, group_size: int = 1) -> list[dict]:
    """Time ``engine.generate`` for every (model, batch); one engine per model. Engines: ``hf`` = Hugging Face's
    decode step, every prompt prefilled whole (the plain HF engine); ``hf-lean`` = the HF engine's
    defaults now (lean step, shared prompt prefixes prefilled once, cascade decode attention); ``vllm``."""
    import torch

    from agents.engines import SamplingConfig, make_engine

    torch.set_num_threads(threads)
    rows = []
    for label, path in models.items():
        if engine_name.startswith("hf"):
            kw = {"hf-lean": {"dtype": "float32", "decode": "lean"},
                  "hf-unpacked": {"dtype": "float32", "decode": "lean", "pack_weights": "off"},
                  }.get(engine_name, {"dtype": "float32", "decode": "hf", "share_prefixes": False, "cascade": False})
        else:
            kw = {"dtype": "float32", "max_model_len": 2048}
        t0 = time.perf_counter()
        eng = make_engine(engine_name.split("-")[0], path, **kw)
        start_s = time.perf_counter() - t0
        sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_tokens=max_tokens, stop=(), logprobs=False)
        warm = _prompts(eng.tokenizer, 2)
        eng.generate(warm, SamplingConfig(temperature=1.0, max_tokens=4, stop=()), seeds=[0, 1])  # warm-up
        pack_s = None
        if engine_name == "hf-lean" and eng.lean_weights().packed:  # packed in the warm-up: time a repack
            from agents.engines.lean import LeanWeights

            t0 = time.perf_counter()
            LeanWeights(eng.model, pack="on").current()
            pack_s = time.perf_counter() - t0
        for b in batches:
            prompts = _prompts(eng.tokenizer, b, group_size)
            times, toks = [], []
            for r in range(repeats):
                t = time.perf_counter()
                gens = eng.generate(prompts, sampling, seeds=[1000 * (r + 1) + i for i in range(b)])
                times.append(time.perf_counter() - t)
                toks.append(sum(len(g.token_ids) for g in gens))
            k = times.index(statistics.median(times)) if repeats % 2 else 0
            rows.append({"engine": engine_name, "model": label, "batch": b, "seconds": times[k],
                         "tokens": toks[k], "tok_s": toks[k] / times[k], "start_s": start_s, "pack_s": pack_s,
                         "prompt_tokens": sum(len(p) for p in prompts) / b})
            print(f"  {engine_name:5s} {label:20s} B={b:3d}  {rows[-1]['tok_s']:8.1f} tok/s", flush=True)
        eng.close()
        del eng
    return rows


def _vllm_python() -> str | None:
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    cand = REPO / ".venv-vllm" / "bin" / "python"
    return str(cand) if cand.is_file() else None


def _loadavg() -> str:
    from common.machine import loadavg

    return loadavg()


def _machine() -> str:
    from common.machine import describe

    return describe(gpu=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny model only, batches 1 and 4, 16 tokens")
    ap.add_argument("--batches", default=None, help="comma-separated batch sizes (default 1,16,64)")
    ap.add_argument("--max-tokens", type=int, default=None, help="generated tokens per row (default 64)")
    ap.add_argument("--repeats", type=int, default=None, help="timed calls per cell, median kept (default 3)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="torch/OpenMP threads for both engines (default: all cores). On a shared, loaded "
                         "machine use 1: multi-threaded OpenMP spin-waits collapse under contention")
    ap.add_argument("--out", default=str(RESULTS / "generation.md"), help="markdown table to write")
    ap.add_argument("--skip-vllm", action="store_true", help="HF rows only")
    ap.add_argument("--group-size", type=int, default=1,
                    help="G: each batch is B/G distinct prompts, each G times (a rollout's groups; default 1)")
    ap.add_argument("--worker", choices=["hf", "vllm"], help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:  # subprocess mode: read the spec, print one JSON line
        spec = json.loads(args.spec)
        rows = run_cells(args.worker, spec["models"], spec["batches"], spec["max_tokens"], spec["repeats"],
                         spec["threads"], spec.get("group_size", 1))
        print("BENCH_JSON " + json.dumps(rows), flush=True)
        return 0

    batches = [int(x) for x in args.batches.split(",")] if args.batches else ([1, 4] if args.quick else [1, 16, 64])
    max_tokens = args.max_tokens or (16 if args.quick else 64)
    repeats = args.repeats or (1 if args.quick else 3)
    models = {k: str(v) for k, v in _models(args.quick).items()}
    if args.group_size < 1:
        raise SystemExit(f"--group-size {args.group_size}: must be >= 1")
    spec = {"models": models, "batches": batches, "max_tokens": max_tokens, "repeats": repeats,
            "threads": args.threads, "group_size": args.group_size}
    load0 = _loadavg()
    print(f"machine: {_machine()}; load average {load0}")
    rows = run_cells("hf", models, batches, max_tokens, repeats, args.threads, args.group_size)
    rows += run_cells("hf-unpacked", models, batches, max_tokens, repeats, args.threads, args.group_size)
    rows += run_cells("hf-lean", models, batches, max_tokens, repeats, args.threads, args.group_size)

    vllm_note = ""
    vpy = None if args.skip_vllm else _vllm_python()
    if vpy is None:
        vllm_note = "vLLM rows missing: no vllm here and no .venv-vllm (run `make setup-vllm`)."
        print(vllm_note)
    elif not args.skip_vllm:
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(args.threads)}
        # vLLM-CPU binds its OpenMP threads itself (all cores by default): give it the same count
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{args.threads - 1}")
        proc = subprocess.run([vpy, "-m", "benchmarks.generation_speed", "--worker", "vllm", "--spec",
                               json.dumps(spec)], cwd=REPO, env=env, capture_output=True, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH_JSON ")]
        for ln in proc.stdout.splitlines():
            if not ln.startswith("BENCH_JSON "):
                print(ln)
        if proc.returncode != 0 or not lines:
            print(proc.stderr[-4000:], file=sys.stderr)
            raise SystemExit(f"vLLM worker failed (exit {proc.returncode}) with {vpy}")
        rows += json.loads(lines[-1][len("BENCH_JSON "):])
        vver = subprocess.run([vpy, "-c", "import vllm; print(vllm.__version__)"], capture_output=True,
                              text=True, env=env).stdout.strip()
        shown = os.path.relpath(vpy, REPO) if os.path.abspath(vpy).startswith(str(REPO)) else os.path.basename(vpy)
        vllm_note = f"vLLM {vver} ({shown})."  # no absolute path of this machine in a committed table

    load1 = _loadavg()
    table = _table(rows, models, batches)
    cmd = " ".join(["python -m benchmarks.generation_speed", *(argv if argv is not None else sys.argv[1:])])
    md = "\n".join([
        "# Generation throughput: Hugging Face engine vs vLLM",
        "",
        f"Command: `{cmd}` (HF in the main venv, vLLM in `.venv-vllm`, one run). Machine: {_machine()}; "
        f"{args.threads} thread(s). {vllm_note} Load average (1/5/15 min) before: {load0}, after: {load1} "
        "(other jobs on the machine slow both engines; compare ratios, not absolute numbers).",
        "",
        f"Sampling at temperature 1.0, top-p 1, no stop string, up to {max_tokens} generated tokens per row, "
        f"float32 weights in both engines; median of {repeats} timed call(s) after a small warm-up call. Prompts: "
        "protocol-style TextCraft prompts through each model's chat template"
        + (f", in groups of G = {args.group_size} copies of one prompt (a rollout's group)" if args.group_size > 1
           else ", all distinct") + ". Tokens/s counts generated tokens only (prefill time included in the wall "
        "time). HF step: Hugging Face's decode step, every prompt prefilled whole (the plain HF engine); "
        "HF engine now: its defaults (lean step, shared prompt prefixes prefilled once, cascade decode attention, "
        "and for models of 64 MB or more its weights packed for oneDNN: `agents/engines/lean.py`, `LeanWeights`); "
        "unpacked: the same with `pack_weights='off'` (the engine before packing). Packing runs once per set of "
        "weights (in the warm-up call here; in training once per weight sync), its time listed below the table.",
        "",
        table,
        "",
    ])
    emit_table(md, args.out, announce=True)
    return 0


def _table(rows: list[dict], models: dict, batches: list[int]) -> str:
    by = {(r["engine"], r["model"], r["batch"]): r for r in rows}
    lines = ["| model | batch | prompt tokens (mean) | HF tok/s (HF step) | HF tok/s (engine now, unpacked) | "
             "HF tok/s (HF engine now) | now / unpacked | now / HF step | vLLM tok/s | vLLM / HF now |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for m in models:
        for b in batches:
            h, hu, hl, v = (by.get((e, m, b)) for e in ("hf", "hf-unpacked", "hf-lean", "vllm"))
            unp = f"{hu['tok_s']:.1f}" if hu else "–"
            lean = (f"{hl['tok_s']:.1f} | " + (f"{hl['tok_s'] / hu['tok_s']:.2f}x" if hu else "–")
                    + f" | {hl['tok_s'] / h['tok_s']:.2f}x") if hl else "– | – | –"
            best = hl or h
            vl = f"{v['tok_s']:.1f} | {v['tok_s'] / best['tok_s']:.2f}x" if v else "– | –"
            lines.append(f"| {m} | {b} | {h['prompt_tokens']:.0f} | {h['tok_s']:.1f} | {unp} | {lean} | {vl} |")
    starts = {(r["engine"], r["model"]): r["start_s"] for r in rows}
    lines.append("")
    lines.append("Engine start (load + warm-up excluded): " + "; ".join(
        f"{e} {m}: {s:.1f} s" for (e, m), s in sorted(starts.items())))
    packs = {r["model"]: r["pack_s"] for r in rows if r.get("pack_s")}
    if packs:
        lines.append("")
        lines.append("Packing the weights (HF engine now; once per set of weights): " + "; ".join(
            f"{m}: {s:.2f} s" for m, s in packs.items()) + ". Models not listed are not packed.")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
