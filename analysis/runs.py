"""Run folders: ``<root>/<env>/<model>/<method>/seed_<k>/`` (docs/conventions.md, "Run folders"), loose or packed.

Each folder holds ``config.yaml`` (resolved config), ``run.json`` (env, model, method, seed, git commit,
status), ``metrics.jsonl`` (one line per training iteration, key ``iteration`` plus the metric namespace
``rollout/ adv/ group/ loss/ perf/``) and ``eval.jsonl`` (one line per evaluation: ``iteration`` plus
``eval/<env>/<split>/success_rate``, ``eval/<env>/<split>/family/<family>/success_rate`` and, for
WebShop, ``eval/<env>/<split>/score``). Plots and tables read only these files.

A committed study keeps its run folders packed: ``<study>/runs.jsonl.xz`` (``PACKED_NAME``, written by
``python -m analysis.pack <study>``) holds what ``<study>/runs/`` held, one JSON record per run folder.
``find_runs`` reads it wherever it would read the folders: give it the study folder, the packed file, or the
``<study>/runs`` path itself (which then need not exist). A ``runs/`` folder beside the packed file (``python -m
analysis.pack <study> --unpack``) takes its place. ``Run.read_text`` / ``Run.read_json`` read a run's other files
(``config.yaml``, ``epsilon.json``) from either form.

The packed file (xz-compressed JSON Lines, UTF-8): line 1 a header ``{"format": "bipace-runs", "version": 1,
"dropped": [...], "sweep": [...]}`` (``sweep``: the lines of ``runs/sweep.jsonl``, if there was one); then one line
per run folder, in path order: ``{"path": "<env>/<model>/<method>/seed_<k>", "run": <run.json>, "config":
"<config.yaml text>", "metrics": <table>, "evals": <table>, "epsilon": <epsilon.json>}`` (files the folder lacked
are left out). A table holds a JSON Lines file column by column: ``{"columns": {key: [its values, one per line that
has the key]}, "shapes": [[column indices of a line's keys, in its order], ...], "lines": [shape index per line]}``.
A file that its parsed form would not write back byte for byte (a torn last line, another layout) is kept as its
text under ``"text": {"<name>": ...}`` instead.
"""
from __future__ import annotations

import json
import lzma
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Run", "find_runs", "read_jsonl", "series", "final_eval", "CONTROL_METHOD", "PACKED_NAME", "PackedRunsError",
           "packed_file", "read_packed", "load_run", "is_record_path", "damage_fix", "PACKED_FORMAT", "PACKED_VERSION",
           "FILE_FIELDS", "JSON_FILES", "TABLE_FIELDS", "file_text", "table_rows"]

#: method folder of the no-update control (``python -m experiments.study <study> --control``): the warm start played
#: on the same goal draws as every method of its seed, no weight ever changed; the report reads methods against it
CONTROL_METHOD = "no-update"

#: a study's packed run folders, beside where its ``runs/`` folder was
PACKED_NAME = "runs.jsonl.xz"
PACKED_FORMAT, PACKED_VERSION = "bipace-runs", 1

_SEED = re.compile(r"^seed_(\d+)$")


class PackedRunsError(ValueError):
    """A packed run file that cannot be read (not xz, not this format, a damaged record)."""


@dataclass
class Run:
    env: str
    model: str
    method: str
    seed: int
    path: Path
    metrics: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    info: dict = field(default_factory=dict)
    packed: dict | None = field(default=None, repr=False)
    """the run's record in a packed file (None: a run folder on disk)."""

    @property
    def key(self) -> tuple[str, str, str]:
        return self.env, self.model, self.method

    def read_text(self, name: str) -> str | None:
        """The text of the run folder's file ``name`` (``config.yaml``, ``epsilon.json``, ...), from the folder or
        from the packed record; None when the run has no such file."""
        if self.packed is None:
            p = self.path / name
            return p.read_text() if p.is_file() else None
        rec = self.packed
        if name in (rec.get("text") or {}):
            return rec["text"][name]
        fld = FILE_FIELDS.get(name)
        if fld is None or fld not in rec:
            return None
        return file_text(name, rec[fld] if fld not in TABLE_FIELDS else table_rows(rec[fld]))

    def read_json(self, name: str) -> dict | None:
        """``read_text(name)`` parsed as JSON (the packed record's object itself, not a copy of its text)."""
        if self.packed is not None and name in JSON_FILES and FILE_FIELDS[name] in self.packed:
            return self.packed[FILE_FIELDS[name]]
        text = self.read_text(name)
        return None if text is None else json.loads(text)


