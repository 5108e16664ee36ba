"""Pack a study's run folders into one file, or unpack them again.

    python -m analysis.pack results/learning              # results/learning/runs/ -> results/learning/runs.jsonl.xz
    python -m analysis.pack results/learning --unpack     # runs.jsonl.xz -> results/learning/runs/
    python -m analysis.pack results/learning --unpack --into /elsewhere/runs
    python -m analysis.pack results/learning --force      # replace a packed file although runs would be dropped

A committed study keeps its runs as one packed file (``analysis.runs.PACKED_NAME``; the format is described in
``analysis/runs.py``), which every reader of run folders reads in their place (``analysis.runs.find_runs``). It
holds each run's ``config.yaml``, ``run.json``, ``metrics.jsonl``, ``eval.jsonl``, ``epsilon.json`` and
``grouping_scan.jsonl`` (where the run has them), and the
study's ``runs/sweep.jsonl``: every byte of them (``--unpack`` writes them back identical). It leaves out what no
report reads (``DROPPED``): ``train.log`` (progress messages) and ``epsilon_scan.md`` (a table of ``epsilon.json``'s
scan, which ``--unpack`` writes again from it); checkpoints, ``tb/`` and ``wandb/`` are never committed.

Packing is deterministic (xz, records in path order), so packing the same folders again gives the same bytes; after
writing, the file is read back and compared with the folders, and a difference is an error. Packing never shrinks
a study by accident: when the packed file already exists and holds runs the folders lack (a run folder deleted
after ``--unpack``), or cannot be read, nothing is written unless ``--force`` is given. Run folders sit at
``<env>/<model>/<method>/seed_<k>`` below ``runs/`` and a record's path is exactly that (relative, no ``..``), on
packing and on unpacking: nothing is written outside the target folder. Exit status 2 on a missing or unreadable
input, a run folder elsewhere, runs that packing would drop, or an ``--unpack`` target that already holds files.
"""
from __future__ import annotations

import argparse
import json
import lzma
import sys
from pathlib import Path

from analysis.runs import (
    FILE_FIELDS,
    JSON_FILES,
    PACKED_FORMAT,
    PACKED_NAME,
    PACKED_VERSION,
    TABLE_FIELDS,
    PackedRunsError,
    damage_fix,
    file_text,
    find_runs,
    is_record_path,
    read_packed,
    table_rows,
)

__all__ = ["pack", "unpack", "verify", "pack_bytes", "DROPPED", "PackError", "main"]

PROG = "python -m analysis.pack"
#: files of a run folder the packed file leaves out (no report or analysis reads them)
DROPPED = ("train.log", "epsilon_scan.md")
#: xz settings: LZMA2 at level 9e with an 8 MiB window (enough for a study; compressing needs ~100 MB, not ~700)
_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "dict_size": 1 << 23}]


class PackError(Exception):
    """Bad input to pack/unpack (exit status 2)."""


def _table(rows: list[dict]) -> dict:
    """JSON Lines rows column by column (the table of ``analysis/runs.py``'s docstring)."""
    columns: dict[str, list] = {}
    index: dict[str, int] = {}
    shapes: dict[tuple[int, ...], int] = {}
    lines = []
    for r in rows:
        shape = []
        for k, v in r.items():
            if k not in columns:
                columns[k], index[k] = [], len(index)
            columns[k].append(v)
            shape.append(index[k])
        lines.append(shapes.setdefault(tuple(shape), len(shapes)))
    return {"columns": columns, "shapes": [list(s) for s in shapes], "lines": lines}


def _encode(name: str, text: str):
    """(record field, value) for a file's text, or None when its parsed form would not write it back exactly."""
    try:
        if name in JSON_FILES:
            value = json.loads(text)
        elif name.endswith(".jsonl"):
            value = [json.loads(x) for x in text.splitlines()]
        else:
            value = text
    except json.JSONDecodeError:
        return None
    if file_text(name, value) != text:
        return None
    fld = FILE_FIELDS[name]
    if fld in TABLE_FIELDS:
        value = _table(value)
        if file_text(name, table_rows(value)) != text:
            return None
    return fld, value


