"""The architecture, enforced: the import graph of the repo's packages has no cycle and no import against the
package order, every gymnasium environment of the repo lives in ``envs`` (an entry point is an import the
graph cannot see), only the environments and the acting loop step environments, and no function of the acting
and training path takes more than ``MAX_PARAMETERS`` parameters (what varies per call; the rest travels in one
object: ``agents.rollout.Agent``, a batch, a settings dataclass).

Package order (a module may import its own package and packages of LOWER layers only; packages of one layer do not
import each other)::

    estimators  <-  common  <-  envs  <-  agents  <-  trainer  <-  warmstart  <-  analysis  <-  groundtruth  <-  lab
                <-  experiments (entry points), benchmarks

``estimators`` is the bottom layer: it imports nothing of the repo outside its own package, so that it installs
alone as ``bipace.estimators`` (pyproject.toml, tests/test_packaging.py).

Every import counts, including function-local ones (a cycle held apart by an import inside a function is still
a cycle). Read with the standard library's ``ast``; no exceptions are listed.
"""
from __future__ import annotations

import ast
import collections
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS: list[tuple[str, ...]] = [("estimators",), ("common",), ("envs",), ("agents",), ("trainer",), ("warmstart",),
                                 ("analysis",), ("groundtruth",), ("lab",), ("experiments", "benchmarks")]
LAYER_OF = {pkg: k for k, layer in enumerate(LAYERS) for pkg in layer}
#: where an environment may be stepped: the envs themselves and the one acting loop (benchmarks time envs directly)
STEPPING_ALLOWED = ("envs/", "agents/rollout.py", "benchmarks/")
#: the packages whose functions are held to MAX_PARAMETERS (``self``/``cls`` not counted; ``*args``, ``**kwargs``
#: and keyword-only parameters counted)
NARROW_PACKAGES = ("agents", "trainer", "warmstart")
MAX_PARAMETERS = 10


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules(root: Path, packages) -> dict[str, Path]:
    return {_module_name(f, root): f for pkg in packages for f in sorted((root / pkg).rglob("*.py"))}


def import_graph(root: Path, packages) -> dict[str, set[str]]:
    """Module -> the repo modules it imports (anywhere in its body), resolved to the longest existing module."""
    mods = _modules(root, packages)

    def resolve(name: str | None) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [resolve(a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [resolve(f"{source}.{a.name}") or resolve(source) for a in node.names]
            graph[mod].update(t for t in targets if t and t != mod)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def order_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for mod, targets in sorted(graph.items()):
        pa = mod.split(".")[0]
        for t in sorted(targets):
            pb = t.split(".")[0]
            if pa != pb and LAYER_OF[pb] >= LAYER_OF[pa]:
                bad.append(f"{mod} imports {t} ({pb} is not below {pa} in the package order)")
    return bad


def _repo_packages() -> list[str]:
    return sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file() and p.name != "tests")


def test_every_package_has_a_layer():
    missing = [p for p in _repo_packages() if p not in LAYER_OF]
    assert not missing, f"packages without a place in the package order: {missing}; add them to LAYERS"


def test_no_import_cycles():
    found = cycles(import_graph(ROOT, _repo_packages()))
    assert not found, "import cycles (break them; function-local imports count):\n" + "\n".join(map(str, found))


def test_imports_follow_the_package_order():
    bad = order_violations(import_graph(ROOT, _repo_packages()))
    assert not bad, "\n".join(bad)


def _calls_register(node: ast.AST) -> bool:
    """``register(...)`` / ``gym.register(...)`` with an entry point (keyword, or the second positional)."""
    if not isinstance(node, ast.Call):
        return False
    name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
    return name == "register" and (any(k.arg == "entry_point" for k in node.keywords) or len(node.args) >= 2)


def registering_modules(root: Path, packages) -> list[str]:
    """The modules whose code registers a gymnasium environment (read with ``ast``)."""
    return sorted(mod for mod, path in _modules(root, packages).items()
                  if any(_calls_register(n) for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))))


def entry_point_package(entry_point) -> str | None:
    """The repo package of an entry point (``"pkg.module:Class"`` or a callable); None outside the repo."""
    if isinstance(entry_point, str):
        module = entry_point.partition(":")[0]
    else:
        module = getattr(entry_point, "__module__", None) or ""
    pkg = module.split(".")[0]
    return pkg if pkg in LAYER_OF else None


