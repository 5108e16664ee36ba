"""ALFWorld (TextWorld engine) behind the repo's interface, and a local game generator."""
from __future__ import annotations

__all__ = ["ALFWorldEnv"]


def __getattr__(name):
    if name == "ALFWorldEnv":
        from envs.alfworld.env import ALFWorldEnv

        return ALFWorldEnv
    raise AttributeError(f"module 'envs.alfworld' has no attribute {name!r}")
