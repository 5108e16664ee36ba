"""Worker for test_distributed.py: under ZeRO-3 on 2 ranks, a NaN in one rank's shard of one weight stops the save
on every rank.

    python -m torch.distributed.run --nproc_per_node 2 tests/trainer/dist_nonfinite_worker.py OUT

Saves a checkpoint at iteration 1, then writes a NaN into rank 1's own partition (``ds_tensor``) of one weight and
saves at iteration 2: every rank must raise ``NonFiniteError`` naming that weight (none hangs in a collective the
other skipped). Each rank writes what it saw to ``OUT.rank<r>.json``.
"""
from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

from tests.trainer.helpers import tiny_qwen2  # noqa: E402
from trainer.checkpoint import list_checkpoints, save_checkpoint  # noqa: E402
from trainer.config import ModelConfig, TrainerConfig  # noqa: E402
from trainer.ppo_actor import NonFiniteError, PPOActor, shutdown_distributed  # noqa: E402

WEIGHT = "model.layers.0.mlp.up_proj.weight"


def main(out: str) -> None:
    cfg = TrainerConfig(zero_stage=3, lr=1e-3, mini_batch_rows=4, micro_batch_rows=2, logprob_batch_rows=4)
    eng = PPOActor(tiny_qwen2(layers=2), cfg, model_cfg=ModelConfig(path="tiny:test", hidden_layer=-1))
    rank = eng.rank
    ckpt = out + ".ckpt"
    save_checkpoint(ckpt, 1, eng)
    p = dict(eng.lm.named_parameters())[WEIGHT]
    shard = p.ds_tensor
    if rank == 1:
        with torch.no_grad():
            shard.view(-1)[0] = float("nan")
    seen = {"rank": rank, "shard_numel": shard.numel(), "full_numel": p.ds_numel, "error": None}
    try:
        save_checkpoint(ckpt, 2, eng)
    except NonFiniteError as e:
        seen["error"] = str(e)
    torch.distributed.barrier()  # both ranks are still in step after the refusal
    seen["checkpoints"] = [c.name for c in list_checkpoints(ckpt)]
    with open(f"{out}.rank{rank}.json", "w") as f:
        json.dump(seen, f)
    shutdown_distributed()


if __name__ == "__main__":
    main(sys.argv[1])
