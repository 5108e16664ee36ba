"""``python -m benchmarks.switches <switch> [options]``: runs one switch's benchmark (``benchmarks.switches``)."""
from __future__ import annotations

import argparse
import importlib
import sys

from benchmarks.switches import SWITCHES


def listing() -> str:
    """One line per switch: its name, the setting, what it measures and its table."""
    width = max(map(len, SWITCHES))
    return "\n".join(f"  {name:<{width}}  {s.setting}: {s.measures} ({s.table})" for name, s in SWITCHES.items())


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.switches", usage="%(prog)s [-h] switch [options]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Benchmarks of one speed switch each, whose default is decided. "
                    "'<switch> --help' gives a switch's options.",
        epilog="switches:\n" + listing())
    ap.add_argument("switch", choices=list(SWITCHES), metavar="switch", help="one of: " + ", ".join(SWITCHES))
    return ap


def module(name: str):
    """The module that measures switch ``name``."""
    return importlib.import_module(f"benchmarks.switches.{SWITCHES[name].module}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in SWITCHES:  # the switch's own parser sees every option, --help included
        return module(argv[0]).main(argv[1:])
    parser().parse_args(argv[:1])  # --help, or an error naming the switches
    return 2


if __name__ == "__main__":
    sys.exit(main())
