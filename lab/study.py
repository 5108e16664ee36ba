"""Run a named study end to end: the cached SFT warm start, the runs (a sweep, resumable) and the report.

    python -m experiments.study demo                      # what `make demo` runs (TextCraft, 4 estimators, seed 0)
    python -m experiments.study cpu --seeds 0,1,2 --estimators grpo,gigpo,bipace_v,bipace_q,hgpo,rloo
    python -m experiments.study cpu-alfworld              # the shorter study on generated ALFWorld
    python -m experiments.study cpu --control             # + the no-update control per seed (warm start at lr 0)
    python -m experiments.study cpu --dry-run             # the plan and the commands, nothing run
    python -m experiments.study cpu --report-only         # rewrite the report from the runs done so far
    python -m experiments.study llm-gt-exact --seeds 0,1 --variants none   # some seeds, without the variants
    python -m experiments.study --list                    # the studies and what they hold

A study = a CPU preset x estimators x seeds, declared in ``configs/studies/<name>.yaml`` (``load_study``), every
run starting from the same cached warm start, written to
``results/<study>/runs/<env>/<model>/<method>/seed_<k>/`` and reported into ``results/<study>/`` (curves, tables,
sample efficiency, IQM / probability of improvement, diagnostics: ``python -m experiments.report``).
``--control`` adds one ``no-update`` run per seed: the warm start played on that seed's goal draws with every
optimizer step at lr 0, so the report can read each method's training rollouts against the unchanged policy on the
same goals (with 2 goals per iteration, which goals are drawn moves success more than a few RL steps do).
A study's ``variants`` add methods that are an estimator with other overrides, in their own method folder (the
learning study's ``grpo-shuffle``: GRPO with ``trainer.shuffle_minibatches=true``).

Parts: the command can be stopped at any time (Ctrl-C, or ``--max-hours H`` to stop launching runs after H
hours) and run again: finished runs are skipped, interrupted ones resume from their last checkpoint, the warm
start is cached. The report is written once every run has finished (``--report-only`` writes it from whatever
is there). ``results/<study>/study.json`` records the plan, the warm start and each run's measured wall-clock
and CPU seconds. A committed study keeps its run folders packed in ``results/<study>/runs.jsonl.xz``
(``python -m analysis.pack``): ``--report-only`` reads them from there; to resume or extend the study, unpack them
first (``python -m analysis.pack results/<study> --unpack``).

The warm start comes from ``python -m experiments.warmstart --env <env> <the preset's sft.warmstart as options>``
(``warmstart/recipe.py``, cached under ``$BIPACE_CACHE/warmstart/``); ``--init-from DIR`` uses a model folder of
your own instead, and ``--no-warmstart`` starts RL from the preset's ``model.path`` as it is (a random tiny model
learns nothing: for pipeline checks only).
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from analysis.runs import CONTROL_METHOD, packed_file
from envs.paths import portable_path, portable_text
from lab import sweep as sweep_mod
from warmstart.cache import (
    find_warmstart,
    missing_warmstart_message,
    run_warmstart,
    warmstart_cli_args,
    warmstart_command,
    warmstart_estimate,
    warmstart_overrides,
)

__all__ = ["Study", "STUDIES", "main"]

PROG = "python -m experiments.study"
REPO = Path(__file__).resolve().parents[1]


@dataclass
class Study:
    """One named study: which preset, methods and seeds, where it writes, how long it takes here. Declared in
    ``configs/studies/<name>.yaml`` (``load_study``)."""

    name: str
    title: str
    preset: str
    out: str
    estimators: list[str]
    seeds: list[int]
    jobs: int = 2
    """runs at a time (2 on the 2-core machine, each run on one core)."""
    overrides: list[str] = field(default_factory=list)
    """config overrides of every run of the study (on top of the preset)."""
    minutes_per_run: float | None = None
    """measured CPU minutes of one run on the 2-core machine (the up-front estimate; see README)."""
    baseline: str = "gigpo"
    description: str = ""
    control: bool = False
    """also run the no-update control per seed (as ``--control``)."""
    reference: str | None = None
    """a committed study folder whose runs this study's report sets beside the user's own (same method and
    seed), when ``out`` is another folder: the demo writes to the git-ignored ``runs/demo`` and compares with
    ``results/demo``."""
    variants: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    """extra methods of every seed: ``{name: (estimator, overrides)}``, each run as ``variant=<name>`` (its own
    method folder and report row), e.g. an estimator with one trainer switch changed."""

    @functools.cached_property
    def _warmstart(self) -> tuple[str | None, list[str]]:
        from trainer.config import load_config
        from warmstart.config import env_short_name, from_run_config

        cfg = load_config(REPO / self.preset, self.overrides)
        from_run_config(cfg)  # ConfigError naming a bad sft.warmstart key or value
        if not cfg.sft.enabled:
            return None, []
        return env_short_name(cfg.env.id), warmstart_cli_args(cfg.sft.warmstart)

    @property
    def warmstart_env(self) -> str | None:
        """env name given to ``python -m experiments.warmstart --env``: the preset's env when it starts from a warm
        start (``sft.enabled``), else None."""
        return self._warmstart[0]

    def variant_warmstart_args(self, name: str) -> list[str] | None:
        """options of ``python -m experiments.warmstart`` for variant ``name`` when its overrides change the warm
        start (an ``sft.warmstart.*`` key, e.g. ``sft.warmstart.tiny_layers=4``): the preset's ``sft.warmstart`` with
        the study's and the variant's overrides; None when the variant starts from the study's warm start."""
        from trainer.config import load_config
        from warmstart.config import from_run_config

        _, extra = self.variants[name]
        if not self.warmstart_env or not any(o.split("=", 1)[0].startswith("sft.warmstart.") for o in extra):
            return None
        cfg = load_config(REPO / self.preset, [*self.overrides, *extra])
        from_run_config(cfg)  # ConfigError naming a bad sft.warmstart key or value of the variant
        return warmstart_cli_args(cfg.sft.warmstart)

    @property
    def warmstart_args(self) -> list[str]:
        """options of ``python -m experiments.warmstart`` for this study's warm start: the preset's ``sft.warmstart``
        (with the study's overrides) as options, [] = its defaults (the best measured TextCraft setting:
        results/warmstart/README.md row 15); ``--warmstart-args`` replaces them."""
        return self._warmstart[1]


