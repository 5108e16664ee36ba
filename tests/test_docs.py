"""The repo is self-contained: every documentation page that a file points to is in ``docs/``.

Checks over every git-tracked text file (this file excepted, since it spells the patterns out):

* no pointer to notes that are not in the repo: a ``shared/docs`` path, a bare ``method.md`` /
  ``protocol.md`` / ``platform.md`` / ``architecture.md`` / ``house-style.md`` that is not a ``docs/`` path, or
  the phrase "house style" (the old name of ``docs/conventions.md``);
* every ``docs/<page>.md`` mentioned exists, and so does the section named with it, either as
  ``docs/<page>.md#anchor`` or as ``docs/<page>.md, "Heading"``; relative Markdown links to ``.md`` files resolve;
* no narration outside ``tests/``: the repo speaks of the project, not of who worked on it when. A work session
  (by name or ordinal: "this session", "(thirteenth session)"), a role as an author ("(lead, ...)", "other
  engineers' jobs") are refused; ``results/LOG.md`` is the dated research log and names entries by date and commit.

* every command ``python -m <module>`` named in a Markdown file, the Makefile or a YAML file (a table's provenance
  line, a README's recipe, a results/LOG.md entry) names a module that exists: a retired command's tables name the
  command that now makes them.

And the extension recipes hold: the estimator samples of ``README.md`` and ``estimators/README.md``, saved and imported
as ``estimators/README.md`` says, register an estimator; every registered estimator has its row in the table of
``estimators/README.md`` and its defining paragraph in ``docs/method.md``.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from functools import cache, lru_cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SELF = Path(__file__).resolve().relative_to(REPO).as_posix()

#: note names that once lived outside the repo; only their docs/ pages count as references
_NOTE = r"(?:method|protocol|platform|architecture|house-style)\.md"
STALE = [
    (re.compile(r"shared/docs"), "a path to notes outside the repo"),
    (re.compile(r"(?<![\w./-])" + _NOTE), "a bare note name (write docs/<page>.md)"),
    (re.compile(r"house[\s_-]+style", re.IGNORECASE), "the old name of docs/conventions.md"),
]
#: docs/<page>.md (from the repo root, or ../docs/ from a file's folder), with an optional #anchor or , "Heading"
DOC_REF = re.compile(
    r'(?<![\w./-])(?P<path>(?:\.\./)*docs/[\w./-]*?\.md)(?:#(?P<anchor>[\w-]+)|`?,\s*"(?P<heading>[^"\n]{1,80})")?'
)
MD_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
#: a command line ``python -m pkg.module`` (``python3`` too)
PYTHON_M = re.compile(r"\bpython3?\s+-m\s+(?P<module>[A-Za-z_][\w.]*\w)")

_ORDINAL = (r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth"
            r"|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|\d+(?:st|nd|rd|th))")
#: how the repo was made, told by the work's sessions, ordinals and roles. Only patterns that find no technical use
#: in the repo: "helper", "worker" and a bare "lead" also name functions, processes and a margin, so they are not here.
NARRATION = [
    re.compile(r"\bsessions?\b", re.IGNORECASE),  # a technical one too: say "process group", "interpreter"
    re.compile(_ORDINAL + r"[\s-]+(?:sessions?|leads?)\b", re.IGNORECASE),
    re.compile(r"\(lead\b|\blead,", re.IGNORECASE),  # "(lead, third session, ...)", "2026-12-03, lead, ..."
    re.compile(r"\bengineers?\b", re.IGNORECASE),  # "other engineers' jobs": say "other jobs"
]


@lru_cache(maxsize=1)
def tracked_text_files() -> tuple[tuple[str, str], ...]:
    """(path relative to the repo, text) of every tracked file that decodes as UTF-8 text."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
        names = sorted(n for n in out.decode().split("\0") if n)
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: every file outside hidden folders
        names = sorted(p.relative_to(REPO).as_posix() for p in REPO.rglob("*")
                       if p.is_file() and not any(s.startswith(".") or s == "__pycache__"
                                                  for s in p.relative_to(REPO).parts))
    files = []
    for name in names:
        path = REPO / name
        if name == SELF or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary
        try:
            files.append((name, data.decode("utf-8")))
        except UnicodeDecodeError:
            continue
    return tuple(files)


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def _plain(heading: str) -> str:
    return " ".join(heading.replace("`", "").replace("*", "").split()).lower()


