"""The code style, enforced: ``ruff check`` with the rules and the 120-character line limit of ``pyproject.toml``
passes on the whole repo (``make lint`` runs the same check; docs/conventions.md, "Code style")."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> list[str]:
    exe = Path(sys.executable).with_name("ruff")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("ruff")
    assert found, "ruff is not installed: it is in requirements.txt (make setup installs it)"
    return [found]


def test_ruff_check_passes_on_the_repo():
    res = subprocess.run([*_ruff(), "check", "--no-cache", "--output-format", "concise", "."], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, (
        f"ruff check found problems (`ruff check --fix .` fixes some):\n{res.stdout}{res.stderr}")


def test_the_line_limit_is_checked(tmp_path):
    """The limit is live: E501 is not ignored, and a line one character over it is reported."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    limit = int(re.search(r"^line-length = (\d+)$", text, re.M).group(1))
    ignored = re.search(r"^ignore = \[(.*)\]$", text, re.M)
    assert limit == 120 and not (ignored and "E501" in ignored.group(1))
    probe = tmp_path / "probe.py"
    probe.write_text("x = '" + "a" * (limit - 5) + "'\n", encoding="utf-8")  # limit - 5 + 6 = limit + 1 characters
    res = subprocess.run([*_ruff(), "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), str(probe)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "E501" in res.stdout, res.stdout + res.stderr
