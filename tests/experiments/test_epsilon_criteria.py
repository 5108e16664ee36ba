"""``python -m experiments.epsilon_criteria --batch ... --hidden ...``: the hidden-state file named on the command
line is read as tensors only, never unpickled into arbitrary objects."""
from __future__ import annotations

import os

import torch

from tests.estimators.helpers import act, make_batch


class _Payload:  # unpickling it (torch.load with weights_only=False) would run os.mkdir(marker)
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def test_a_hidden_file_holding_code_is_refused_with_exit_2_and_never_run(tmp_path, capsys):
    from experiments.epsilon_criteria import main

    rows = [(0, t, 0, 1.0, True, "room", act("go")) for t in range(4)]
    batch = make_batch(rows)
    batch.save(tmp_path / "steps.pt")
    hostile = tmp_path / "hidden.pt"
    torch.save({"layers": {-8: _Payload(tmp_path / "code-ran")}}, hostile)
    assert main(["--batch", str(tmp_path / "steps.pt"), "--hidden", str(hostile)]) == 2
    err = capsys.readouterr().err
    assert not (tmp_path / "code-ran").exists()
    assert f"--hidden {hostile} cannot be read as a torch file of tensors" in err and "could run code" in err
