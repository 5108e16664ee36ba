"""What moves a TextCraft state's hidden state: padding, the prompt's step counter, or the observation.

    python -m experiments.state_distances --model $BIPACE_CACHE/warmstart/textcraft-tiny-ee351835b46a/final

Scripted episodes on training goals (``--tasks``): the same failed command repeated (the observation stays the
same while the prompt's "steps taken" line moves), then the expert's first actions (the observation changes).
Prompts are encoded as a rollout encodes them (``--history-length``, the inventory shown as in the CPU presets),
and the hidden state at each row's last prompt token (``--layer``, as BiPACE reads it) comes from one packed
forward, with every prompt also run beside a longer one (other padding). The table gives the cosine distances of
three kinds of pairs within a goal: one prompt padded two ways, one observation at two step counts, two different
observations; the clustering joins two rows at distance <= epsilon + 1e-6 (``estimators.cluster.JOIN_TOL``).
"""
from __future__ import annotations

import argparse
import statistics
import sys

import torch

__all__ = ["pair_distances", "main"]

FAILED = "get 1 nothing"


def _prompts(env, tok, task: int, repeats: int, expert_steps: int, history_length: int):
    """[(observation key, ids)] of one goal's scripted states."""
    from agents.prompts import Transcript, get_prompt_builder
    from agents.rollout import encode_transcript, prompt_config_for
    from envs.base import replay

    builder = get_prompt_builder("textcraft")
    cfg = prompt_config_for(tok, 2048, history_length=history_length)
    reset = {"seed": task, "options": {"split": "train", "task_index": task}}
    rows = []
    env.reset(**reset)
    scripts = ([FAILED] * repeats, env.expert_plan()[:expert_steps])
    for k, actions in enumerate(scripts):
        states = replay(env, actions, **reset)
        t = Transcript.start(*states[0])
        if k == 0:
            rows.append((states[0][1]["anchor_obs"], encode_transcript(tok, builder, t, cfg, 2048)[0]))
        for action, (obs, info) in zip(actions, states[1:]):
            t.record(action, obs, info)
            rows.append((info["anchor_obs"], encode_transcript(tok, builder, t, cfg, 2048)[0]))
    return rows


def pair_distances(model, tok, tasks, *, layer: int = -2, repeats: int = 4, expert_steps: int = 3,
                   history_length: int = 0) -> dict[str, list[float]]:
    """{pair kind: cosine distances} (see module docstring)."""
    from envs.textcraft import TextCraftEnv
    from trainer.forward import pack_rows, policy_forward

    env = TextCraftEnv(show_inventory=True, max_steps=15)
    rows = []  # (task, observation, ids)
    for task in tasks:
        rows += [(task, o, ids) for o, ids in _prompts(env, tok, task, repeats, expert_steps, history_length)]
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    longest = max(len(r[2]) for r in rows)
    filler = torch.full((longest + 7,), int(tok.eos_token_id or 1))
    one = [torch.tensor([int(tok.eos_token_id or 1)])]

    def states(prompts):
        packed = pack_rows(prompts, one * len(prompts), pad_id=pad)
        with torch.no_grad():
            return policy_forward(model, packed, hidden_layer=layer, compute_entropy=False).hidden.double()

    h = states([torch.tensor(r[2]) for r in rows])
    h_padded = torch.stack([states([filler, torch.tensor(r[2])])[1] for r in rows])
    unit = lambda x: x / x.norm(dim=1, keepdim=True)  # noqa: E731
    phi, phi_p = unit(h), unit(h_padded)
    d = 1 - phi @ phi.T
    out = {"one prompt, two paddings": [float(x) for x in (1 - (phi * phi_p).sum(1))],
           "one observation, other step count": [], "other observations": []}
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            if rows[i][0] != rows[j][0]:
                continue
            same_obs = rows[i][1] == rows[j][1]
            if same_obs and rows[i][2] == rows[j][2]:
                continue  # the very same prompt (no step counter moved): not a pair of two states
            out["one observation, other step count" if same_obs else "other observations"].append(float(d[i, j]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.state_distances", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a model folder (e.g. the cached TextCraft warm start)")
    ap.add_argument("--tasks", default="3,23", help="comma-separated train task indices (default: 3,23)")
    ap.add_argument("--layer", type=int, default=-2, help="hidden layer (default -2, as the CPU presets)")
    ap.add_argument("--repeats", type=int, default=4, help="failed commands per goal (default 4)")
    ap.add_argument("--history-length", type=int, default=0, help="past turns in the prompt (CPU presets: 0)")
    args = ap.parse_args(argv)
    from agents.models.loading import load_model_and_tokenizer
    from estimators.cluster import JOIN_TOL

    torch.manual_seed(0)
    model, tok = load_model_and_tokenizer(args.model)
    model.eval()
    tasks = [int(x) for x in args.tasks.split(",") if x.strip()]
    dist = pair_distances(model, tok, tasks, layer=args.layer, repeats=args.repeats,
                          history_length=args.history_length)
    print(f"Cosine distances of layer {args.layer} states at the last prompt token, TextCraft train tasks {tasks} "
          f"(join tolerance {JOIN_TOL:g}):\n")
    print("| pairs | n | min | median | max |")
    print("|---|---|---|---|---|")
    for kind, xs in dist.items():
        if xs:
            print(f"| {kind} | {len(xs)} | {min(xs):.2e} | {statistics.median(xs):.2e} | {max(xs):.2e} |")
        else:
            print(f"| {kind} | 0 | – | – | – |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
