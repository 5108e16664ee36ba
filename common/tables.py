"""Result tables: print one and write it to a file when one is given (its folder made); CSV files of rows, gzip-
compressed when the name ends in .gz, read back as dicts of strings."""
from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path

__all__ = ["emit_table", "read_csv", "write_csv"]


def emit_table(text: str, out: str | Path | None, *, announce: bool = False) -> Path | None:
    """Print ``text``; with ``out``, also write it there (parent folders created) and, with ``announce``, say so.
    Returns the file written, if any."""
    print(text)
    if not out:
        return None
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if announce:
        print(f"wrote {path}")
    return path


def read_csv(path: str | Path) -> list[dict]:
    """The rows of a CSV file (``.gz``: gzip-compressed), each a dict of strings."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as f:
        return list(csv.DictReader(f))


def write_csv(path: str | Path, rows: list[dict], digits: int = 6) -> None:
    """Rows as CSV, floats at ``digits`` significant digits, columns in order of first appearance; gzip-compressed
    when ``path`` ends in .gz, with no time stamp, so the same rows give the same bytes. Nothing for no rows."""
    if not rows:
        return
    keys = list(rows[0].keys())
    for r in rows[1:]:
        keys += [k for k in r if k not in keys]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys)
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.{digits}g}" if isinstance(v, float) else v) for k, v in r.items()})
    path = Path(path)
    if path.suffix == ".gz":
        with open(path, "wb") as f, gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as gz:
            gz.write(buf.getvalue().encode())
    else:
        path.write_text(buf.getvalue(), newline="")
