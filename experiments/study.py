"""``python -m experiments.study``: the entry point of ``lab.study`` (its module docstring is this command's help)."""
from __future__ import annotations

import sys

from lab.study import main

if __name__ == "__main__":
    sys.exit(main())