@cache
def headings(path: Path) -> tuple[str, ...]:
    """The Markdown headings of ``path`` (outside code fences), as written."""
    out, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
            out.append(m.group(1))
    return tuple(out)


def _section_problem(target: Path, anchor: str | None, heading: str | None) -> str | None:
    if anchor is None and heading is None:
        return None
    found = headings(target)
    if anchor is not None and anchor.lower() not in {_slug(h) for h in found}:
        return f"has no section with anchor #{anchor}"
    if heading is not None and _plain(heading) not in {_plain(h) for h in found}:
        return f'has no section "{heading}"'
    return None


def stale_references(name: str, text: str) -> list[str]:
    """'file:line: what' for each pointer to notes outside the repo."""
    problems = []
    for pattern, what in STALE:
        for m in pattern.finditer(text):
            if what.startswith("a bare") and name.startswith("docs/") and (REPO / "docs" / m.group(0)).is_file():
                continue  # a relative link between pages of docs/
            problems.append(f"{name}:{_line(text, m.start())}: {m.group(0)!r} is {what}")
    return problems


def broken_doc_references(name: str, text: str) -> list[str]:
    """'file:line: what' for each docs/ path, section or relative .md link that does not exist."""
    problems = []
    for m in DOC_REF.finditer(text):
        ref = m.group("path")
        target = ((REPO / name).parent if ref.startswith("../") else REPO) / ref
        if not target.is_file():
            problems.append(f"{name}:{_line(text, m.start())}: {ref} does not exist")
        elif why := _section_problem(target, m.group("anchor"), m.group("heading")):
            problems.append(f"{name}:{_line(text, m.start())}: {ref} {why}")
    if name.endswith(".md"):
        for m in MD_LINK.finditer(text):
            tgt = m.group("target")
            if re.match(r"[a-zA-Z][\w+.-]*:", tgt) or tgt.startswith(("/", "#")):
                continue  # URLs, absolute paths, in-page anchors
            path, _, anchor = tgt.partition("#")
            if not path.endswith(".md"):
                continue
            target = (REPO / name).parent / path
            if not target.is_file():
                problems.append(f"{name}:{_line(text, m.start())}: link {tgt} does not resolve")
            elif why := _section_problem(target, anchor or None, None):
                problems.append(f"{name}:{_line(text, m.start())}: link {tgt} {why}")
    return problems


def narration(name: str, text: str) -> list[str]:
    """'file:line: the matched words | the line' for each line that tells who worked on the repo when."""
    spans = sorted({m.span() for pattern in NARRATION for m in pattern.finditer(text)}, key=lambda s: (s[0], -s[1]))
    found: dict[int, list[str]] = {}
    end = -1
    for a, b in spans:  # a match inside a longer one ("session" in "thirteenth session") is named once
        if b > end:
            found.setdefault(_line(text, a), []).append(text[a:b])
            end = b
    lines = text.splitlines()
    return [f"{name}:{n}: {', '.join(map(repr, words))} | {lines[n - 1].strip()[:110]}"
            for n, words in sorted(found.items())]


def missing_modules(name: str, text: str) -> list[str]:
    """'file:line: module' for each ``python -m <module>`` whose module cannot be found."""
    import importlib.util

    problems = []
    for m in PYTHON_M.finditer(text):
        module = m.group("module")
        if module.startswith("bipace."):  # the installed name of a repo package (pyproject's package-dir)
            module = module.removeprefix("bipace.")
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent that is no package
            found = False
        if not found:
            problems.append(f"{name}:{_line(text, m.start())}: python -m {m.group('module')}")
    return problems


def test_the_scan_sees_the_repo():
    names = {n for n, _ in tracked_text_files()}
    assert len(names) > 100 and {"README.md", "estimators/algorithms.py", "configs/README.md"} <= names