def _run_dirs(runs_root: Path) -> tuple[list[Path], list[str]]:
    """(run folders: ``seed_<k>`` folders with ``metrics.jsonl``, in path order; notes on what is left out)."""
    dirs, notes = [], []
    for p in sorted(runs_root.rglob("seed_*")):
        if not p.is_dir():
            continue
        if not (p / "metrics.jsonl").is_file():
            notes.append(f"{p}: no metrics.jsonl, not a run (left out)")
            continue
        if not is_record_path(p.relative_to(runs_root).as_posix()):
            raise PackError(f"{p}: a run folder sits at <env>/<model>/<method>/seed_<k> below {runs_root}; move it "
                            "there (or out of the study) and pack again")
        dirs.append(p)
        for f in sorted(p.iterdir()):
            if f.name not in FILE_FIELDS and f.name not in DROPPED:
                notes.append(f"{f}: not packed (only {', '.join(FILE_FIELDS)} are)")
    for f in sorted(runs_root.iterdir()):
        if f.is_file() and f.name != "sweep.jsonl":
            notes.append(f"{f}: not packed (only the runs and sweep.jsonl are)")
    return dirs, notes


def pack_bytes(runs_root: Path) -> tuple[bytes, list[str]]:
    """The packed file's bytes for the run folders below ``runs_root``, and notes on what was left out."""
    dirs, notes = _run_dirs(runs_root)
    if not dirs:
        raise PackError(f"{runs_root}: no run folders (seed_<k>/ with metrics.jsonl) to pack")
    header: dict = {"format": PACKED_FORMAT, "version": PACKED_VERSION, "dropped": list(DROPPED)}
    sweep = runs_root / "sweep.jsonl"
    if sweep.is_file():
        text = sweep.read_text()
        try:
            rows = [json.loads(x) for x in text.splitlines()]
            header["sweep"] = rows if file_text("sweep.jsonl", rows) == text else text
        except json.JSONDecodeError:
            header["sweep"] = text
    lines = [json.dumps(header, separators=(",", ":"))]
    for d in dirs:
        rec: dict = {"path": d.relative_to(runs_root).as_posix()}
        for name in FILE_FIELDS:
            f = d / name
            if not f.is_file():
                continue
            text = f.read_text()
            enc = _encode(name, text)
            if enc is None:
                rec.setdefault("text", {})[name] = text
            else:
                rec[enc[0]] = enc[1]
        lines.append(json.dumps(rec, separators=(",", ":")))
    data = ("\n".join(lines) + "\n").encode("utf-8")
    return lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, filters=_FILTERS), notes


def _files_of(run_dir: Path) -> dict[str, str]:
    return {n: (run_dir / n).read_text() for n in FILE_FIELDS if (run_dir / n).is_file()}


def verify(runs_root: Path, packed: Path) -> None:
    """Read ``packed`` back and compare it with the folders: the same runs, every kept file the same text, and
    ``find_runs`` the same on both (``PackError`` naming the first difference)."""
    _, records = read_packed(packed)
    by_path = {rec["path"]: rec for rec in records}
    dirs, _ = _run_dirs(runs_root)
    if sorted(by_path) != sorted(d.relative_to(runs_root).as_posix() for d in dirs):
        raise PackError(f"{packed}: holds other runs than {runs_root}")
    packed_runs = {r.path.relative_to(packed.parent / "runs").as_posix(): r for r in find_runs(packed)}
    for d in dirs:
        rel = d.relative_to(runs_root).as_posix()
        run = packed_runs[rel]
        for name, text in _files_of(d).items():
            if run.read_text(name) != text:
                raise PackError(f"{packed}: {rel}/{name} does not read back as the file")
    folder_runs = find_runs(runs_root)
    for a in folder_runs:
        b = packed_runs[a.path.relative_to(runs_root).as_posix()]
        if json.dumps([a.key, a.seed, a.metrics, a.evals, a.info]) != json.dumps([b.key, b.seed, b.metrics, b.evals,
                                                                                  b.info]):
            raise PackError(f"{packed}: {a.path} reads differently from the packed file")


def _dropped_runs(out: Path, runs_root: Path) -> list[str]:
    """Record paths of the existing packed file ``out`` that the run folders below ``runs_root`` lack (``PackError``
    when ``out`` cannot be read: which runs it holds is then unknown)."""
    try:
        _, records = read_packed(out)
    except (PackedRunsError, OSError) as e:
        raise PackError(f"{out} exists and cannot be read, so the runs it holds cannot be compared with the folders "
                        f"({e}); `{PROG} {out.parent} --force` replaces it with the run folders of {runs_root}") from e
    have = {d.relative_to(runs_root).as_posix() for d in _run_dirs(runs_root)[0]}
    return sorted({rec["path"] for rec in records} - have)