#: the no-update control (``--control``): per seed, one run whose optimizer steps are zero (AdamW with lr 0 leaves
#: every weight as it is, weight decay included), so it plays the warm start on exactly the goal draws and evaluation
#: tasks that every method of that seed sees; its training-rollout success is the line RL is read against
CONTROL_OVERRIDES = ("trainer.lr=0", f"variant={CONTROL_METHOD}")

#: where the named studies are declared, one YAML file per study (the file name is the study's name)
STUDIES_DIR = REPO / "configs" / "studies"


class StudyFileError(ValueError):
    """A study file that cannot be read: the message names the file, the key and the fix."""


def load_study(path: Path) -> Study:
    """The ``Study`` declared in one YAML file (``configs/studies/<name>.yaml``); ``StudyFileError`` naming the
    file and the key for anything it cannot use."""
    import yaml

    where = portable_text(str(path))
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise StudyFileError(f"{where}: cannot read the study file ({e})") from e
    if not isinstance(data, dict):
        raise StudyFileError(f"{where}: a study file is a mapping of Study fields (title, preset, out, ...)")
    data = dict(data)
    variants = data.pop("variants", None) or {}
    if not isinstance(variants, dict) or not all(isinstance(v, dict) and "estimator" in v for v in variants.values()):
        raise StudyFileError(f"{where}: variants must map a name to {{estimator: <name>, overrides: [key=value, ...]}}")
    known = {f.name for f in dataclasses.fields(Study)} - {"name", "variants"}
    unknown = sorted(set(data) - known)
    if unknown:
        hint = (" (the warm start's settings are the preset's sft.warmstart section; a study changes them with "
                "overrides such as sft.warmstart.epochs=20)" if "warmstart" in unknown else "")
        raise StudyFileError(f"{where}: unknown key(s) {unknown}; a study file holds "
                             f"{sorted(known | {'variants'})}{hint}")
    missing = sorted({"title", "preset", "out", "estimators", "seeds"} - set(data))
    if missing:
        raise StudyFileError(f"{where}: missing key(s) {missing}")
    try:
        return Study(name=path.stem,
                     variants={k: (str(v["estimator"]), [str(o) for o in v.get("overrides") or []])
                               for k, v in variants.items()},
                     **{k: (list(v) if k in ("estimators", "seeds", "overrides") else v) for k, v in data.items()})
    except TypeError as e:
        raise StudyFileError(f"{where}: {e}") from e


