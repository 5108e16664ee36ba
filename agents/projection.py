"""Projection of a model response onto an environment action (docs/protocol.md, "Agent loop").

    action = lower(response)[first "<action>" + 8 : first "</action>" after it].strip()
    valid  = "<think>" and "</think>" and "<action>" ... "</action>" all present          [GiGPO]

* A well-formed response whose action is not admissible is still ``valid`` (the env answers it with
  its no-op message; the estimator's penalty does not apply) [GiGPO].
* An invalid response sends ``NOOP_ACTION`` (the empty string) to the env, which every env of this repo
  answers with its no-op message [protocol].
* A ``</action>`` before the first ``<action>`` is ignored (the closing tag must follow the opening one)
  [choice; the reference slices with two independent ``find`` calls, which yields garbage there].
* Tags are matched on the lower-cased text, so ``<ACTION>`` counts [GiGPO lower-cases first].

``project`` never raises: any object (not a string, empty, 100 kB, control characters, nested or
unclosed tags, non-ASCII) yields an action string or the no-op, plus a validity flag.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

__all__ = ["NOOP_ACTION", "Projection", "project", "project_batch", "has_think", "extract_action"]

NOOP_ACTION = ""
_A_OPEN, _A_CLOSE = "<action>", "</action>"
_T_OPEN, _T_CLOSE = "<think>", "</think>"


class Projection(NamedTuple):
    """``action``: the string to send to the env (``NOOP_ACTION`` when invalid); ``valid``: protocol
    validity; ``reason``: why invalid ("" when valid)."""

    action: str
    valid: bool
    reason: str = ""


def _as_text(response: Any) -> str | None:
    if isinstance(response, str):
        return response
    if isinstance(response, (bytes, bytearray)):
        return bytes(response).decode("utf-8", errors="replace")
    return None


def extract_action(lowered: str) -> str | None:
    """The body of the first ``<action>...</action>`` of an already lower-cased text, stripped, or None."""
    start = lowered.find(_A_OPEN)
    if start < 0:
        return None
    body_start = start + len(_A_OPEN)
    end = lowered.find(_A_CLOSE, body_start)
    if end < 0:
        return None
    return lowered[body_start:end].strip()


def has_think(lowered: str) -> bool:
    """Both think tags are present (lower-cased text)."""
    return _T_OPEN in lowered and _T_CLOSE in lowered


def project(response: Any) -> Projection:
    """Project one response (see module docstring). Never raises."""
    try:
        text = _as_text(response)
        if text is None:
            return Projection(NOOP_ACTION, False, f"response is {type(response).__name__}, not text")
        lowered = text.lower()
        action = extract_action(lowered)
        if action is None:
            return Projection(NOOP_ACTION, False, "no <action>...</action>")
        if not has_think(lowered):
            return Projection(NOOP_ACTION, False, "no <think>...</think>")
        return Projection(action, True, "")
    except Exception as exc:  # pragma: no cover - defensive: str methods do not raise on str input
        return Projection(NOOP_ACTION, False, f"projection error: {type(exc).__name__}")


def project_batch(responses: Iterable[Any]) -> tuple[list[str], list[bool]]:
    """``project`` over a batch: ``(actions, valids)``, one entry per response."""
    out = [project(r) for r in responses]
    return [p.action for p in out], [p.valid for p in out]