def read_jsonl(path: Path) -> list[dict]:
    """Lines of a JSONL file; a torn last line (a run killed mid-write) is skipped, others must parse."""
    if not path.exists():
        return []
    return parse_jsonl(path.read_text(), path)


def parse_jsonl(text: str, where: str | Path = "<text>") -> list[dict]:
    """``read_jsonl`` of a file's text."""
    out = []
    lines = text.splitlines()
    for n, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as e:
            if n == len(lines) - 1:
                continue
            raise ValueError(f"{where}:{n + 1}: not valid JSON ({e})") from e
    return out


# ------------------------------------------------------------------------------------------------ packed files
#: file name -> record field; which files are JSON objects, which are JSON Lines tables
FILE_FIELDS = {"run.json": "run", "config.yaml": "config", "metrics.jsonl": "metrics", "eval.jsonl": "evals",
             "epsilon.json": "epsilon", "grouping_scan.jsonl": "grouping_scan"}
JSON_FILES = ("run.json", "epsilon.json")
TABLE_FIELDS = ("metrics", "evals")


def file_text(name: str, value) -> str:
    """The text ``trainer.run_folder`` writes for a file of this content (``json.dumps`` as it calls it)."""
    if name in JSON_FILES:
        return json.dumps(value, indent=1) + "\n"
    if name.endswith(".jsonl"):
        return "".join(json.dumps(row) + "\n" for row in value)
    return value


def table_rows(table: dict) -> list[dict]:
    """A packed table back as its lines (dicts, in the written key order)."""
    keys = list(table["columns"])
    values = [iter(v) for v in table["columns"].values()]
    shapes = table["shapes"]
    return [{keys[j]: next(values[j]) for j in shapes[s]} for s in table["lines"]]


def packed_file(root: str | Path) -> Path | None:
    """The packed file that stands for ``root``: ``root`` itself (a ``*.jsonl.xz`` file), ``<root>/runs.jsonl.xz``
    (a study folder), or ``<parent>/runs.jsonl.xz`` for a ``<parent>/runs`` folder that is not on disk; else None."""
    root = Path(root)
    if root.is_file() and root.name.endswith(".jsonl.xz"):
        return root
    if root.is_dir() and (root / PACKED_NAME).is_file() and not (root / "runs").is_dir():
        return root / PACKED_NAME
    if not root.exists() and root.name == "runs" and (root.parent / PACKED_NAME).is_file():
        return root.parent / PACKED_NAME
    return None


def is_record_path(path) -> bool:
    """``path`` is ``<env>/<model>/<method>/seed_<k>``: relative, four plain names (none ``.`` or ``..``)."""
    if not isinstance(path, str):
        return False
    parts = path.split("/")
    return (len(parts) == 4 and _SEED.fullmatch(parts[3]) is not None
            and all(p not in ("", ".", "..") and p.isprintable() and "\\" not in p and ":" not in p for p in parts))


def damage_fix(path: str | Path) -> str:
    """The fix for a damaged packed file ``path``: packing again where its run folders are on disk, else restoring
    the committed file (a committed study holds no run folders to pack from)."""
    path = Path(path)
    runs = path.parent / "runs"
    if runs.is_dir() and any(runs.rglob("metrics.jsonl")):
        return (f"`python -m analysis.pack {path.parent} --force` writes it again from the run folders in {runs} "
                "(runs the damaged file holds that these folders lack are lost)")
    return (f"restore the committed file from git (`git checkout -- {path}`) or copy it again from where it came "
            f"from; packing again needs the run folders, and {runs} has none")


