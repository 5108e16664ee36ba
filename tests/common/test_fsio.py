"""``common.fsio.atomic_folder``: a folder written in a temporary sibling replaces its target only on a clean exit."""
from __future__ import annotations

import stat

import pytest

from common.fsio import atomic_folder


def test_a_clean_exit_replaces_the_folder_with_shared_permissions(tmp_path):
    out = tmp_path / "models" / "m"
    out.mkdir(parents=True)
    (out / "old.txt").write_text("old")
    with atomic_folder(out) as tmp:
        assert tmp.parent == out.parent and tmp != out
        (tmp / "config.json").write_text("{}")
    assert sorted(p.name for p in out.iterdir()) == ["config.json"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert stat.S_IMODE((out / "config.json").stat().st_mode) == 0o644
    assert sorted(p.name for p in out.parent.iterdir()) == ["m"]  # no temporary sibling left


def test_an_error_leaves_the_old_folder_and_no_sibling(tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    (out / "old.txt").write_text("old")
    with pytest.raises(KeyboardInterrupt), atomic_folder(out) as tmp:
        (tmp / "half.bin").write_text("x")
        raise KeyboardInterrupt
    assert [p.name for p in out.iterdir()] == ["old.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["m"]


def test_settled_lines_keep_each_progress_bar_as_last_drawn_whatever_the_chunking():
    from common.fsio import SettledLines

    stream = (b"start\n\rLoading:   0%|  | 0/26\rLoading: 100%|##| 26/26\nnext line\r\n\n"
              b"\rbar 1\rbar 2\r      \rafter clear\nunfinished\rlast")
    want = b"start\nLoading: 100%|##| 26/26\nnext line\n\nafter clear\nlast"
    for size in (1, 2, 3, 7, len(stream)):
        s = SettledLines()
        out = b"".join(s.feed(stream[i:i + size]) for i in range(0, len(stream), size)) + s.close()
        assert out == want, size
    # a bar that never ends its line holds one frame, not all of them
    s = SettledLines()
    for i in range(10_000):
        assert s.feed(f"\rstep {i}".encode()) == b""
    assert len(s._line) < 20 and s.close() == b"step 9999"


def test_settled_lines_show_a_long_bar_once_per_interval():
    from common.fsio import SettledLines

    now = [0.0]
    s = SettledLines(every_s=60, clock=lambda: now[0])
    assert s.feed(b"\rsft 1/100") == b""  # not yet a minute
    now[0] = 61
    assert s.feed(b"\rsft 2/100") == b"sft 2/100\n"
    assert s.feed(b"\rsft 3/100") == b""  # shown 0 s ago
    now[0] = 200
    assert s.feed(b"\rsft 3/100") == b"sft 3/100\n"
    now[0] = 300
    assert s.feed(b"\r") == b""  # the same frame again is not repeated
    assert s.feed(b"\rsft 100/100\nnext") == b"sft 100/100\n"  # the finished line, as without every_s
    assert s.close() == b"next"


def test_console_copy_passes_a_terminal_the_frames_and_settles_anything_else():
    import io

    from common.fsio import ConsoleCopy

    class Tty(io.BytesIO):
        def isatty(self):
            return True

    stream = b"load  0%\r 50%\r100%\nstep 1\rstep 2"
    # a terminal: every byte as it came; a file or pipe: each line's last frame, the unfinished one ended at close
    for out, want in ((Tty(), stream), (io.BytesIO(), b"100%\nstep 2\n")):
        copy = ConsoleCopy(out)
        for i in range(0, len(stream), 3):
            copy(stream[i:i + 3])
        copy.close()
        assert out.getvalue() == want