def registration_violations(entry_points: dict[str, object]) -> list[str]:
    """Gymnasium ids (id -> entry point) whose entry point lies in a repo package other than ``envs`` and not
    below it: ``envs`` registers every id, so the entry point is an import made from ``envs``."""
    bad = []
    for env_id, entry_point in sorted(entry_points.items()):
        pkg = entry_point_package(entry_point)
        if pkg is not None and pkg != "envs" and LAYER_OF[pkg] >= LAYER_OF["envs"]:
            bad.append(f"{env_id} -> {entry_point} ({pkg} is not below envs in the package order; "
                       "move the environment into envs/)")
    return bad


def test_environments_are_registered_with_entry_points_inside_envs():
    """Import every module that registers a gymnasium environment, then read gymnasium's registry: each id
    whose entry point is in this repo must point into ``envs`` (or below). A string entry point is imported
    only by ``gymnasium.make``, so ``import_graph`` cannot see the edge it makes."""
    import gymnasium as gym

    modules = registering_modules(ROOT, _repo_packages())
    assert "envs" in modules, f"no registration found in envs/__init__.py (found in: {modules})"
    for mod in modules:
        importlib.import_module(mod)
    registered = {spec.id: spec.entry_point for spec in gym.registry.values()}
    ours = {env_id: ep for env_id, ep in registered.items() if entry_point_package(ep) is not None}
    assert set(importlib.import_module("envs").ENV_IDS) <= set(ours)
    bad = registration_violations(registered)
    assert not bad, "environments registered with an entry point above envs/:\n" + "\n".join(bad)


def test_only_envs_and_the_acting_loop_step_environments():
    """An ``env.step``/``pool.step`` call (receiver named like an env or a pool) outside ``envs/`` and
    ``agents/rollout.py`` means a second acting loop."""
    bad = []
    for pkg in _repo_packages():
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(STEPPING_ALLOWED):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "step":
                    recv = node.func.value
                    name = recv.id if isinstance(recv, ast.Name) else getattr(recv, "attr", "")
                    if "env" in name.lower() or "pool" in name.lower():
                        bad.append(f"{rel}:{node.lineno}: {ast.unparse(node)[:80]}")
    assert not bad, "environment stepping outside envs/ and agents/rollout.py:\n" + "\n".join(bad)


def parameter_count(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [p.arg for p in (*a.posonlyargs, *a.args)]
    n = len(names) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)
    return n - (1 if names and names[0] in ("self", "cls") else 0)


def wide_functions(root: Path, packages, limit: int = MAX_PARAMETERS) -> list[str]:
    """``path:line name (n parameters)`` of every function or method in ``packages`` with more than ``limit``."""
    out = []
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and parameter_count(node) > limit:
                    rel = path.relative_to(root).as_posix()
                    out.append(f"{rel}:{node.lineno} {node.name} ({parameter_count(node)} parameters)")
    return out


def test_no_function_of_the_acting_and_training_path_takes_more_than_ten_parameters():
    bad = wide_functions(ROOT, NARROW_PACKAGES)
    assert not bad, (f"functions with more than {MAX_PARAMETERS} parameters (bundle what every call passes alike into "
                     "a context or settings object):\n" + "\n".join(bad))


def test_experiments_holds_entry_points_only():
    """Every module of ``experiments/`` is a command (``if __name__ == "__main__":``) and no package imports one
    (the package order puts ``experiments`` on top; this catches a test-only helper living there)."""
    not_commands = []
    for path in sorted((ROOT / "experiments").glob("*.py")):
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if not any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body):
            not_commands.append(path.name)
    assert not not_commands, f"experiments/ modules that are not commands (move them into a package): {not_commands}"


