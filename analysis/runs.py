"""Run folders: ``<root>/<env>/<model>/<method>/seed_<k>/`` (docs/conventions.md, "Run folders").

Each folder holds ``config.yaml`` (resolved config), ``run.json`` (env, model, method, seed, git commit,
status), ``metrics.jsonl`` (one line per training iteration, key ``iteration`` plus the metric namespace
``rollout/ adv/ group/ loss/ perf/``) and ``eval.jsonl`` (one line per evaluation: ``iteration`` plus
``eval/<env>/<split>/success_rate``, ``eval/<env>/<split>/family/<family>/success_rate`` and, for
WebShop, ``eval/<env>/<split>/score``). Plots and tables read only these files.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Run", "find_runs", "read_jsonl", "series", "CONTROL_METHOD"]

#: method folder of the no-update control (``python -m experiments.study <study> --control``): the warm start played
#: on the same goal draws as every method of its seed, no weight ever changed; the report reads methods against it
CONTROL_METHOD = "no-update"

_SEED = re.compile(r"^seed_(\d+)$")


@dataclass
class Run:
    env: str
    model: str
    method: str
    seed: int
    path: Path
    metrics: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    info: dict = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.env, self.model, self.method


def read_jsonl(path: Path) -> list[dict]:
    """Lines of a JSONL file; a torn last line (a run killed mid-write) is skipped, others must parse."""
    if not path.exists():
        return []
    out = []
    lines = path.read_text().splitlines()
    for n, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as e:
            if n == len(lines) - 1:
                continue
            raise ValueError(f"{path}:{n + 1}: not valid JSON ({e})") from e
    return out


def find_runs(root: str | Path) -> list[Run]:
    """Every ``seed_<k>`` folder below ``root`` (any depth), sorted by (env, model, method, seed)."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"no run folder at {root}: run `python -m experiments.train ...` or pass --runs")
    runs = []
    for p in sorted(root.rglob("seed_*")):
        m = _SEED.match(p.name)
        if not (m and p.is_dir()) or not (p / "metrics.jsonl").exists():
            continue
        info = json.loads((p / "run.json").read_text()) if (p / "run.json").exists() else {}
        method_dir, model_dir, env_dir = p.parent, p.parent.parent, p.parent.parent.parent
        runs.append(
            Run(
                env=info.get("env", env_dir.name),
                model=info.get("model", model_dir.name),
                method=info.get("method", method_dir.name),
                seed=int(m.group(1)),
                path=p,
                metrics=read_jsonl(p / "metrics.jsonl"),
                evals=read_jsonl(p / "eval.jsonl"),
                info=info,
            )
        )
    return sorted(runs, key=lambda r: (r.env, r.model, r.method, r.seed))


def series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(iterations, values) of ``key`` over the rows that have it (NaN-free)."""
    xs, ys = [], []
    for r in rows:
        v = r.get(key)
        if v is None or not isinstance(v, (int, float)) or v != v:
            continue
        xs.append(int(r["iteration"]))
        ys.append(float(v))
    return xs, ys