def load_studies(folder: Path = STUDIES_DIR) -> dict[str, Study]:
    """Every study file of ``folder``, by name (sorted)."""
    return {p.stem: load_study(p) for p in sorted(Path(folder).glob("*.yaml"))}


STUDIES: dict[str, Study] = load_studies()


# ------------------------------------------------------------------------------------------------ records
def _load_timings(runs_root: Path) -> dict[str, dict]:
    """Per run label: attempts, summed wall and CPU seconds (from ``sweep.jsonl``)."""
    out: dict[str, dict] = {}
    p = runs_root / "sweep.jsonl"
    if not p.exists():
        return out
    for line in p.read_text().splitlines():
        try:
            t = json.loads(line)
        except json.JSONDecodeError:
            continue
        d = out.setdefault(t["run"], {"attempts": 0, "wall_s": 0.0, "cpu_s": 0.0, "max_rss_mb": 0.0})
        d["attempts"] += 1
        d["wall_s"] = round(d["wall_s"] + (t.get("wall_s") or 0.0), 1)
        d["cpu_s"] = round(d["cpu_s"] + (t.get("cpu_s") or 0.0), 1)
        d["max_rss_mb"] = max(d["max_rss_mb"], t.get("max_rss_mb") or 0.0)
        d["last_exit"] = t.get("exit")
    return out


def _estimate(study: Study, specs, timings: dict[str, dict], jobs: int) -> str:
    """Up-front time estimate spread over ``jobs`` cores of an otherwise idle machine: the iterations left times
    the CPU time per iteration measured on this study's earlier runs (``sweep.jsonl`` over the iterations their
    folders have saved, so a lengthened study is estimated too), else the study's figure per run."""
    todo = [s for s in specs if s.status != "finished"]
    if not todo:
        return "nothing left to run"
    lanes = min(jobs, len(todo), os.cpu_count() or 1)
    where = f"on an idle {os.cpu_count()}-core machine with {lanes} at a time (more while others use the cores)"
    by_label = {s.label: s for s in specs}
    cpu_s = done_its = 0.0
    for label, t in timings.items():
        s = by_label.get(label)
        if s is not None and t.get("last_exit") == 0 and s.iterations_done > 0:
            cpu_s, done_its = cpu_s + t["cpu_s"], done_its + s.iterations_done
    left = sum(max(0, s.iterations - s.iterations_done) for s in todo)
    if done_its:
        per_it = cpu_s / 60 / done_its
        return (f"{len(todo)} runs to do, {left} iterations left at ~{per_it:.2f} CPU min each (measured): "
                f"~{per_it * left / max(1, lanes):.0f} min {where}")
    if study.minutes_per_run is None:
        return f"{len(todo)} runs to do (no measured time per run yet)"
    return (f"{len(todo)} runs to do, ~{study.minutes_per_run:.1f} CPU min each: "
            f"~{study.minutes_per_run * len(todo) / max(1, lanes):.0f} min {where}")


def write_record(study: Study, out: Path, runs_root: Path, specs, extra: dict, argv: list[str] | None = None) -> Path:
    """``<out>/study.json``: this call's plan and timings, merged with the runs an earlier call on the same folder
    recorded (a study run in parts, e.g. ``--estimators hgpo,rloo`` later, keeps one record of every run)."""
    p = out / "study.json"
    old: dict = {}
    if p.is_file():
        try:
            old = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            old = {}
    if old.get("study") != study.name:
        old = {}
    timings = _load_timings(runs_root)
    runs = {k: {**v, **timings.get(k, {})} for k, v in (old.get("runs") or {}).items()}
    runs.update({s.label: {"status": s.status, "run_dir": portable_path(Path(s.run_dir).resolve()),
                           **timings.get(s.label, {})} for s in specs})
    commands = list(old.get("commands") or ([old["command"]] if old.get("command") else []))
    # the call's own arguments (``experiments.demo`` calls ``main(["demo", ...])``: sys.argv lacks the study name)
    command = portable_text(shlex.join(["python", "-m", "experiments.study",
                                        *(sys.argv[1:] if argv is None else argv)]))
    rec = {
        "study": study.name, "title": study.title, "preset": study.preset,
        "estimators": sorted({s.estimator for s in specs} | set(old.get("estimators") or [])),
        "seeds": sorted({s.seed for s in specs} | set(old.get("seeds") or [])),
        "command": command, "commands": commands + ([command] if command not in commands else []),
        "host": {"cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2)},
        "runs": runs,
        **extra,
    }
    out.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(rec, indent=1) + "\n")
    tmp.replace(p)
    return p


