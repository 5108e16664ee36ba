"""Where generated data, converted models and other caches live, and how paths are written down portably.

``$BIPACE_CACHE`` overrides the default ``<repo>/.cache`` (git-ignored). Every generator writes below
``cache_dir(<name>)`` so that one variable moves all of them (e.g. to a shared disk on a cluster).

Run folders, study records and logs must read the same in any clone on any machine, so a path is recorded in its
*portable* form (``portable_path``): ``$BIPACE_CACHE/<rest>`` below the cache root, ``<rest>`` (relative to the
repository) below the repository, and as given otherwise (a folder of the user's own). ``resolve_path`` reads any
of the three back; every reader of a recorded path goes through it.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CACHE_VAR = "$BIPACE_CACHE"


def cache_root() -> Path:
    root = os.environ.get("BIPACE_CACHE")
    return Path(root).expanduser().resolve() if root else REPO_ROOT / ".cache"


def cache_dir(*parts: str, create: bool = True) -> Path:
    """``cache_root()/parts...``, created unless ``create=False``."""
    path = cache_root().joinpath(*parts)
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path


def _under(p: Path, root: Path) -> str | None:
    try:
        rel = p.relative_to(root)
    except ValueError:
        return None
    return rel.as_posix()


def portable_path(path: str | os.PathLike) -> str:
    """``path`` as it is recorded: ``$BIPACE_CACHE/<rest>`` below the cache root (checked first: the default
    cache lies inside the repository), ``<rest>`` below the repository, ``path`` unchanged otherwise.

    Strings that are not file paths (``tiny:...``, ``smollm2``, an already portable ``$BIPACE_CACHE/...``) and
    relative paths come back unchanged."""
    s = os.fspath(path)
    if not s or s.startswith(CACHE_VAR) or not os.path.isabs(os.path.expanduser(s)):
        return s
    p = Path(os.path.abspath(os.path.expanduser(s)))
    for root, prefix in ((cache_root(), CACHE_VAR), (REPO_ROOT, None)):
        for r in {root, root.resolve()}:
            rel = _under(p, r)
            if rel is not None:
                if prefix is None:
                    return rel or "."
                return prefix if rel in ("", ".") else f"{prefix}/{rel}"
    return s


def resolve_path(path: str | os.PathLike, base: Path | None = None) -> Path:
    """The folder or file a recorded path names on this machine: ``$BIPACE_CACHE/...`` below ``cache_root()``,
    ``~`` expanded, a relative path below ``base`` (default: the current folder, else the repository when it
    exists only there), an absolute path as it is."""
    s = os.fspath(path)
    if s == CACHE_VAR or s.startswith(CACHE_VAR + "/"):
        return cache_root().joinpath(s[len(CACHE_VAR) + 1:]) if s != CACHE_VAR else cache_root()
    p = Path(os.path.expanduser(s))
    if p.is_absolute():
        return p
    if base is not None:
        return base / p
    if not p.exists() and (REPO_ROOT / p).exists():
        return REPO_ROOT / p
    return p


def portable_text(text: str) -> str:
    """``text`` with every absolute path below the cache root or the repository written portably (for records
    and logs that quote commands or paths): the interpreter becomes ``python``, ``python <repo>/x/y.py`` becomes
    ``python -m x.y``, cache paths ``$BIPACE_CACHE/...`` and repository paths repo-relative."""
    exe = sys.executable
    if exe:
        text = text.replace(exe, "python")
    roots = []
    for root, prefix in ((cache_root(), CACHE_VAR), (REPO_ROOT, "")):
        for r in {str(root), str(root.resolve())}:
            roots.append((r, prefix))
    roots.sort(key=lambda t: -len(t[0]))  # the cache inside the repo before the repo itself
    for r, prefix in roots:
        if prefix:
            text = re.sub(re.escape(r) + r"(?=/|(?![\w.-]))", lambda m, p=prefix: p, text)
        else:
            text = re.sub(r"python " + re.escape(r) + r"/([\w/]+)\.py\b",
                          lambda m: "python -m " + m.group(1).replace("/", "."), text)
            text = re.sub(re.escape(r) + r"/", "", text)
            text = re.sub(re.escape(r) + r"(?![\w.-])", ".", text)
    return text
