"""Worker for test_start_eval.py: ``experiments.train`` on every rank, with the shared iteration-0 evaluations kept in
FOLDER and the code taken as committed (a test's working tree may hold changes).

    python -m torch.distributed.run --nproc_per_node 2 tests/trainer/dist_share_worker.py FOLDER <train args>
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("DS_ACCELERATOR", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import trainer.run_folder as run_folder  # noqa: E402
import trainer.start_eval as start_eval  # noqa: E402
from experiments.train import main  # noqa: E402

if __name__ == "__main__":
    folder = Path(sys.argv[1])
    start_eval._folder = lambda: folder
    run_folder.git_commit = lambda repo=None: ("c0ffee" * 6 + "abcd", False)
    sys.exit(main(sys.argv[2:]))
