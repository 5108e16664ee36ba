"""Hidden-state geometry of real rollouts: exact anchors vs hidden-state clusters over an epsilon grid.

Collect rollouts of a model on an environment (P groups x G copies, as training does) and report, per layer and
epsilon, the singleton rate and cluster sizes of exact anchors versus hidden-state clusters, the PACE row mix and
the pair purity against the true state (``analysis.geometry``)::

    python -m experiments.geometry --model smollm2 --env TextCraft-v0 --groups 4 --group-size 8 --rows 256 \\
        --layers -8,-4,-12 --eps 0,0.02,0.05,0.1,0.15,0.2 --max-tokens 48 --out results/geometry/textcraft

or read saved rollouts instead of collecting::

    python -m experiments.geometry --from results/geometry/textcraft      # its rollouts/ (any grid, same layers)
    python -m experiments.geometry --batch steps.pt [--hidden hidden.pt] --env textcraft --out DIR
        # steps.pt: a StepBatch saved with StepBatch.save (its .hidden is one layer);
        # hidden.pt: torch.save({layer: FloatTensor (N, D), ...}) for several layers

Writes ``<out>/report.md`` (tables, epsilon matches, paper figures, example responses), ``geometry.csv`` and
``geometry.json`` (every number), ``singleton_vs_eps.png``, ``purity_vs_eps.png`` and, for collected rollouts,
``rollouts/`` (``steps.pt``, ``hidden.pt``: generated data, git-ignored) so that a later ``--from`` rereads them.

Hidden states are captured in the generation's own prefill for all layers at once (``--hidden-from prefill``,
no extra forward) or by a prompt-only forward afterwards (``--hidden-from actor``, what the trainer's
old-log-prob pass computes); ``analysis/hidden_capture.py`` explains both.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time
from pathlib import Path

from envs.paths import portable_path

PROG = "python -m experiments.geometry"

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_argument_group("source (collect with --model/--env, or read with --from / --batch)")
    src.add_argument("--model", help="model to collect with: smollm2 | tiny:<spec> | a local HF folder")
    src.add_argument("--env", help="environment id (TextCraft-v0, ALFWorld-v0, WebShop-v0); with --batch, the env "
                                   "name only selects the paper's figures")
    src.add_argument("--from", dest="from_dir", help="a folder written by this command (reads its rollouts/)")
    src.add_argument("--batch", help="a StepBatch file (StepBatch.save)")
    src.add_argument("--hidden", help="with --batch: torch file {layer: FloatTensor (N, D)} of several layers")
    col = ap.add_argument_group("collection")
    col.add_argument("--groups", type=int, default=4, help="P prompt groups (tasks) [default 4]")
    col.add_argument("--group-size", type=int, default=8, help="G copies per task, as training [default 8]")
    col.add_argument("--max-steps", type=int, default=None, help="episode horizon T (env max_steps); default: "
                                                                 "ceil(rows / (P G))")
    col.add_argument("--rows", type=int, default=256, help="target step rows when --max-steps is not given "
                                                           "(untrained models never win, so rows = P G T)")
    col.add_argument("--split", default=None, help="task split [default: the env's train split]")
    col.add_argument("--max-tokens", type=int, default=48, help="max response tokens [default 48; training: 512]")
    col.add_argument("--temperature", type=float, default=1.0, help="sampling temperature [training: 1.0]")
    col.add_argument("--top-p", type=float, default=1.0)
    col.add_argument("--max-prompt-tokens", type=int, default=2048, help="prompt bound [protocol: 2048 ALFWorld/"
                                                                         "TextCraft, 4096 WebShop]")
    col.add_argument("--history-length", type=int, default=2, help="(obs, action) pairs in the prompt [GiGPO: 2]")
    col.add_argument("--expert-prob", type=float, default=0.0,
                     help="probability that a row's executed action is the env's expert action (scripted; the "
                          "model still reads the prompt) [default 0: the model acts]")
    col.add_argument("--random-prob", type=float, default=0.0,
                     help="probability of a uniformly random admissible action (envs that list them)")
    col.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="model weights on CPU")
    col.add_argument("--gen-batch", type=int, default=None, help="prompts per generation forward (None = all)")
    col.add_argument("--hidden-from", default="prefill", choices=["prefill", "actor"],
                     help="prefill: states recorded in the generation's prefill (free); actor: a prompt-only "
                          "forward afterwards (the trainer's capture)")
    col.add_argument("--capture-batch", type=int, default=8, help="rows per forward of the actor-style capture")
    col.add_argument("--env-kwargs", default=None, metavar="JSON",
                     help='extra env options, e.g. \'{"show_inventory": true}\' '
                          '(TextCraft, as the warm starts play it)')
    col.add_argument("--env-workers", type=int, default=0, help="env worker processes (0 = inline)")
    col.add_argument("--seed", type=int, default=0, help="fixes tasks, env seeds and sampling")
    col.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    col.add_argument("--no-save", action="store_true", help="do not write rollouts/ (steps.pt, hidden.pt)")
    ana = ap.add_argument_group("analysis")
    ana.add_argument("--layers", default="-8,-4,-12", help="hidden_states indices (HF convention: -1 = final norm)")
    ana.add_argument("--eps", default="0,0.01,0.02,0.03,0.05,0.075,0.1,0.15,0.2", help="epsilon grid")
    ana.add_argument("--centroid", default="mean", choices=["mean", "seed"])
    ana.add_argument("--backend", default="torch", choices=["torch", "faiss"])
    ana.add_argument("--pace-key", default="action_tag", choices=["action_tag", "first_tokens"])
    ana.add_argument("--target", action="append", default=[], metavar="NAME=RATE",
                     help="extra singleton-rate target for the epsilon match (fraction), e.g. mine=0.2")
    ana.add_argument("--match-tol", type=float, default=1e-3,
                     help="bisection tolerance of the epsilon match [default 0.001; a model whose last-token states "
                          "are all close (small models: distances ~1e-3) needs 1e-5]")
    ana.add_argument("--no-plots", action="store_true")
    ap.add_argument("--out", help="output folder [default results/geometry/<env>_<model>]")
    ap.add_argument("--title", default="", help="title of the report")
    return ap


# ============================================================================ helpers
def _fail(msg: str) -> int:
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    return 2


def _machine() -> str:
    from common.machine import describe

    return describe(threads=True)


def _git_commit() -> str | None:
    try:
        from trainer.run_folder import git_commit

        sha, dirty = git_commit()
        return None if sha is None else sha + ("-dirty" if dirty else "")
    except Exception:  # noqa: BLE001 - informational only
        return None


def _env_name(env: str | None) -> str:
    if not env:
        return ""
    return env.lower().split("-")[0]


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text).strip("-") or "run"


# ============================================================================ collection
def collect_rollouts(args, layers: list[int]):
    """Play P x G episodes with the model; returns (StepBatch, {layer: (N, D)}, meta, extras)."""
    from agents.engines import SamplingConfig
    from agents.engines.hf import HFEngine
    from agents.models import load_tokenizer
    from agents.rollout import Agent, collect, prompt_config_for
    from analysis.hidden_capture import ActionMix, CapturingEngine, capture_prompt_states
    from envs.pool import EnvPool, TaskSampler
    from trainer.models import resolve_model_folder
    from trainer.seeding import seed_everything

    p, g = args.groups, args.group_size
    if p < 1 or g < 1:
        raise ValueError(f"--groups {p} and --group-size {g} must be >= 1")
    horizon = args.max_steps if args.max_steps is not None else max(1, math.ceil(args.rows / (p * g)))
    if horizon < 1:
        raise ValueError(f"--max-steps {horizon} must be >= 1")
    mix = ActionMix(expert=args.expert_prob, random=args.random_prob)
    env_kwargs: dict = {"max_steps": horizon}
    if args.env_kwargs:
        extra = json.loads(args.env_kwargs)
        if not isinstance(extra, dict):
            raise ValueError(f"--env-kwargs {args.env_kwargs!r} must be a JSON object")
        env_kwargs.update(extra)
    if _env_name(args.env) == "alfworld":
        env_kwargs["expert"] = mix.expert > 0  # the expert costs time at every step; only when it is asked
    seed_everything(args.seed)
    t0 = time.perf_counter()
    folder = resolve_model_folder(args.model)
    tok = load_tokenizer(folder)
    hf = HFEngine(folder, tokenizer=tok, dtype=args.dtype, device="cpu", max_batch_size=args.gen_batch)
    mode = "inline" if args.env_workers == 0 else "process"
    pool = EnvPool(args.env, num_envs=p * g, num_workers=args.env_workers or None, mode=mode, env_kwargs=env_kwargs)
    try:
        split = args.split or pool.splits[0]
        if split not in pool.splits:
            raise ValueError(f"--split {split!r} is not a split of {args.env}; its splits are {list(pool.splits)}")
        tasks = TaskSampler(split, pool.num_tasks(split), seed=args.seed).sample(p)
        engine = CapturingEngine(hf, layers, pool=pool, mix=mix, scripted_batch_size=args.capture_batch)
        sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens)
        pc = prompt_config_for(tok, args.max_prompt_tokens, args.history_length)
        t_setup = time.perf_counter() - t0
        print(f"[geometry] collecting {p} groups x {g} copies x <= {horizon} steps of {args.env} with {folder.name} "
              f"(max {args.max_tokens} response tokens, temperature {args.temperature})", flush=True)
        batch, metrics = collect(Agent(pool=pool, engine=engine, tokenizer=tok, prompt_config=pc,
                                       max_prompt_tokens=args.max_prompt_tokens), tasks, group_size=g,
                                 sampling=sampling, seed=args.seed)
        t_collect = time.perf_counter() - t0 - t_setup
        hidden, sources = engine.hidden_for(batch)
        t_capture = 0.0
        if args.hidden_from == "actor":
            t1 = time.perf_counter()
            hidden = capture_prompt_states(hf.model, batch.prompt_ids, layers, batch_size=args.capture_batch,
                                           pad_id=hf.pad_id)
            t_capture = time.perf_counter() - t1
    finally:
        pool.close()
    steps = batch.to_step_batch(hidden=hidden[layers[0]])
    meta = {
        "source": "collected", "model": args.model, "model_folder": portable_path(folder), "env": args.env,
        "split": split,
        "groups": p, "group_size": g, "max_steps": horizon, "seed": args.seed,
        "tasks": [list(t.task_id) + [t.seed] for t in tasks],
        "sampling": {"temperature": args.temperature, "top_p": args.top_p, "max_tokens": args.max_tokens,
                     "stop": list(sampling.stop)},
        "max_prompt_tokens": args.max_prompt_tokens, "history_length": args.history_length, "dtype": args.dtype,
        "hidden_from": args.hidden_from, "action_mix": {"expert": mix.expert, "random": mix.random},
        "sources": {k: sources.count(k) for k in ("model", "expert", "random")},
        "rollout_metrics": {k: v for k, v in metrics.items() if k.startswith(("rollout/", "perf/"))},
        "time_s": {"setup": t_setup, "collect": t_collect, "actor_capture": t_capture},
        "task_family": sorted(set(batch.task_family)),
    }
    extras = {"prompt_ids": batch.prompt_ids, "sources": sources, "task_family": list(batch.task_family),
              "action": list(batch.action)}
    return steps, hidden, meta, extras


def save_rollouts(out: Path, steps, hidden: dict, extras: dict, meta: dict) -> Path:
    import torch

    d = out / "rollouts"
    d.mkdir(parents=True, exist_ok=True)
    steps.save(d / "steps.pt")
    torch.save({"layers": {int(k): v for k, v in hidden.items()}, **extras}, d / "hidden.pt")
    (d / "meta.json").write_text(json.dumps(meta, indent=1, default=str) + "\n")
    return d


def load_saved(args, layers: list[int] | None):
    """(StepBatch, {layer: (N, D)}, meta, extras) from --from DIR or --batch/--hidden."""
    import torch

    from estimators import StepBatch

    meta: dict = {"source": "saved"}
    extras: dict = {}
    if args.from_dir:
        d = Path(args.from_dir)
        d = d / "rollouts" if (d / "rollouts").is_dir() else d
        steps_path, hidden_path = d / "steps.pt", d / "hidden.pt"
        if not steps_path.exists():
            raise FileNotFoundError(f"--from {args.from_dir}: no {steps_path}; write it with "
                                    f"'{PROG} --model ... --env ... --out {args.from_dir}' (without --no-save)")
        if (d / "meta.json").exists():
            meta.update(json.loads((d / "meta.json").read_text()))
            meta["source"] = f"saved ({d})"
    else:
        steps_path, hidden_path = Path(args.batch), Path(args.hidden) if args.hidden else None
        if not steps_path.exists():
            raise FileNotFoundError(f"--batch {steps_path} does not exist (write one with StepBatch.save)")
        if hidden_path is not None and not hidden_path.exists():
            raise FileNotFoundError(f"--hidden {hidden_path} does not exist")
        meta["source"] = f"saved ({steps_path})"
        if args.env:
            meta["env"] = args.env
    steps = StepBatch.load(steps_path)
    hidden: dict = {}
    if hidden_path is not None and hidden_path.exists():
        data = torch.load(hidden_path, map_location="cpu", weights_only=True)
        if not isinstance(data, dict):
            raise ValueError(f"{hidden_path}: expected a dict {{layer: FloatTensor (N, D)}}, got {type(data).__name__}")
        if "layers" in data:
            extras = {k: v for k, v in data.items() if k != "layers"}
            data = data["layers"]
        for k, v in data.items():
            try:
                key = int(k)
            except (TypeError, ValueError):
                key = k
            hidden[key] = v
    elif steps.hidden is not None:
        hidden = {"batch": steps.hidden}
    if not hidden:
        raise ValueError(f"{steps_path}: the batch has no hidden states and no --hidden file was given")
    if layers:
        missing = [layer for layer in layers if layer not in hidden]
        if missing and set(hidden) != {"batch"}:
            raise ValueError(f"layers {missing} are not in the saved hidden states (saved: {sorted(hidden, key=str)}); "
                             f"pick from those or collect again with --layers")
        if not missing:
            hidden = {layer: hidden[layer] for layer in layers}
    return steps, hidden, meta, extras


# ============================================================================ report
def _examples(extras: dict, steps, k: int = 4) -> str:
    texts = steps.response_text
    sources = extras.get("sources") or ["?"] * len(texts)
    picked = [i for i in range(len(texts)) if sources[i] == "model"][:k] or list(range(min(k, len(texts))))
    lines = []
    for i in picked:
        t = texts[i].replace("\n", "\\n")
        lines.append(f"- group {int(steps.group_id[i])}, copy {int(steps.traj_id[i])}, step {int(steps.step[i])} "
                     f"({sources[i]}): `{t[:220]}{'…' if len(t) > 220 else ''}`")
    return "\n".join(lines)


def write_report(out: Path, report, meta: dict, steps, extras: dict, paper: dict | None, title: str,
                 command: str) -> Path:
    from analysis.geometry import PAPER, summarize_layers

    rm = meta.get("rollout_metrics", {})
    anchor = report.row("anchor")
    state = next((r for r in report.rows if r["grouping"] == "state"), None)
    lines = [f"# {title}", "", f"Command: `{command}`", ""]
    lines.append(f"Machine: {meta.get('machine', '?')}; git {meta.get('git_commit') or '?'}; "
                 f"wall time {meta.get('wall_s', 0):.0f} s.")
    cc = meta.get("collect_command")
    if cc and cc != command:  # a reread: say how the rollouts were made and what that cost
        t = meta.get("time_s") or {}
        lines.append("")
        lines.append(f"Rollouts collected by: `{cc}` (set-up {t.get('setup', 0):.0f} s, collection "
                     f"{t.get('collect', 0):.0f} s).")
    lines.append("")
    lines.append("## Rollouts")
    lines.append("")
    m = report.meta
    desc = [f"source: {meta.get('source')}"]
    if meta.get("model"):
        desc.append(f"model `{meta['model']}` ({meta.get('dtype', '')})")
    if meta.get("env"):
        desc.append(f"env `{meta['env']}` split `{meta.get('split', '?')}`")
    if meta.get("groups"):
        desc.append(f"P = {meta['groups']} groups x G = {meta['group_size']} copies x horizon {meta['max_steps']} "
                    f"steps, seed {meta.get('seed')}")
    if meta.get("sampling"):
        s = meta["sampling"]
        desc.append(f"temperature {s['temperature']}, top-p {s['top_p']}, max {s['max_tokens']} response tokens, "
                    f"stop {s['stop']}")
    if meta.get("action_mix"):
        mix = meta["action_mix"]
        desc.append(f"executed actions: model {meta['sources']['model']}, expert {meta['sources']['expert']}, random "
                    f"admissible {meta['sources']['random']} rows (mix expert={mix['expert']}, random={mix['random']})")
    if meta.get("hidden_from"):
        desc.append(f"hidden states from: {meta['hidden_from']}")
    lines += [f"- {d}" for d in desc]
    lines.append(f"- N = {m['rows']} step rows, {m['groups']} prompt groups, {m['trajectories']} trajectories, "
                 f"valid-action rate {100 * m['valid_rate']:.1f}%, reward sum {m['reward_sum']:.0f}; distinct true "
                 f"states {m['distinct_states']}, distinct anchors {m['distinct_anchors']} (both counted per group)")
    if rm:
        lines.append(f"- success rate {100 * rm.get('rollout/success_rate', 0):.1f}%, responses cut at max tokens "
                     f"{100 * rm.get('rollout/response_truncated_frac', 0):.1f}%, prompt tokens (mean) "
                     f"{rm.get('rollout/prompt_tokens_mean', 0):.0f}, response tokens (mean) "
                     f"{rm.get('rollout/response_tokens_mean', 0):.1f}, generation "
                     f"{rm.get('perf/rollout_generate_s', 0):.0f}"
                     f" s ({rm.get('perf/gen_tokens_per_s', 0):.1f} tok/s)")
    lines.append("")
    lines.append("## Exact anchors vs hidden-state clusters, per layer")
    lines.append("")
    lines.append("Singletons: rows alone in their group. Pair precision: same-group pairs that are truly one state; "
                 "pair recall: same-state pairs that share a group (pairs inside a prompt group). Mixed groups: "
                 "multi-member groups holding >= 2 true states. PACE mix (Q-style, `action_tag` key, fallback "
                 "`either`): rows in the PACE formula / leave-one-out fallback / singletons. The true-state row is "
                 "the floor a perfect state abstraction would reach.")
    lines.append("")
    for layer in report.layers():
        lines.append(f"### layer {layer}")
        lines.append("")
        lines.append(report.markdown_table(layer))
        lines.append("")
    grid = report.meta["grid"]
    pts = [e for e in (0.0, 0.05, 0.1, 0.2) if any(math.isclose(e, g) for g in grid)]
    if pts:
        lines.append("### all layers at a glance (singletons / pair precision / pair recall)")
        lines.append("")
        lines.append(summarize_layers(report, pts))
        lines.append("")
    lines.append("## Epsilon at which the hidden-state singleton rate meets a target")
    lines.append("")
    lines.append(f"Bisection on epsilon (tolerance {report.meta.get('match_tol', 1e-3):g}); `paper hidden` = the "
                 "paper's hidden-state singleton rate, "
                 "`paper ratio` = this batch's anchor rate times the paper's hidden/anchor ratio.")
    lines.append("")
    lines.append(report.markdown_matches())
    lines.append("")
    if paper:
        key = _env_name(meta.get("env"))
        ref = PAPER[key]
        lines.append("## Beside the paper")
        lines.append("")
        when = f"iteration {ref['iteration']}" if ref["iteration"] > 0 else "training"
        lines.append("| | exact anchors | hidden clusters | ratio |")
        lines.append("|---|---:|---:|---:|")
        lines.append(f"| paper, Qwen2.5-7B, {when}, layer -8, eps 0.10 | {100 * ref['anchor']:.1f}% | "
                     f"{100 * ref['hidden']:.1f}% | {ref['hidden'] / ref['anchor']:.2f} |")
        for layer in report.layers():
            try:
                r = report.row("hidden", layer, ref["epsilon"])
            except KeyError:
                continue
            ratio = r["singleton_rate"] / anchor["singleton_rate"] if anchor["singleton_rate"] > 0 else float("nan")
            lines.append(f"| this run, layer {layer}, eps {ref['epsilon']:g} | {100 * anchor['singleton_rate']:.1f}% | "
                         f"{100 * r['singleton_rate']:.1f}% | {ratio:.2f} |")
        if state is not None:
            lines.append(f"| this run, true state (floor) | | {100 * state['singleton_rate']:.1f}% | |")
        lines.append("")
    ex = _examples(extras, steps)
    if ex:
        lines.append("## Example responses")
        lines.append("")
        lines.append(ex)
        lines.append("")
    lines.append("Files: `geometry.csv` / `geometry.json` (every number, per layer and epsilon), "
                 "`singleton_vs_eps.png`, `purity_vs_eps.png`.")
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


# ============================================================================ main
def _join_negative_lists(argv: list[str]) -> list[str]:
    """``--layers -8,-4`` -> ``--layers=-8,-4`` (argparse would read ``-8,-4`` as an option)."""
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a in ("--layers", "--eps") and i + 1 < len(argv) and argv[i + 1][:2].lstrip("-")[:1].isdigit():
            out.append(f"{a}={argv[i + 1]}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    ap = build_parser()
    raw = list(argv if argv is not None else sys.argv[1:])
    args = ap.parse_args(_join_negative_lists(raw))
    from analysis.geometry import (
        PAPER,
        GeometryConfig,
        geometry_report,
        grid_arg,
        layers_arg,
        paper_targets,
        plot_geometry,
    )
    from estimators import EstimatorConfig

    collecting = args.model is not None and args.env is not None and not (args.from_dir or args.batch)
    if not collecting and not (args.from_dir or args.batch):
        return _fail("give --model and --env to collect rollouts, or --from DIR / --batch FILE to read saved ones")
    if args.from_dir and args.batch:
        return _fail("--from and --batch are exclusive")
    if args.hidden and not args.batch:
        return _fail("--hidden goes with --batch")
    try:
        layers = layers_arg(args.layers)
        cfg = GeometryConfig(grid=grid_arg(args.eps), estimator=EstimatorConfig(
            name="bipace_q", centroid=args.centroid, cluster_backend=args.backend, pace_key=args.pace_key))
        extra_targets = {}
        for t in args.target:
            name, _, val = t.partition("=")
            try:
                extra_targets[name.strip() or "target"] = float(val)
            except ValueError:
                raise ValueError(f"--target {t!r} must look like NAME=RATE with RATE a fraction, "
                                 "e.g. mine=0.2") from None
    except ValueError as e:
        return _fail(str(e))
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    command = PROG + " " + " ".join(shlex.quote(a) for a in raw)
    try:
        if collecting:
            steps, hidden, meta, extras = collect_rollouts(args, layers)
        else:
            steps, hidden, meta, extras = load_saved(args, layers)
    except (ValueError, FileNotFoundError, KeyError) as e:
        return _fail(str(e).strip("'\""))
    except Exception as e:  # model/data folders missing: their own errors name the command that fills them
        if type(e).__name__ in ("ModelNotFoundError", "ALFWorldDataError", "WebShopDataError"):
            return _fail(str(e))
        raise
    env = meta.get("env") or args.env or ""
    model = meta.get("model") or args.model or ""
    default_out = Path("results/geometry") / _slug(f"{_env_name(env) or 'batch'}_{model or 'saved'}")
    out = Path(args.out) if args.out else default_out
    out.mkdir(parents=True, exist_ok=True)
    if collecting:
        meta["collect_command"] = command
    if collecting and not args.no_save:
        meta["rollouts"] = str(save_rollouts(out, steps, hidden, extras, meta))

    # the anchor rate is needed for the paper-ratio target: one cheap pass first
    try:
        pre = geometry_report(steps, {next(iter(hidden)): next(iter(hidden.values()))},
                              GeometryConfig(grid=(0.0,), estimator=cfg.estimator))
        targets = paper_targets(env, pre.row("anchor")["singleton_rate"]) | extra_targets
        report = geometry_report(steps, hidden, cfg, targets=targets, match_tol=args.match_tol)
    except ValueError as e:
        return _fail(str(e))
    meta.update(machine=_machine(), git_commit=_git_commit(), command=command,
                wall_s=time.perf_counter() - t_start, load_average=list(os.getloadavg()))
    report.meta = {**meta, **report.meta}
    paper = PAPER.get(_env_name(env))
    title = args.title or f"Hidden-state geometry: {model or 'saved batch'} on {env or 'saved rollouts'}"
    report.save(out)
    if not args.no_plots:
        plot_geometry(report, out, title=title, paper=paper)
    path = write_report(out, report, meta, steps, extras, paper, title, command)
    print(path.read_text())
    print(f"[geometry] wrote {out}/ (report.md, geometry.csv, geometry.json"
          f"{'' if args.no_plots else ', singleton_vs_eps.png, purity_vs_eps.png'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
