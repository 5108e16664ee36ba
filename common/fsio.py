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
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_write_text", "atomic_folder", "fsync_path", "fsync_dir", "disk_full", "free_bytes",
           "format_bytes", "SettledLines", "ConsoleCopy"]


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
    last frame only, so a bar that runs for hours does not grow the buffer. ``every_s``: also give the unfinished
    line's latest frame as a line of its own at most once per ``every_s`` seconds (``clock``), so that a log read
    while a long bar runs shows its progress (``ConsoleCopy``)."""

    def __init__(self, every_s: float | None = None, clock=time.monotonic) -> None:
        self._line = b""
        self.every_s, self._clock = every_s, clock
        self._shown, self._at = b"", clock()

    @staticmethod
    def _settle(line: bytes) -> bytes:
        frames = [f for f in line.split(b"\r") if f.strip()]
        return frames[-1] if frames else b""

    def feed(self, chunk: bytes) -> bytes:
        *done, rest = (self._line + chunk).split(b"\n")
        # keep the unfinished line's last drawn frame (and a trailing \r, which a \r\n split across chunks needs)
        self._line = self._settle(rest) + (b"\r" if rest.endswith(b"\r") else b"")
        out = b"".join(self._settle(line) + b"\n" for line in done)
        if done:
            self._shown, self._at = b"", self._clock()
        frame = self._settle(self._line)
        if self.every_s is not None and frame and frame != self._shown and self._clock() - self._at >= self.every_s:
            out += frame + b"\n"
            self._shown, self._at = frame, self._clock()
        return out

    def close(self) -> bytes:
        rest, self._line = self._settle(self._line), b""
        return rest


class ConsoleCopy:
    """What a child's console output becomes on ``stream``: the bytes as they come on a terminal (progress bars
    redraw in place); elsewhere (a file, a batch job's output, a pipe) ``SettledLines``' lines, with a long bar's
    latest frame once per ``every_s`` seconds, so that a log holds no carriage-return frames. Call it with each
    chunk (``copy(chunk)``), then ``copy.close()``; both write and flush ``stream`` (a binary stream, or a text
    one with ``.buffer``)."""

    def __init__(self, stream, every_s: float = 60.0) -> None:
        self.raw = getattr(stream, "buffer", stream)
        isatty = getattr(stream, "isatty", None)
        self.settled = None if callable(isatty) and isatty() else SettledLines(every_s=every_s)

    def __call__(self, chunk: bytes) -> None:
        self.raw.write(chunk if self.settled is None else self.settled.feed(chunk))
        self.raw.flush()

    def close(self) -> None:
        if self.settled is not None:
            rest = self.settled.close()
            self.raw.write(rest + (b"\n" if rest else b""))
            self.raw.flush()
