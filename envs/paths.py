"""Where generated data, converted models and other caches live.

``$BIPACE_CACHE`` overrides the default ``<repo>/.cache`` (git-ignored). Every generator writes below
``cache_dir(<name>)`` so that one variable moves all of them (e.g. to a shared disk on a cluster).
"""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def cache_root() -> Path:
    root = os.environ.get("BIPACE_CACHE")
    return Path(root).expanduser().resolve() if root else REPO_ROOT / ".cache"


def cache_dir(*parts: str, create: bool = True) -> Path:
    """``cache_root()/parts...``, created unless ``create=False``."""
    path = cache_root().joinpath(*parts)
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path
