"""Worker for test_distributed.py: the same training on 1 process or on W ranks (torchrun), written to a file.

    python tests/trainer/dist_worker.py OUT STAGE                         # 1 process
    python -m torch.distributed.run --nproc_per_node 2 tests/trainer/dist_worker.py OUT STAGE

16 fixed rows, mini-batches of 8 rows (2 optimizer steps per iteration), 5 iterations. Rank r of W takes, from
each mini-batch of the single-process run, the r-th of W equal slices, so the global mini-batches are the
same rows. After the run, a checkpoint saved at iteration 3 is reloaded into a fresh engine and iterations 4-5 are
replayed: the result must equal the uninterrupted run bitwise (multi-rank checkpoints).
"""
from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from tests.trainer.helpers import make_rollout_batch, tiny_qwen2  # noqa: E402
from trainer.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from trainer.config import ModelConfig, TrainerConfig  # noqa: E402
from trainer.ppo_actor import PPOActor, shutdown_distributed  # noqa: E402


def build(stage: int) -> PPOActor:
    cfg = TrainerConfig(zero_stage=stage, lr=0.05, adam_eps=1.0, mini_batch_rows=8, micro_batch_rows=2,
                        logprob_batch_rows=3, kl_coef=0.05)
    return PPOActor(tiny_qwen2(layers=2), cfg, model_cfg=ModelConfig(path="tiny:test", hidden_layer=-2))


def local_rows(rank: int, world: int, n: int = 16, mb: int = 8) -> list[int]:
    rows = []
    for start in range(0, n, mb):
        share = mb // world
        rows += list(range(start + rank * share, start + (rank + 1) * share))
    return rows


def iterate(eng, full, rows, its, ckpt=None):
    b = full.select(rows)
    metrics = []
    for it in its:
        adv = torch.randn(len(full), generator=torch.Generator().manual_seed(100 + it))[rows]
        old = eng.compute_logprobs(b.prompt_ids, b.response_ids)
        ref = eng.compute_logprobs(b.prompt_ids, b.response_ids, reference=True, hidden=False)
        metrics.append(eng.update(b.prompt_ids, b.response_ids, adv, old.logprobs, ref.logprobs))
        if ckpt is not None and it == 3:
            save_checkpoint(ckpt, it, eng)
    return metrics, old.hidden


def main(out: str, stage: int) -> None:
    eng = build(stage)
    rank, world = eng.rank, eng.world_size
    full = make_rollout_batch(n=16, seed=7)
    rows = local_rows(rank, world)
    ckpt = out + ".ckpt"
    metrics, hidden = iterate(eng, full, rows, range(1, 6), ckpt=ckpt)
    params = {k: v.detach().clone() for k, v in eng.full_named_parameters()}
    # resume from the iteration-3 checkpoint in a fresh engine and replay iterations 4-5
    eng2 = build(stage)
    loaded = load_checkpoint(ckpt, eng2)
    assert loaded.iteration == 3, loaded
    metrics2, _ = iterate(eng2, full, rows, range(4, 6))
    params2 = {k: v.detach().clone() for k, v in eng2.full_named_parameters()}
    resumed_equal = all(torch.equal(params[k], params2[k]) for k in params) and metrics2 == metrics[3:]
    # hidden states of this rank's rows, gathered in the single-process order
    hid = torch.zeros(16, hidden.shape[1])
    hid[torch.tensor(rows)] = hidden
    if world > 1:
        torch.distributed.all_reduce(hid)
    if rank == 0:
        save_file({**{f"param.{k}": v.contiguous() for k, v in params.items()}, "hidden": hid}, out)
        with open(out + ".json", "w") as f:
            json.dump({"metrics": metrics, "resumed_equal": resumed_equal, "world": world}, f)
    shutdown_distributed()  # as experiments.train does: no rank may abort at exit with the group still up


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
