"""``benchmarks.switches.row_order``: the token positions of the trainer's passes, counted as the engine packs them."""
from __future__ import annotations

import torch

from benchmarks.switches.row_order import VARIANTS, batch_positions


def test_length_order_pads_less_than_prompt_order_without_sharing():
    # rows 0..3: prompts in lexicographic order alternate short and long rows; lengths 4+1, 4+9, 4+2, 4+10
    prompts = [torch.full((4,), 2 + i) for i in range(4)]
    responses = [torch.ones(n, dtype=torch.long) for n in (1, 9, 2, 10)]
    shape = {"preset": "x", "nproc": 1, "mini_batch_rows": 4, "micro_batch_rows": 2, "logprob_batch_rows": 2,
             "suffix_buckets": 1}
    got = batch_positions(prompts, responses, shape)
    prompt_order, length_order, _shared = (got["log-prob pass"][v] for v in VARIANTS)
    # prompt order: forwards {0, 1} and {2, 3} padded to 13 and 14; length order: {3, 1} and {2, 0} to 14 and 6
    assert prompt_order == 2 * 13 + 2 * 14 and length_order == 2 * 14 + 2 * 6
    assert got["update"][VARIANTS[0]] == prompt_order and got["update"][VARIANTS[1]] == length_order
