"""``python -m benchmarks.switches``: one command for the benchmarks of one speed switch each. The dispatcher lists
every switch with its table; each switch's parser takes the options of the command it replaced; every command line
``python -m benchmarks.switches ...`` in a tracked Markdown file (the tables' provenance lines first) parses; a
switch's quickest run writes a table of the committed one's form."""
from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from benchmarks.switches import SWITCHES
from benchmarks.switches.__main__ import main, module

REPO = Path(__file__).resolve().parents[2]
#: a command line in inline code (it may wrap over lines): the switch and its options
COMMAND = re.compile(r"`python -m benchmarks\.switches\s+([a-z][a-z-]*)([^`]*)`")
#: the options of each retired command (``python -m benchmarks.<old>``), as its committed tables were made with
OLD_OPTIONS = {
    "pack-weights": ["--models", "--rows", "--repeats", "--threads", "--out"],
    "suffix-buckets": ["--preset", "--init-from", "--batches", "--buckets", "--out"],
    "old-logprobs": ["--preset", "--init-from", "--batches", "--threads", "--out"],
    "row-order": ["--preset", "--init-from", "--shape", "--nproc", "--batches", "--matmul-threads", "--out"],
    "threads": ["--warmup", "--steps", "--out"],
}
RETIRED = ("decode_linear", "forward_buckets", "old_logprobs", "row_order", "thread_scaling")


def test_help_lists_every_switch_with_its_table(capsys):
    with pytest.raises(SystemExit) as ex:
        main(["--help"])
    assert ex.value.code == 0
    out = capsys.readouterr().out
    for name, s in SWITCHES.items():
        line = next(x for x in out.split("switches:\n", 1)[1].splitlines() if x.split()[:1] == [name])
        assert s.setting in line and s.measures in line and s.table in line
        assert (REPO / s.table).is_file()


@pytest.mark.parametrize("argv", [[], ["nope"], ["--bogus"]])
def test_no_or_an_unknown_switch_is_refused(argv, capsys):
    with pytest.raises(SystemExit) as ex:
        main(argv)
    assert ex.value.code == 2
    assert "switch" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(SWITCHES))
def test_each_switch_is_a_module_of_the_package_not_a_command_of_its_own(name):
    mod = module(name)
    assert mod.PROG == f"python -m benchmarks.switches {name}" and mod.parser().prog == mod.PROG
    assert '__name__ == "__main__"' not in Path(mod.__file__).read_text()


def test_the_retired_commands_are_gone():
    for old in RETIRED:
        assert importlib.util.find_spec(f"benchmarks.{old}") is None, old


@pytest.mark.parametrize("name", sorted(SWITCHES))
def test_each_switch_takes_the_options_of_the_command_it_replaced(name):
    known = {o for a in module(name).parser()._actions for o in a.option_strings}
    assert set(OLD_OPTIONS[name]) <= known


def _tracked_markdown() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.md"], cwd=REPO, capture_output=True, text=True).stdout.split()
    return [REPO / n for n in out] or sorted(REPO.glob("**/*.md"))


def _commands() -> list[tuple[str, str, list[str]]]:
    found = []
    for path in _tracked_markdown():
        if ".venv" in path.parts:
            continue
        for m in COMMAND.finditer(path.read_text(encoding="utf-8", errors="replace")):
            found.append((path.relative_to(REPO).as_posix(), m.group(1), shlex.split(m.group(2))))
    return found


def test_every_committed_table_is_headed_by_a_switch_command():
    for name, s in SWITCHES.items():
        heads = [line for line in (REPO / s.table).read_text().splitlines() if line.startswith("Command: ")]
        assert heads and all(f"`python -m benchmarks.switches {name}" in h for h in heads), s.table


def test_every_switch_command_line_in_the_docs_parses_with_its_parser():
    """A provenance line that no longer parses (a renamed or dropped option) fails here."""
    cmds = _commands()
    tables = {s.table for s in SWITCHES.values()}
    assert tables <= {p for p, _, _ in cmds}
    for path, name, args in cmds:
        assert name in SWITCHES, f"{path}: no switch {name!r}"
        args = [a for a in args if a != "[options]"]
        try:
            module(name).parser().parse_args(args)
        except SystemExit as ex:
            raise AssertionError(f"{path}: python -m benchmarks.switches {name} {' '.join(args)}") from ex


def _headers(text: str) -> list[str]:
    """The table's form: its title, section headings and table header rows."""
    lines = text.splitlines()
    return [line for i, line in enumerate(lines) if line.startswith("#")
            or (line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|-"))]


def test_pack_weights_quickest_run_writes_a_table_of_the_committed_form(tmp_path, capsys):
    out = tmp_path / "decode_linear.md"
    assert main(["pack-weights", "--models", "smollm2,tiny", "--rows", "1", "--repeats", "1", "--out", str(out)]) == 0
    text = out.read_text()
    committed = (REPO / SWITCHES["pack-weights"].table).read_text()
    assert _headers(text) == _headers(committed)
    assert text.splitlines()[2].startswith("Command: `python -m benchmarks.switches pack-weights --models")