def _read_lines(path: Path):
    try:
        with lzma.open(path, "rt", encoding="utf-8") as f:
            yield from f
    except (lzma.LZMAError, EOFError, UnicodeDecodeError) as e:
        raise PackedRunsError(f"{path}: not an xz file, or a damaged one ({e}); {damage_fix(path)}") from e


def read_packed(path: str | Path) -> tuple[dict, list[dict]]:
    """(header, records) of a packed file."""
    path = Path(path)
    lines = _read_lines(path)
    try:
        header = json.loads(next(lines))
    except (StopIteration, json.JSONDecodeError) as e:
        raise PackedRunsError(f"{path}: no header line ({e}); {damage_fix(path)}") from e
    if not isinstance(header, dict) or header.get("format") != PACKED_FORMAT:
        raise PackedRunsError(f"{path}: not a packed run file (its first line should say format {PACKED_FORMAT!r}); "
                              f"{damage_fix(path)}")
    if header.get("version") != PACKED_VERSION:
        raise PackedRunsError(f"{path}: packed format version {header.get('version')!r}; this code reads version "
                              f"{PACKED_VERSION}")
    records = []
    for n, line in enumerate(lines, 2):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise PackedRunsError(f"{path}: line {n} is not valid JSON ({e}); {damage_fix(path)}") from e
        if not isinstance(rec, dict) or not isinstance(rec.get("path"), str):
            raise PackedRunsError(f"{path}: line {n} is not a run record (no \"path\"); {damage_fix(path)}")
        if not is_record_path(rec["path"]):
            raise PackedRunsError(f"{path}: line {n} has the record path {rec['path']!r}; a record path is "
                                  f"<env>/<model>/<method>/seed_<k> (relative, no '..'); {damage_fix(path)}")
        records.append(rec)
    return header, records


def _folder_run(p: Path) -> Run:
    """The run in folder ``p`` (``<env>/<model>/<method>/seed_<k>``; seed -1 for a folder named otherwise)."""
    m = _SEED.match(p.name)
    info = json.loads((p / "run.json").read_text()) if (p / "run.json").exists() else {}
    method_dir, model_dir, env_dir = p.parent, p.parent.parent, p.parent.parent.parent
    return Run(
        env=info.get("env", env_dir.name),
        model=info.get("model", model_dir.name),
        method=info.get("method", method_dir.name),
        seed=int(m.group(1)) if m else -1,
        path=p,
        metrics=read_jsonl(p / "metrics.jsonl"),
        evals=read_jsonl(p / "eval.jsonl"),
        info=info,
    )


def _packed_run(rec: dict, runs_root: Path) -> Run | None:
    path = runs_root / rec["path"]
    m = _SEED.match(path.name)
    text = rec.get("text") or {}
    if not m or not ("metrics" in rec or "metrics.jsonl" in text):
        return None
    info = rec.get("run") if "run" in rec else (json.loads(text["run.json"]) if "run.json" in text else {})
    metrics = (table_rows(rec["metrics"]) if "metrics" in rec
               else parse_jsonl(text["metrics.jsonl"], path / "metrics.jsonl"))
    evals = (table_rows(rec["evals"]) if "evals" in rec
             else parse_jsonl(text["eval.jsonl"], path / "eval.jsonl") if "eval.jsonl" in text else [])
    return Run(env=info.get("env", path.parent.parent.parent.name), model=info.get("model", path.parent.parent.name),
               method=info.get("method", path.parent.name), seed=int(m.group(1)), path=path, metrics=metrics,
               evals=evals, info=info, packed=rec)


