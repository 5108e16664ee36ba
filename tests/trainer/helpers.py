"""Test helpers: a tiny random Qwen2 model and synthetic ``RolloutBatch`` objects (until the rollout exists)."""
from __future__ import annotations

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from agents.batch import RolloutBatch


def tiny_qwen2(seed: int = 0, layers: int = 4, hidden: int = 64, vocab: int = 256, tie: bool = False,
               dtype: torch.dtype = torch.float32) -> Qwen2ForCausalLM:
    """A 4-layer, 64-wide Qwen2 with random weights fixed by ``seed`` (fp32, eval-equivalent: no dropout)."""
    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=tie,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=1,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg).to(dtype)
    # HF initialises with std 0.02: outputs are nearly uniform. Larger weights make log-probs and hidden states
    # differ clearly between rows so that the tests can tell them apart.
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 2:
                p.normal_(0.0, 0.2)
    return model


def make_rollout_batch(n: int = 6, vocab: int = 256, seed: int = 0, groups: int = 2,
                       prompt_len: tuple[int, int] = (3, 12), response_len: tuple[int, int] = (1, 9)) -> RolloutBatch:
    """``n`` step rows with random prompt/response token ids (ids >= 2: 0 is pad, 1 is EOS)."""
    g = torch.Generator().manual_seed(seed)

    def rand_len(lo_hi):
        return int(torch.randint(lo_hi[0], lo_hi[1] + 1, (1,), generator=g))

    prompts = [torch.randint(2, vocab, (rand_len(prompt_len),), generator=g) for _ in range(n)]
    responses = [torch.randint(2, vocab, (rand_len(response_len),), generator=g) for _ in range(n)]
    group = torch.arange(n) % groups
    traj = torch.arange(n) // groups
    return RolloutBatch(
        prompt_ids=prompts,
        response_ids=responses,
        group_id=group,
        traj_id=traj,
        step=torch.zeros(n, dtype=torch.long),
        reward=torch.zeros(n),
        valid=torch.ones(n, dtype=torch.bool),
        done=torch.ones(n, dtype=torch.bool),
        won=torch.zeros(n, dtype=torch.bool),
        response_truncated=torch.zeros(n, dtype=torch.bool),
        anchor_obs=[f"obs {i % 3}" for i in range(n)],
        response_text=[f"<action>a{i % 2}</action>" for i in range(n)],
        action=[f"a{i % 2}" for i in range(n)],
        state_key=[i % 3 for i in range(n)],
        task_family=["f"] * n,
        task_id=[("train", int(x)) for x in group],
    )