def add_reference_section(out: Path, reference: Path) -> str | None:
    """Append to ``<out>/summary.md`` a table of this study's runs beside the committed ones under ``reference``
    (``analysis.report.reference_table``); returns the table, or None when there is nothing to compare with."""
    from analysis.report import reference_table
    from analysis.runs import find_runs

    if Path(out).resolve() == Path(reference).resolve() or not ((reference / "runs").is_dir()
                                                                   or packed_file(reference / "runs")):
        return None
    table = reference_table(find_runs(out / "runs"), find_runs(reference / "runs"))
    if not table:
        return None
    summary = out / "summary.md"
    text = summary.read_text() if summary.is_file() else ""
    section = (f"## Your runs beside the committed reference (`{portable_path(reference.resolve())}`)\n\n"
               "Cells: yours / the reference's, success rate in %. Training success is the mean over the iterations "
               "both runs have. With the same seed on a CPU the runs are deterministic: `no` in the last column "
               "means another machine's floating-point arithmetic, another warm start or changed code (see "
               f"`{portable_path(reference.resolve())}/README.md`).\n\n{table}\n")
    summary.write_text(text.rstrip("\n") + "\n\n" + section)
    print(f"[study] your runs beside the reference ({reference}):\n{table}", flush=True)
    return table


# ------------------------------------------------------------------------------------------------ command line
def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Studies: " + ", ".join(f"{k} ({v.description})" for k, v in STUDIES.items()))
    ap.add_argument("study", nargs="?", choices=sorted(STUDIES), help="which study")
    ap.add_argument("--list", action="store_true", help="list the studies and exit")
    ap.add_argument("--seeds", default=None, help="comma-separated seeds or a range (default: the study's)")
    ap.add_argument("--estimators", default=None, help="comma-separated registry keys (default: the study's)")
    ap.add_argument("--variants", default=None,
                    help="comma-separated variants of the study to run (default: all of them; 'none' = none), "
                         "e.g. to run the plain estimators of every seed first")
    ap.add_argument("--jobs", type=int, default=None, help="runs at a time (default: the study's, 2 on CPU)")
    ap.add_argument("--out", default=None, help="study folder (default: the study's, e.g. results/cpu-study)")
    ap.add_argument("--init-from", default=None, help="start RL from this model folder instead of the warm start")
    ap.add_argument("--no-warmstart", action="store_true", help="start RL from the preset's model as it is")
    ap.add_argument("--warmstart-args", default=None,
                    help="options of `experiments.warmstart` (one string) instead of the study's own; '' = the "
                         "warm start's defaults")
    ap.add_argument("--max-hours", type=float, default=None,
                    help="start no new run after this many hours; rerun the same command to go on")
    ap.add_argument("--control", action="store_true",
                    help=f"also run, per seed, the {CONTROL_METHOD!r} control: the warm start played on the same goals "
                         "with every update at lr 0 (the report then reads each method against it)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and the commands, run nothing")
    ap.add_argument("--report-only", action="store_true", help="only (re)write the report from the runs done")
    ap.add_argument("--no-report", action="store_true", help="run, but do not write the report")
    ap.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides of every run")
    return ap


def _resolve_warmstart(env: str, ws_extra: list[str], args, log_path: Path) -> tuple[Path | None, str] | int:
    """The warm start ``python -m experiments.warmstart --env <env> <ws_extra>``: (its final folder or None, a note
    for the log), built when missing unless ``--dry-run``/``--report-only``; an exit status after printing the
    error when it cannot be had."""
    try:
        have_cmd = warmstart_command(env) is not None
    except RuntimeError:
        have_cmd = True
    # with the command: exactly this setting (built if missing); without it: whatever is cached
    cached = find_warmstart(env, extra=ws_extra if have_cmd else None)
    if args.dry_run or args.report_only:
        return cached, (f"cached: {cached}" if cached else "not cached yet (the first run builds it once)" if have_cmd
                        else missing_warmstart_message(env))
    if cached is not None and not have_cmd:
        return cached, f"cached: {cached}"
    if not have_cmd:
        print(f"{PROG}: error: {missing_warmstart_message(env)}", file=sys.stderr)
        return 1
    if cached is None:
        print(f"[study] The SFT warm start of {env} ({shlex.join(ws_extra) or 'defaults'}) is not cached yet: this "
              f"first run builds it once ({warmstart_estimate(env, ws_extra)}), then the runs start. Later runs reuse "
              "it.", flush=True)
    try:
        folder = run_warmstart(env, ws_extra, log_path)
    except RuntimeError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    return folder, f"{'cached' if cached else 'built'}: {folder}"