def _runs_of_packed(packed: Path) -> list[Run]:
    _, records = read_packed(packed)
    runs = []
    for rec in records:
        try:
            run = _packed_run(rec, packed.parent / "runs")
        except (KeyError, IndexError, TypeError, AttributeError, StopIteration, ValueError) as e:
            raise PackedRunsError(f"{packed}: the record of {rec['path']} is damaged ({e!r}); "
                                  f"{damage_fix(packed)}") from e
        if run is not None:
            runs.append(run)
    return runs


def find_runs(root: str | Path) -> list[Run]:
    """Every ``seed_<k>`` folder below ``root`` (any depth), and every run of the packed files below it whose
    ``runs/`` folder is not on disk, sorted by (env, model, method, seed). ``root`` may also be a packed file, or a
    study's ``runs`` path whose packed file stands in for it (``packed_file``)."""
    root = Path(root)
    packed = packed_file(root)
    if packed is not None and not root.is_dir():
        return sorted(_runs_of_packed(packed), key=lambda r: (r.env, r.model, r.method, r.seed))
    if not root.exists():
        raise FileNotFoundError(f"no run folder at {root}: run `python -m experiments.train ...` or pass --runs")
    runs = [_folder_run(p) for p in sorted(root.rglob("seed_*"))
            if _SEED.match(p.name) and p.is_dir() and (p / "metrics.jsonl").exists()]
    for f in sorted(root.rglob(PACKED_NAME)):
        if not (f.parent / "runs").is_dir():  # an unpacked runs/ folder beside it was read above
            runs += _runs_of_packed(f)
    return sorted(runs, key=lambda r: (r.env, r.model, r.method, r.seed))


def load_run(path: str | Path) -> Run:
    """One run by its folder's path, on disk or inside the packed file of the study it belongs to (the first
    ``runs`` folder above it that is packed). ``FileNotFoundError`` when neither holds a run there."""
    path = Path(path)
    if path.is_dir():
        if not (path / "metrics.jsonl").exists():
            raise FileNotFoundError(f"{path}: no metrics.jsonl (not a run folder, or a run that has not logged an "
                                    "iteration yet)")
        return _folder_run(path)
    for up in path.parents:
        if up.name == "runs" and (packed := packed_file(up)) is not None:
            rel = path.relative_to(up).as_posix()
            for run in _runs_of_packed(packed):
                if run.path == up / rel:
                    return run
            raise FileNotFoundError(f"{path}: no such run in {packed}")
    raise FileNotFoundError(f"{path}: no metrics.jsonl (no run folder there, and no packed study file "
                            f"({PACKED_NAME}) above it)")


def series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(iterations, values) of ``key`` over the rows that have it (NaN-free)."""
    xs, ys = [], []
    for r in rows:
        v = r.get(key)
        if v is None or not isinstance(v, (int, float)) or v != v:
            continue
        xs.append(int(r["iteration"]))
        ys.append(float(v))
    return xs, ys


def final_eval(run: Run, key: str) -> tuple[float, int | None, int] | None:
    """(value, episodes, iteration) of ``key`` at the run's last evaluation, when the run finished and that evaluation
    is at its last iteration (``run.json``'s ``iterations_total``); ``episodes`` from the split's ``num_episodes``
    (None when not logged). None for a run still going, interrupted, or without that evaluation."""
    xs, ys = series(run.evals, key)
    total = (run.info or {}).get("iterations_total")
    if not ys or (run.info or {}).get("status") != "finished" or not isinstance(total, (int, float)) \
            or xs[-1] != int(total):
        return None
    ns = dict(zip(*series(run.evals, key.replace("success_rate", "num_episodes"))))
    n = ns.get(xs[-1])
    return ys[-1], (int(round(n)) if n is not None else None), xs[-1]


def first_epsilon(run: Run) -> float | None:
    """The ε a run calibrated on its first batch: ``group/epsilon`` of its first training row (rows of an evaluation
    at iteration 0 come before it and do not have it); None when the run never logged one."""
    return next((row["group/epsilon"] for row in run.metrics if "group/epsilon" in row), None)