# ----------------------------------------------------------------------------- the checks can fail
def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def test_a_function_local_cycle_and_a_back_edge_are_found(tmp_path, monkeypatch):
    _write(tmp_path, {
        "envs/__init__.py": "", "envs/a.py": "def f():\n    from envs import b\n", "envs/b.py": "from . import a\n",
        "agents/__init__.py": "", "agents/x.py": "import envs.a\n",
        "trainer/__init__.py": "", "trainer/y.py": "from agents.x import thing\n",
        "envs/c.py": "def g():\n    import trainer.y\n",
    })
    graph = import_graph(tmp_path, ["envs", "agents", "trainer"])
    assert graph["agents.x"] == {"envs.a"} and graph["trainer.y"] == {"agents.x"}
    assert cycles(graph) == [["envs.a", "envs.b"]]
    assert order_violations(graph) == ["envs.c imports trainer.y (trainer is not below envs in the package order)"]


def test_an_entry_point_above_envs_is_found(tmp_path):
    _write(tmp_path, {
        "envs/__init__.py": "import gymnasium as gym\ngym.register(id='A-v0', entry_point='envs.a:A')\n",
        "groundtruth/__init__.py": "",
        "groundtruth/w.py": "from gymnasium import register\nregister('B-v0', 'x:B')\n",
        "agents/__init__.py": "import atexit\natexit.register(print)\nregistry = {}\nregistry.register = 0\n",
    })
    assert registering_modules(tmp_path, ["envs", "groundtruth", "agents"]) == ["envs", "groundtruth.w"]

    class Local:  # a class entry point, declared to live in groundtruth
        pass

    Local.__module__ = "groundtruth.textenv"
    bad = registration_violations({
        "Ok-v0": "envs.finite.textenv:RoomsEnv", "Common-v0": "common.x:E", "Gym-v1": "gymnasium.envs.x:C",
        "Old-v0": "groundtruth.textenv:RoomsEnv", "Side-v0": "agents.x:E", "Obj-v0": Local,
        "Fn-v0": print,
    })
    assert [b.split(" (")[0] for b in bad] == [f"Obj-v0 -> {Local}", "Old-v0 -> groundtruth.textenv:RoomsEnv",
                                              "Side-v0 -> agents.x:E"]
    assert "groundtruth is not below envs" in bad[1] and "agents is not below envs" in bad[2]
def test_a_wide_function_is_found(tmp_path):
    _write(tmp_path, {
        "agents/a.py": ("def ok(a, b, c, d, e, f, g, h, i, j):\n    pass\n"
                        "def wide(a, b, c, d, e, f, g, h, i, *, j, k):\n    pass\n"
                        "class C:\n    def m(self, a, b, c, d, e, f, g, h, i, j):\n        pass\n"
                        "    def n(self, a, b, c, d, e, f, g, h, i, *args, **kw):\n        pass\n"),
    })
    assert wide_functions(tmp_path, ["agents"]) == ["agents/a.py:3 wide (11 parameters)",
                                                    "agents/a.py:8 n (11 parameters)"]


def test_the_trainer_may_not_import_the_warm_start(tmp_path):
    """The warm start trains with the trainer's PPO actor; an import the other way (even inside a function) is a
    back edge."""
    _write(tmp_path, {
        "trainer/__init__.py": "", "trainer/ppo_actor.py": "def f():\n    from warmstart.sft import SFTRow\n",
        "warmstart/__init__.py": "", "warmstart/sft.py": "from trainer.ppo_actor import f\n",
    })
    graph = import_graph(tmp_path, ["trainer", "warmstart"])
    assert order_violations(graph) == [
        "trainer.ppo_actor imports warmstart.sft (warmstart is not below trainer in the package order)"]


@pytest.mark.parametrize("edges,expected", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["a", "b"], ["c", "d"]]),
])
def test_cycle_finder_by_hand(edges, expected):
    assert sorted(cycles(collections.OrderedDict(edges))) == expected


def test_the_conventions_page_states_these_layers():
    """docs/conventions.md, "Package layout" is the one written statement of LAYERS: its table must match."""
    text = (ROOT / "docs" / "conventions.md").read_text(encoding="utf-8")
    section = text.split("## Package layout", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \|", section, flags=re.M)
    stated = [tuple(re.findall(r"`(\w+)`", pkgs)) for _, pkgs in sorted(rows, key=lambda r: int(r[0]))]
    assert stated == LAYERS, f"docs/conventions.md states {stated}, tests/test_architecture.py enforces {LAYERS}"
