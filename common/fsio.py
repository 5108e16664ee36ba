"""Durable writes and a full disk: write-to-temporary-then-rename with ``fsync``, and recognising ``ENOSPC``.

``atomic_write_text`` writes ``<path>.tmp<pid>``, fsyncs it, renames it over ``path`` and fsyncs the folder, so a
power loss leaves the old file or the new one, never a torn one; on any error (a full disk) the temporary file
is removed. ``atomic_folder(out)`` does the same for a whole folder (a model folder): fill the temporary sibling it
yields, and on a clean exit it replaces ``out``; on an error the sibling is removed and ``out`` is untouched.
``disk_full(exc)`` finds an ``ENOSPC`` anywhere in an exception's chain (safetensors reports it as a
``SafetensorError`` whose text holds "os error 28"). ``SettledLines`` is what a log file keeps of a console stream:
a progress bar's carriage-return frames dropped, each line as it was last drawn.
"""
from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_write_text", "atomic_folder", "fsync_path", "fsync_dir", "disk_full", "free_bytes",
           "format_bytes", "SettledLines"]


def fsync_path(path: str | Path) -> None:
    """fsync one file (opened read-only: no change to its content or times)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | Path) -> None:
    """fsync a folder, so that the names created, renamed or removed in it survive a power loss."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return  # not a folder this system can open: nothing to sync
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.EBADF):  # file systems that cannot sync folders
            raise
    finally:
        os.close(fd)


def atomic_write_text(path: str | Path, text: str, *, durable: bool = True) -> None:
    """Replace ``path`` with ``text`` atomically (and, with ``durable``, fsynced, folder included)."""
    path = Path(path)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


@contextmanager
def atomic_folder(out: str | Path, *, shared: bool = True) -> Iterator[Path]:
    """Yield a fresh temporary sibling of ``out`` to fill; on a clean exit it replaces ``out`` (renamed into place).

    An exception inside the block removes the sibling and leaves ``out`` as it was, so an interrupted write never
    leaves a half folder at ``out``. ``shared``: make the folder 0755 and its files 0644 (``mkdtemp`` makes it
    private; model caches are shared between users).
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        yield tmp
        if shared:
            tmp.chmod(0o755)
            for f in tmp.iterdir():
                f.chmod(0o644)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def disk_full(exc: BaseException | None) -> OSError | None:
    """The ``ENOSPC``/``EDQUOT`` error in ``exc``'s chain (``__cause__``/``__context__``), or None.

    A ``SafetensorError`` whose message holds "os error 28" (safetensors' Rust I/O error) counts too: it is
    returned as an ``OSError(ENOSPC)``."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return exc
        text = str(exc)
        if "os error 28" in text or "No space left on device" in text:
            return OSError(errno.ENOSPC, text)
        exc = exc.__cause__ or exc.__context__
    return None


def free_bytes(path: str | Path) -> int | None:
    """Free bytes on the file system of ``path`` (its nearest existing parent), or None."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def format_bytes(n: int | None) -> str:
    if n is None:
        return "unknown"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


class SettledLines:
    """Console bytes in, log bytes out: ``feed(chunk)`` returns the complete lines seen so far, each reduced to the
    text after its last carriage return (a progress bar's final frame: tqdm redraws a line with ``\\r`` and ends it
    with ``\\n``), and ``close()`` the unfinished rest. Blank frames (a bar cleared before the next one) do not
    replace the text drawn before them; a ``\\r\\n`` line ending keeps the line. The unfinished line is held as its
    last frame only, so a bar that runs for hours does not grow the buffer."""

    def __init__(self) -> None:
        self._line = b""

    @staticmethod
    def _settle(line: bytes) -> bytes:
        frames = [f for f in line.split(b"\r") if f.strip()]
        return frames[-1] if frames else b""

    def feed(self, chunk: bytes) -> bytes:
        *done, rest = (self._line + chunk).split(b"\n")
        # keep the unfinished line's last drawn frame (and a trailing \r, which a \r\n split across chunks needs)
        self._line = self._settle(rest) + (b"\r" if rest.endswith(b"\r") else b"")
        return b"".join(self._settle(line) + b"\n" for line in done)

    def close(self) -> bytes:
        rest, self._line = self._settle(self._line), b""
        return rest
