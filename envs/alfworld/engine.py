"""ALFWorld's TextWorld engine, driven directly (no batch/async layer), and faster.

``Game`` plays one ``game.tw-pddl`` file with the engine ``AlfredTWEnv`` uses: TextWorld's ``PddlEnv``
(fast-downward underneath) wrapped by ALFWorld's ``AlfredDemangler`` (names such as "apple 1"), and
optionally ALFWorld's hand-coded expert (``HandCodedTWAgent``) driven the way ALFWorld's
``AlfredExpert`` wrapper drives it, but seeded and without letting its failures escape.

Speed-ups (``install_speedups()``; on by default in ``ALFWorldEnv``) [choice]. They change no
observable behaviour (a test compares whole episodes with and without them):

* ``fast_downward.pddl2sas`` (PDDL -> SAS translation, ~1-3 s per call; TextWorld calls it four times per
  load+reset) is memoised in memory and on disk (``cache_dir("alfworld", "translations")``, keyed by a hash of
  domain+problem). The disk cache holds data only, never code: ``<key>.sas.json.z``, zlib-compressed JSON with the
  format, the key and the SAS text; the parsed PDDL task that ``pddl2sas`` also returns is rebuilt from the game's
  own PDDL (parse + normalise, the cheap part). Files of another format (the pickled ``*.pkl.z`` of older versions)
  are never opened. A cache file that does not read, or whose SAS the engine rejects, is named in a warning,
  removed and recomputed; the game file is blamed only when a fresh translation fails too. The cache may sit on a
  disk shared with others (``envs/paths.py``): reading it cannot run code. TextWorld also asks for an
  "optimised" translation used only by its planner (``policy_commands``/walkthrough replanning), which this repo
  does not request: it gets the plain translation instead (plans stay valid, only planner search would be slower).
* The grammar and query parsers TextWorld calls on every step (tatsu, pure Python) are memoised, and
  the text generator's context copies become shallow dict copies (the values are never mutated).
* A game's grammar file (~0.5 s to parse) is parsed once per process: games differ only in the task
  sentence, which is parsed on its own and swapped in.

``fast_downward.pddl2sas`` overwrites ``sys.argv`` and swaps ``sys.stdout``; the wrapper restores both
and serialises calls with a lock.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import json
import logging
import os
import random
import re
import sys
import tempfile
import threading
import zlib
from collections import OrderedDict
from pathlib import Path
from typing import Any

from envs.paths import cache_dir

__all__ = ["Game", "install_speedups", "uninstall_speedups", "speedups_installed", "NOTHING_HAPPENS"]

NOTHING_HAPPENS = "Nothing happens."
_LOCK = threading.RLock()
_ORIGINALS: dict[str, Any] = {}
_MEMORY_CACHE: OrderedDict = OrderedDict()
_MEMORY_CACHE_SIZE = 16
_TRANSLATION_FORMAT = 2  # 1: pickled (task, sas), never read again; 2: JSON with the SAS text
_TRANSLATION_SUFFIX = ".sas.json.z"
#: disk-cache files read since the last ``_take_disk_hits()`` (a reset that fails retries without them)
_DISK_HITS: list[Path] = []
log = logging.getLogger("envs.alfworld.engine")


# ====================================================================== speed-ups
def _translation_key(domain: str, problem: str) -> str:
    import fast_downward

    h = hashlib.sha256()
    for part in (str(_TRANSLATION_FORMAT), getattr(fast_downward, "__version__", "?"), domain, problem):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:40]


def _translation_dir() -> Path | None:
    if os.environ.get("BIPACE_ALFWORLD_DISK_CACHE", "1") == "0":
        return None
    return cache_dir("alfworld", "translations")


def _parse_task(domain: str, problem: str):
    """The normalised PDDL task ``fast_downward.pddl2sas`` returns beside the SAS text, without the translation."""
    import io

    argv, stdout = sys.argv, sys.stdout
    try:
        sys.argv = ["translate.py", "domain", "task"]  # fast_downward's options module parses sys.argv on import
        sys.stdout = io.StringIO()
        from fast_downward.translate import normalize, options  # noqa: F401  (options first, as pddl2sas does)
        from fast_downward.translate.pddl_parser import lisp_parser, parsing_functions

        task = parsing_functions.parse_task(lisp_parser.parse_nested_list(domain.split("\n")),
                                            lisp_parser.parse_nested_list(problem.split("\n")))
        normalize.normalize(task)
    finally:
        sys.argv, sys.stdout = argv, stdout
    return task


class TranslationCacheError(ValueError):
    """A translation-cache file that does not hold what this version writes (the message names it)."""


def _read_translation(path: Path, key: str) -> str:
    """The SAS text of a cache file (``TranslationCacheError`` naming the file and what is wrong)."""
    try:
        record = json.loads(zlib.decompress(path.read_bytes()).decode("utf-8"))
    except (OSError, zlib.error, UnicodeDecodeError, ValueError) as e:
        raise TranslationCacheError(f"{path} does not read as compressed JSON ({type(e).__name__}: {e})") from None
    if not isinstance(record, dict) or record.get("format") != _TRANSLATION_FORMAT or record.get("key") != key \
            or not isinstance(record.get("sas"), str) or not record["sas"].startswith("begin_version"):
        raise TranslationCacheError(f"{path} is not a translation of format {_TRANSLATION_FORMAT} for key {key}")
    return record["sas"]


def _write_translation(folder: Path, path: Path, key: str, sas: str) -> None:
    data = zlib.compress(json.dumps({"format": _TRANSLATION_FORMAT, "key": key, "sas": sas}).encode("utf-8"), 1)
    fd, tmp = tempfile.mkstemp(dir=str(folder), suffix=".tmp")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _take_disk_hits() -> list[Path]:
    with _LOCK:
        hits = list(_DISK_HITS)
        _DISK_HITS.clear()
    return hits


def _forget_translation(path: Path, why: str) -> None:
    """Drop a disk-cache file and its in-memory copy, with a warning naming it (it is recomputed when next asked)."""
    with _LOCK:
        key = path.name.removesuffix(_TRANSLATION_SUFFIX)
        _MEMORY_CACHE.pop(key, None)
        try:
            path.unlink()
        except OSError:
            pass
    log.warning("ALFWorld translation cache file %s %s: removed; the translation is recomputed", path, why)


def _cached_pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False):
    """Memoised ``fast_downward.pddl2sas`` (``optimize`` ignored: see module docstring)."""
    key = _translation_key(domain, problem)
    with _LOCK:
        hit = _MEMORY_CACHE.get(key)
        if hit is not None:
            _MEMORY_CACHE.move_to_end(key)
            return hit
        folder = _translation_dir()
        path = folder / f"{key}{_TRANSLATION_SUFFIX}" if folder is not None else None
        result = None
        if path is not None and path.exists():
            try:
                sas = _read_translation(path, key)  # first: a bad file costs no parsing
                result = (_parse_task(domain, problem), sas)
                _DISK_HITS.append(path)
            except TranslationCacheError as e:  # a damaged or foreign file: recomputed and overwritten
                log.warning("ALFWorld translation cache: %s; recomputing it", e)
                result = None
        if result is None:
            argv, stdout = sys.argv, sys.stdout
            try:
                result = _ORIGINALS["pddl2sas"](domain, problem, verbose=verbose, optimize=False)
            finally:
                sys.argv, sys.stdout = argv, stdout
            if path is not None:
                _write_translation(folder, path, key, result[1])
        _MEMORY_CACHE[key] = result
        while len(_MEMORY_CACHE) > _MEMORY_CACHE_SIZE:
            _MEMORY_CACHE.popitem(last=False)
        return result


def _clone_symbol(sym):
    """Structural copy of a parsed text-generator symbol (no context copying)."""
    from textworld.envs.pddl import textgen as tg

    new = copy.copy(sym)
    new.context = {}
    if isinstance(sym, tg.ListSymbol):
        new.symbol = _clone_symbol(sym.symbol)
    elif isinstance(sym, tg.ConditionalSymbol):
        new.expression = _clone_symbol(sym.expression)
    return new


@functools.lru_cache(maxsize=4096)
def _parse_symbols_cached(text: str, rule_name: str):
    return _ORIGINALS["tg_parse"](text, rule_name=rule_name)


def _tg_parse(text, rule_name=None, **kwargs):
    parsed = _parse_symbols_cached(text, rule_name)
    return [_clone_symbol(s) for s in parsed] if isinstance(parsed, list) else parsed


def _fast_copy_context(context):
    return {
        "state": context["state"],
        "facts": context["facts"],
        "variables": dict(context["variables"]),
        "mapping": dict(context["mapping"]),
        "entity_infos": context["entity_infos"],
    }


def _symbol_copy(self, context):
    new = _clone_symbol(self)
    new.context = _fast_copy_context(context)
    return new


@functools.lru_cache(maxsize=64)
def _logic_parse_cached(text: str, rule_name: str):
    return _ORIGINALS["logic_parse"](text, rule_name=rule_name)


#: the one line in which the grammars of two ALFWorld games differ: ``"task": [{"rhs": "Your task is to: ..."}]``
_TASK_RULE = re.compile(r'("task"\s*:\s*\[\s*\{\s*"rhs"\s*:\s*")((?:[^"\\]|\\.)*)(")')
_TASK_PLACEHOLDER = "BIPACE-TASK-PLACEHOLDER"


def _logic_parse(text, rule_name=None, **kwargs):
    """Parse a game's ``.twl2`` grammar once per distinct grammar *template*: the games' grammars differ
    only in the task sentence, which is parsed on its own and put back (~0.5 s saved per new game)."""
    from textworld.envs.pddl.textgen import ProductionRule

    match = _TASK_RULE.search(text) if rule_name == "pddlStart" else None
    key = text if match is None else text[: match.start(2)] + _TASK_PLACEHOLDER + text[match.end(2):]
    actions, grammar = _logic_parse_cached(key, rule_name)
    fresh = type(grammar)()
    fresh.update(grammar)  # GameLogic copies the rules into its own containers; keep ours pristine
    if match is not None:
        rhs = json.loads('"' + match.group(2) + '"')
        fresh._rules["task"] = [
            ProductionRule(lhs=rule.lhs, rhs=_tg_parse(rhs, rule_name="symbols"), weight=rule.weight,
                           condition=rule.condition)
            for rule in grammar._rules["task"]
        ]
    return dict(actions), fresh


def install_speedups() -> None:
    """Install the memoisations described in the module docstring (idempotent, process-wide)."""
    with _LOCK:
        if _ORIGINALS:
            return
        import fast_downward
        import textworld.logic as twl
        from textworld.envs.pddl import logic as pddl_logic
        from textworld.envs.pddl import textgen as tg

        _ORIGINALS.update(
            pddl2sas=fast_downward.pddl2sas,
            tg_parse=tg._parse_and_convert,
            copy_context=tg.copy_context,
            symbol_copy=tg.Symbol.copy,
            query=twl.Rule.__dict__["parse_conjunctive_query"],
            logic_parse=pddl_logic._parse_and_convert,
        )
        fast_downward.pddl2sas = _cached_pddl2sas
        tg._parse_and_convert = _tg_parse
        tg.copy_context = _fast_copy_context
        tg.Symbol.copy = _symbol_copy
        query = _ORIGINALS["query"].__func__
        twl.Rule.parse_conjunctive_query = classmethod(functools.lru_cache(maxsize=4096)(query))
        pddl_logic._parse_and_convert = _logic_parse


def uninstall_speedups() -> None:
    """Restore TextWorld's and fast-downward's original functions."""
    with _LOCK:
        if not _ORIGINALS:
            return
        import fast_downward
        import textworld.logic as twl
        from textworld.envs.pddl import logic as pddl_logic
        from textworld.envs.pddl import textgen as tg

        fast_downward.pddl2sas = _ORIGINALS["pddl2sas"]
        tg._parse_and_convert = _ORIGINALS["tg_parse"]
        tg.copy_context = _ORIGINALS["copy_context"]
        tg.Symbol.copy = _ORIGINALS["symbol_copy"]
        twl.Rule.parse_conjunctive_query = _ORIGINALS["query"]
        pddl_logic._parse_and_convert = _ORIGINALS["logic_parse"]
        _ORIGINALS.clear()
        _MEMORY_CACHE.clear()
        _parse_symbols_cached.cache_clear()
        _logic_parse_cached.cache_clear()


def speedups_installed() -> bool:
    return bool(_ORIGINALS)


# ====================================================================== one game
#: PDDL predicates no action changes: left out of the state identity
STATIC_PREDICATES = frozenset({
    "receptacletype", "objecttype", "cancontain", "pickupable", "isreceptacleobject", "openable",
    "receptacleatlocation", "cleanable", "heatable", "coolable", "toggleable", "sliceable", "moveable",
})


class ALFWorldGameError(ValueError):
    """A game file that TextWorld cannot load or parse (the message names it)."""


def _broken_game(gamefile: str, exc: Exception) -> ALFWorldGameError:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return ALFWorldGameError(
        f"ALFWorld game file {gamefile} cannot be loaded ({type(exc).__name__}{': ' + text[:300] if text else ''}): "
        "it is damaged; delete its trial folder, or re-download (`alfworld-download`) or regenerate "
        "(`python -m envs.alfworld.generate --out <folder> ...`) the games")


class Game:
    """One ALFWorld game file played with TextWorld's PDDL engine (+ optional hand-coded expert).

    ``state`` is TextWorld's ``GameState`` (keys ``feedback``, ``admissible_commands``, ``won``,
    ``facts`` ...). ``expert_action`` is the hand-coded expert's next command ("look" when it has none,
    as in ALFWorld's ``AlfredExpert``).
    """

    def __init__(self, expert: bool = True):
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
        from textworld.envs import PddlEnv

        self.expert_enabled = bool(expert)
        infos = textworld.EnvInfos(admissible_commands=True, won=True, facts=self.expert_enabled)
        self._engine = AlfredDemangler(PddlEnv(infos), shuffle=False)
        self.gamefile: str | None = None
        self.state = None
        self._expert = None
        self._expert_rng = random.Random(0)
        self.expert_action = "look"
        self.expert_failed = False

    def load(self, gamefile: str) -> None:
        if gamefile != self.gamefile:
            try:
                self._engine.load(gamefile)
            except Exception as e:  # TextWorld's ParseError names no file
                raise _broken_game(gamefile, e) from e
            self.gamefile = gamefile

    def reset(self, seed: int = 0):
        if self.gamefile is None:
            raise RuntimeError("Game.reset before load()")
        _take_disk_hits()
        try:
            self.state = self._engine.reset()
        except Exception as e:  # the PDDL is parsed here, and translated (or read from the translation cache)
            hits = _take_disk_hits()
            if not hits:
                raise _broken_game(self.gamefile, e) from e
            for path in hits:  # the engine rejected a cached translation: the cache file is blamed, not the game
                _forget_translation(path, f"was rejected by the engine ({type(e).__name__}: {str(e)[:200]})")
            try:
                self.state = self._engine.reset()
            except Exception as e2:  # a fresh translation fails too: the game file is broken
                raise _broken_game(self.gamefile, e2) from e2
        self.expert_failed = False
        self.expert_action = "look"
        if self.expert_enabled:
            from alfworld.agents.expert import HandCodedTWAgent

            self._expert_rng.seed(seed)
            self._expert = HandCodedTWAgent(max_steps=200)
            with _LOCK, self._seeded_expert():
                self._expert.reset(self.gamefile)
                self._expert.observe(self.state["feedback"])
        return self.state

    def step(self, command: str):
        """Apply ``command`` (an admissible one reaches the engine; anything else is answered
        "Nothing happens." without recomputing the unchanged state, exactly as the engine would)."""
        prev = self.state
        if command in prev["admissible_commands"]:
            self.state, _, _ = self._engine.step(command)
        else:
            from textworld.core import GameState

            state = GameState(prev)
            state["feedback"] = NOTHING_HAPPENS
            state["raw"] = NOTHING_HAPPENS
            state["last_command"] = command
            self.state = state
        if self.expert_enabled and not self.expert_failed:
            self._advance_expert(command)
        return self.state

    def _seeded_expert(self):
        from alfworld.agents.expert import handcoded_expert

        game = self

        class _Swap:
            def __enter__(self):
                self.saved = handcoded_expert.random
                handcoded_expert.random = game._expert_rng

            def __exit__(self, *exc):
                handcoded_expert.random = self.saved

        return _Swap()

    def _advance_expert(self, command: str) -> None:
        state = self.state
        # ALFWorld 0.4.2's expert recognises a placement by the word "put" (older grammar: "put X in/on
        # Y"); the 0.4.2 grammar says "move X to Y". Without this, it never notes that it let go of an
        # object and loops on Pick Two tasks.
        told = "put" + command[4:] if command.startswith("move ") else command
        try:
            with _LOCK, self._seeded_expert():
                nxt = self._expert.act(state, 0, state["won"], told)
        except Exception:  # HandCodedAgentTimeout / HandCodedAgentFailed / a heuristic's IndexError
            self.expert_failed = True
            self.expert_action = "look"
            return
        self.expert_action = nxt if nxt in state["admissible_commands"] else "look"

    def dynamic_facts(self) -> list[str]:
        """The state's PDDL facts that actions can change, as sorted strings (raw PDDL names)."""
        out = []
        for fact in self.state["_facts"]:
            if fact.name not in STATIC_PREDICATES:
                out.append(fact.name + "(" + ",".join(v.name for v in fact.arguments) + ")")
        out.sort()
        return out

    def close(self) -> None:
        try:
            self._engine.close()
        except Exception:
            pass
