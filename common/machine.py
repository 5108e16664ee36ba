"""What every benchmark prints about the machine it ran on: CPU model, cores, load, GPU, versions.

Benchmarks on a shared machine report ratios measured in one run; these strings record the conditions beside them.
"""
from __future__ import annotations

import os
import platform
from pathlib import Path

__all__ = ["cpu_name", "loadavg", "gpu_name", "describe"]


def cpu_name() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def loadavg() -> str:
    """The 1/5/15-minute load averages as ``"a b c"``, or ``"n/a"``."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def gpu_name() -> str:
    """The first CUDA device's name, or ``"no GPU"`` (imports torch)."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"


def describe(*, torch_version: bool = True, gpu: bool = False, threads: bool = False) -> str:
    """``"<cpu>, <n> cores[, <gpu>]; Python x.y.z[, torch v][, k thread(s)]"``."""
    parts = [f"{cpu_name()}, {os.cpu_count()} cores" + (f", {gpu_name()}" if gpu else ""),
             f"Python {platform.python_version()}"]
    if torch_version or threads:
        import torch

        if torch_version:
            parts.append(f"torch {torch.__version__}")
        if threads:
            parts.append(f"{torch.get_num_threads()} thread(s)")
    return parts[0] + "; " + ", ".join(parts[1:])
