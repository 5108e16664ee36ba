"""The set-up's free-disk check: a full disk fails before pip starts, with what to free (a CI run once died 91 s
into pip with "[Errno 28] No space left on device")."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def disk_check(need_gb: int) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "-C", str(ROOT), "disk-check", f"NEED_GB={need_gb}"],
                          capture_output=True, text=True, timeout=60)


def test_disk_check_fails_with_what_to_do_when_the_disk_is_too_small():
    out = disk_check(10**9)
    assert out.returncode != 0
    assert "needs about 1000000000 GB free" in out.stderr and "GB free." in out.stderr
    assert "pip cache purge" in out.stderr


def test_disk_check_passes_when_there_is_room():
    out = disk_check(0)
    assert out.returncode == 0, out.stderr


def test_both_venvs_check_the_disk_before_installing():
    text = (ROOT / "Makefile").read_text()
    for stamp in ("$(STAMP)", "$(VSTAMP)"):
        recipe = re.search(rf"^{re.escape(stamp)}:.*\n\t(.*)", text, re.M)
        assert recipe is not None and recipe.group(1).startswith("$(call check_disk,"), stamp