def test_no_pointer_to_notes_outside_the_repo():
    problems = [p for name, text in tracked_text_files() for p in stale_references(name, text)]
    assert not problems, f"{len(problems)} stale reference(s):\n" + "\n".join(problems)


def test_no_narration_outside_tests():
    problems = [p for name, text in tracked_text_files() if not name.startswith("tests/")
                for p in narration(name, text)]
    if problems:
        files: dict[str, int] = {}
        for p in problems:
            files[p.split(":", 1)[0]] = files.get(p.split(":", 1)[0], 0) + 1
        pytest.fail(f"{len(problems)} line(s) in {len(files)} file(s) tell who worked on the repo when (a session, "
                    "an ordinal of the work, a role); say what was done, with its date and commit "
                    "(results/LOG.md: 'this entry', 'the previous entry'):\n"
                    + "".join(f"  {f}: {k} line(s)\n" for f, k in files.items()) + "\n".join(problems),
                    pytrace=False)


def test_no_committed_log_or_page_holds_progress_bar_frames():
    """Logs and pages are read as lines: a carriage return is a progress bar's frame that makes one long line
    (``common.fsio.SettledLines`` keeps the last frame; CSV files end their rows with CRLF and are not checked)."""
    framed = [name for name, text in tracked_text_files() if name.endswith((".log", ".md", ".txt")) and "\r" in text]
    assert not framed, f"carriage returns in {framed}"


def test_every_command_named_in_the_docs_and_results_exists():
    """A provenance line ("Command: python -m ...", "made by python -m ...") names a command that still runs."""
    problems = [p for name, text in tracked_text_files()
                if name.endswith((".md", ".yaml", ".yml")) or name.rsplit("/", 1)[-1] == "Makefile"
                for p in missing_modules(name, text)]
    assert not problems, (f"{len(problems)} command(s) name a module that does not exist (point them at the command "
                          "that now makes the table):\n" + "\n".join(problems))
    assert missing_modules("x.md", "made by `python -m experiments.no_such_command --seed 1`") == [
        "x.md:1: python -m experiments.no_such_command"]
    assert missing_modules("x.md", "`python -m experiments.reanalyse`, `python -m pip install`") == []
    assert missing_modules("x.md", "`python -m bipace.estimators.calibrate`") == []  # installed as bipace.estimators
    assert missing_modules("x.md", "`python -m bipace.estimators.nope`") == ["x.md:1: python -m bipace.estimators.nope"]
    assert missing_modules("x.md", "(`python -m\nexperiments.no_such_command`)") == [
        "x.md:1: python -m experiments.no_such_command"]


def test_every_docs_page_and_section_named_exists():
    assert (REPO / "docs" / "README.md").is_file(), "docs/README.md (the index of docs/) is missing"
    problems = [p for name, text in tracked_text_files() for p in broken_doc_references(name, text)]
    assert not problems, f"{len(problems)} broken docs reference(s):\n" + "\n".join(problems)


def test_the_checks_flag_what_they_should():
    bad = ("see method.md\n(docs: protocol.md)\n/work/shared/docs/platform.md\nthe House style\n"
           "house\nstyle\n")
    assert len(stale_references("x.py", bad)) == 5
    good = "docs/method.md, docs/cpu.md and ../docs/protocol.md; estimators/README.md\n"
    assert stale_references("x.py", good) == []
    assert broken_doc_references("x.py", "docs/no-such-page.md") == ["x.py:1: docs/no-such-page.md does not exist"]
    assert broken_doc_references("x.md", "[a](docs/no-such-page.md)") != []
    assert broken_doc_references("x.py", 'docs/method.md, "Diagnostics" and docs/cpu.md#tokenizer-trap') == []
    assert len(broken_doc_references("x.py", 'docs/method.md, "No such section"; docs/cpu.md#nope')) == 2
    assert len(broken_doc_references("x.md", '`docs/method.md`, "No such section"')) == 1
    told = ("## 2026-12-03 (thirteenth session): x\nthis session ran; the 3rd lead\n| 9 | (lead, idle machine) |\n"
            "# A recorded run (2026-12-03, lead, 2 cores)\nbeside other engineers' jobs\nSessions of the study\n")
    assert [p.split(":")[1] for p in narration("x.md", told)] == ["1", "2", "3", "4", "5", "6"]
    assert "'thirteenth session'" in narration("x.md", told)[0] and "'session'" not in narration("x.md", told)[0]
    said = ("## 2026-12-03 (b2fc7da): x\nthis entry ran; start_new_session=True; a process group of its own\n"
            "its lead is not credited to grouping; the `_run_folder` helper; 2 env workers; leading zeros\n")
    assert narration("x.md", said) == []


