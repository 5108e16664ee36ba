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
