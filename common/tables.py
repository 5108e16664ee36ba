"""Writing a result table: print it, and write it to a file when one is given (its folder made)."""
from __future__ import annotations

from pathlib import Path

__all__ = ["emit_table"]


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