def pack(study: Path, out: Path | None = None, force: bool = False) -> tuple[Path, list[str]]:
    """Pack ``<study>/runs/`` into ``out`` (default ``<study>/runs.jsonl.xz``), verified; (path, notes). An existing
    ``out`` that holds runs the folders lack, or cannot be read, is a ``PackError`` unless ``force``."""
    runs_root = study / "runs"
    if not runs_root.is_dir():
        raise PackError(f"{runs_root}: no such folder (give a study folder that has runs/)")
    data, notes = pack_bytes(runs_root)
    out = out or study / PACKED_NAME
    if out.exists() and not force:
        dropped = _dropped_runs(out, runs_root)
        if dropped:
            raise PackError(f"{out} holds {len(dropped)} run(s) that {runs_root} lacks, which packing would drop: "
                            f"{', '.join(dropped)}; unpack the missing runs (`{PROG} {study} --unpack --into DIR`, "
                            f"then copy them into {runs_root}), or give --force to drop them")
    tmp = out.with_name(".packing-" + out.name)  # still *.jsonl.xz: verify reads it as a packed file
    tmp.write_bytes(data)
    try:
        verify(runs_root, tmp)
    except (PackError, PackedRunsError):
        tmp.unlink()
        raise
    tmp.replace(out)
    return out, notes


def _epsilon_scan_md(rec: dict) -> str | None:
    """``epsilon_scan.md`` as the trainer writes it (``trainer.loop``), from the run's ``epsilon.json``; None for a
    record that lacks what the table needs."""
    from estimators.calibrate import format_scan

    try:
        head = (f"epsilon: auto, frozen at iteration {rec['iteration']}: epsilon = {rec['epsilon']:g} "
                f"({rec['rule']}: {rec['reason']}); {rec['rows']} rows, {rec['prompt_groups']} prompt groups"
                + (", states centred by group" if rec.get("center_states") else ""))
        return f"# {head}\n\n{format_scan(rec['scan'])}\n"
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def unpack(packed: Path, into: Path) -> int:
    """Write the run folders of ``packed`` below ``into`` (which must be empty or absent); returns the run count.
    ``train.log`` is not in the packed file; ``epsilon_scan.md`` is written again from ``epsilon.json``."""
    header, records = read_packed(packed)  # refuses a record path other than <env>/<model>/<method>/seed_<k>
    if into.exists() and any(into.iterdir()):
        raise PackError(f"{into}: already holds files; unpack into an empty folder (--into DIR)")
    into.mkdir(parents=True, exist_ok=True)
    root = into.resolve()
    if "sweep" in header:
        sweep = header["sweep"]
        (into / "sweep.jsonl").write_text(sweep if isinstance(sweep, str) else file_text("sweep.jsonl", sweep))
    for rec in records:
        d = into / rec["path"]
        if not d.resolve().is_relative_to(root):  # a link below ``into`` could still lead out
            raise PackError(f"{packed}: the record {rec['path']!r} would be written outside {into}; "
                            f"{damage_fix(packed)}")
        d.mkdir(parents=True, exist_ok=True)
        for name, fld in FILE_FIELDS.items():
            if name in (rec.get("text") or {}):
                text = rec["text"][name]
            elif fld in rec:
                text = file_text(name, table_rows(rec[fld]) if fld in TABLE_FIELDS else rec[fld])
            else:
                continue
            (d / name).write_text(text)
        eps = rec.get("epsilon") if "epsilon" in rec else None
        if isinstance(eps, dict) and (scan := _epsilon_scan_md(eps)) is not None:
            (d / "epsilon_scan.md").write_text(scan)
    return len(records)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("study", type=Path, help="a study folder (with runs/ to pack, or runs.jsonl.xz to unpack)")
    ap.add_argument("--unpack", action="store_true", help=f"write the run folders of <study>/{PACKED_NAME} again")
    ap.add_argument("--into", type=Path, default=None, help="with --unpack: where (default <study>/runs)")
    ap.add_argument("--force", action="store_true",
                    help=f"replace <study>/{PACKED_NAME} although it holds runs that <study>/runs/ lacks (they are "
                         "dropped) or cannot be read")
    args = ap.parse_args(argv)
    try:
        if args.unpack:
            if args.force:
                raise PackError("--force goes with packing, not --unpack")
            packed = args.study if args.study.is_file() else args.study / PACKED_NAME
            if not packed.is_file():
                raise PackError(f"{packed}: no such file (pack the study first: {PROG} {args.study})")
            into = args.into or packed.parent / "runs"
            n = unpack(packed, into)
            print(f"{n} runs -> {into} (without train.log, which is not packed; epsilon_scan.md written again "
                  "from epsilon.json)")
        else:
            if args.into is not None:
                raise PackError("--into goes with --unpack")
            out, notes = pack(args.study, force=args.force)
            for note in notes:
                print(f"{PROG}: note: {note}", file=sys.stderr)
            print(f"{len(read_packed(out)[1])} runs -> {out} ({out.stat().st_size:,} bytes; verified against the "
                  f"folders; left out: {', '.join(DROPPED)})")
    except (PackError, PackedRunsError, OSError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