# ------------------------------------------------------------------------------------------ the extension recipes
def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)


def estimator_doc_gaps(names, readme_table: str, method: str) -> list[str]:
    """The registered estimators without a row ``| `key` |`` in the table of ``estimators/README.md``, or without a
    paragraph or list item of ``docs/method.md`` that opens with the key (alone or in a list: "`a` and `b` ...")."""
    gaps = []
    for name in sorted(names):
        if not re.search(rf"^\| `{name}` \|", readme_table, re.M):
            gaps.append(f"{name}: no row in the table of estimators/README.md")
        if not re.search(rf"^(?:\* )?(?:`\w+`(?:,| and) )*`{name}`", method, re.M):
            gaps.append(f"{name}: no paragraph of docs/method.md opens with `{name}`")
    return gaps


def test_every_registered_estimator_is_in_the_formula_tables():
    from estimators import ESTIMATORS

    readme = (REPO / "estimators" / "README.md").read_text(encoding="utf-8")
    method = (REPO / "docs" / "method.md").read_text(encoding="utf-8")
    gaps = estimator_doc_gaps(ESTIMATORS, readme, method)
    assert not gaps, "estimators missing from the docs:\n" + "\n".join(gaps)
    assert estimator_doc_gaps(["no_such_estimator"], readme, method) == [
        "no_such_estimator: no row in the table of estimators/README.md",
        "no_such_estimator: no paragraph of docs/method.md opens with `no_such_estimator`"]
    assert estimator_doc_gaps(["b"], "| `b` | x |", "`a` and `b` cluster") == []


@pytest.mark.parametrize("doc", ["README.md", "estimators/README.md"])
def test_the_estimator_recipe_works_as_written(doc, tmp_path):
    """The sample of ``doc`` that registers an estimator, saved in a copy of the package as the module its comment
    names, and imported by the line ``estimators/README.md`` gives for ``estimators/__init__.py``, registers it."""
    sample = next(b for b in python_blocks((REPO / doc).read_text(encoding="utf-8")) if "@register_estimator(" in b)
    name = re.search(r'@register_estimator\("(\w+)"', sample).group(1)
    assert re.search(rf"# in estimators/{name}\.py", sample), f"{doc}: the sample does not say where it goes"
    recipe = (REPO / "estimators" / "README.md").read_text(encoding="utf-8")
    line = re.search(rf"`(from \. import algorithms, {name}\b[^`]*)`", recipe)
    assert line, f"estimators/README.md does not give the import line of estimators/{name}.py"
    pkg = tmp_path / "estimators"
    shutil.copytree(REPO / "estimators", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / f"{name}.py").write_text(sample, encoding="utf-8")
    init = (pkg / "__init__.py").read_text(encoding="utf-8")
    old = re.search(r"^from \. import algorithms\b.*$", init, re.M)
    (pkg / "__init__.py").write_text(init[:old.start()] + line.group(1) + init[old.end():], encoding="utf-8")
    probe = (f"import estimators; assert estimators.__file__.startswith({str(tmp_path)!r}), estimators.__file__\n"
             f"from estimators import ESTIMATORS, EstimatorConfig; EstimatorConfig(name={name!r}).validate()\n"
             f"assert ESTIMATORS[{name!r}].needs_hidden is False; print('ok')")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    res = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stdout + res.stderr