def study_specs(study: Study, estimators: list[str], seeds: list[int], variants: dict, overrides: list[str],
                runs_root: Path, control: bool = False) -> list:
    """The study's runs (``lab.sweep.RunSpec``), not yet planned: each estimator, then each variant (``variants``:
    name -> (estimator, overrides)), then the control, all with ``overrides`` (the study's, the warm start's, the
    command line's); sorted seed by seed when there are variants or a control."""
    specs = sweep_mod.expand([study.preset], estimators, seeds, (), overrides, runs_root)
    for name, (est, extra) in variants.items():
        specs += sweep_mod.expand([study.preset], [est], seeds, (), [*overrides, *extra, f"variant={name}"], runs_root)
    if control:  # the estimator only labels the control's rows: no step changes the weights
        specs += sweep_mod.expand([study.preset], [estimators[0]], seeds, (), [*overrides, *CONTROL_OVERRIDES],
                                  runs_root)
    if control or variants:
        # seed by seed, each seed's control beside its methods: a study stopped part-way has whole seeds to read
        specs.sort(key=lambda sp: sp.seed)
    return specs


def list_studies() -> str:
    lines = []
    for s in STUDIES.values():
        lines.append(f"{s.name:13s} {s.title}\n{'':13s} preset {s.preset}; {len(s.estimators)} estimators "
                     f"({','.join(s.estimators)}) x seeds {s.seeds}; out {s.out}; {s.description}")
    return "\n".join(lines)


def main(argv: list[str] | None = None, compare=None) -> int:
    """``compare(out, reference)``: what sets the runs beside the study's reference (default
    ``add_reference_section``; ``experiments.demo`` passes its own)."""
    ap = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_intermixed_args(argv)
    if args.list:
        print(list_studies())
        return 0
    if not args.study:
        ap.error("name a study (or --list)")
    study = STUDIES[args.study]
    os.chdir(REPO)  # presets and results are repo-relative
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "offline")
    out = Path(args.out or study.out)
    runs_root = out / "runs"
    jobs = args.jobs or study.jobs
    try:
        seeds = sweep_mod._seeds(args.seeds) if args.seeds else list(study.seeds)
        estimators = sweep_mod._csv(args.estimators) or list(study.estimators)
        variants = dict(study.variants)
        if args.variants is not None:
            wanted = [] if args.variants.strip().lower() == "none" else sweep_mod._csv(args.variants)
            unknown = [v for v in wanted if v not in study.variants]
            if unknown:
                raise sweep_mod.SweepError(f"--variants {','.join(unknown)}: not a variant of {study.name} (it has: "
                                           f"{', '.join(study.variants) or 'none'})")
            variants = {k: study.variants[k] for k in wanted}
        if jobs < 1:
            raise sweep_mod.SweepError(f"--jobs {jobs} must be >= 1")
    except sweep_mod.SweepError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    t_start = time.time()

    # 1. the warm start (cached), unless a folder is given or none is wanted
    from trainer.config import load_config

    preset_cfg = load_config(study.preset)
    preset_model = preset_cfg.model.path
    ws_folder: Path | None = None
    ws_note = "none (the preset's model as it is)"
    if args.init_from:
        ws_folder = Path(args.init_from).expanduser().resolve()
        ws_note = f"given: {ws_folder}"
    elif study.warmstart_env and not args.no_warmstart:
        ws_extra = (shlex.split(args.warmstart_args) if args.warmstart_args is not None
                    else list(study.warmstart_args))
        got = _resolve_warmstart(study.warmstart_env, ws_extra, args, out / "warmstart.log")
        if isinstance(got, int):
            return got
        ws_folder, ws_note = got
    ws_ov = (warmstart_overrides(ws_folder, preset_model, preset_cfg.rollout.history_length)
             if ws_folder is not None else [])
    if ws_folder is None and study.warmstart_env and not args.no_warmstart and (args.dry_run or args.report_only):
        ws_ov = ["sft.enabled=true", "sft.init_from=<warm start folder>"]
    if args.no_warmstart and ws_folder is None and preset_cfg.sft.enabled:
        ws_ov = ["sft.enabled=false"]  # the preset expects a warm start; RL starts from model.path's weights instead

    # 1b. a variant that changes sft.warmstart.* starts from its own warm start (built once and cached the same way);
    # --init-from, --no-warmstart and --warmstart-args apply to every run and leave the variants' own settings aside
    variant_ws: dict[str, str] = {}
    for name in list(variants):
        v_extra = (study.variant_warmstart_args(name) if args.init_from is None and not args.no_warmstart
                   and args.warmstart_args is None else None)
        if v_extra is None:
            continue
        got = _resolve_warmstart(study.warmstart_env, v_extra, args, out / f"warmstart-{name}.log")
        if isinstance(got, int):
            return got
        v_folder, v_note = got
        ws_note += f"; variant {name}: {v_note}"
        if v_folder is not None:
            variant_ws[name] = portable_path(v_folder)
        est, extra = variants[name]
        v_ov = (warmstart_overrides(v_folder, preset_model, preset_cfg.rollout.history_length) if v_folder is not None
                else ["sft.enabled=true", "sft.init_from=<warm start folder>"])
        variants[name] = (est, [*extra, *v_ov])  # after the study's warm-start overrides: these win

    # 2. the runs
    overrides = [*study.overrides, *ws_ov, *args.overrides]
    try:
        specs = study_specs(study, estimators, seeds, variants, overrides, runs_root,
                            control=bool(args.control or study.control))
        placeholder = "<warm start folder>" in " ".join([*overrides, *(o for _, ov in variants.values() for o in ov)])
        specs = sweep_mod.plan(specs) if not placeholder else specs
    except sweep_mod.SweepError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    timings = _load_timings(runs_root)
    print(f"[study] {study.title}\n[study] warm start: {ws_note}\n[study] {len(specs)} runs under {runs_root}: "
          f"{_estimate(study, specs, timings, jobs)}", flush=True)
    packed = packed_file(runs_root)  # a committed study: its run folders packed into one file
    if packed is not None:
        unpack = f"python -m analysis.pack {shlex.quote(str(out))} --unpack"
        if not (args.dry_run or args.report_only):
            print(f"{PROG}: error: the runs of {runs_root} are packed into {packed}: `{unpack}` writes the run "
                  "folders back, then this command resumes or extends the study (or pass --out DIR to start one "
                  "elsewhere; --report-only writes the report from the packed file)", file=sys.stderr)
            return 2
        print(f"[study] the runs are packed into {packed} (the plan above does not see them; `{unpack}` writes "
              "the run folders back)", flush=True)
    if args.dry_run:
        sweep_mod.print_plan(specs, [sys.executable, "-m"], out=sys.stdout)
        return 0
    summary = None
    if not args.report_only:
        deadline = t_start + args.max_hours * 3600 if args.max_hours else None
        summary = sweep_mod.run_sweep(specs, launcher=[sys.executable, "-m"], jobs=jobs, runs_root=runs_root,
                                      tee=False, progress=True, deadline=deadline)
        rc = sweep_mod.report_summary(summary, f"{PROG} {study.name}")
        specs = sweep_mod.plan(specs)
        extra_rec = {"variant_warmstarts": variant_ws} if variant_ws else {}
        write_record(study, out, runs_root, specs, {"warmstart": portable_path(ws_folder) if ws_folder else None,
                                                    **extra_rec, "wall_s_this_call": round(time.time() - t_start, 1)},
                     argv)
        if rc != 0 or any(s.status != "finished" for s in specs):
            print(f"[study] not every run has finished: rerun `{PROG} {study.name}` to go on (the report is written "
                  "when all are done; --report-only writes it now)", file=sys.stderr)
            return rc or 1
    if args.no_report:
        return 0

    # 3. the report
    from analysis import report

    rargs = ["--runs", str(runs_root), "--out", str(out), "--title", study.title, "--baseline", study.baseline]
    print(f"[study] report: python -m experiments.report {shlex.join(rargs)}", flush=True)
    rc = report.main(rargs)
    extra = {"warmstart": portable_path(ws_folder) if ws_folder else None}
    if not args.report_only:
        extra["wall_s_this_call"] = round(time.time() - t_start, 1)
    if packed is None:  # study.json records the run folders' status, which a packed study has not on disk
        write_record(study, out, runs_root, specs, extra, argv)
    if rc == 0 and study.reference:
        (compare or add_reference_section)(out, Path(study.reference))
    if rc == 0:
        print(f"[study] done in {(time.time() - t_start) / 60:.1f} min: {out / 'summary.md'}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
