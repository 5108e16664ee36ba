"""Benchmarks of one speed switch each, whose default is decided: one command, a subcommand per switch.

    python -m benchmarks.switches --help                  # every switch, what it measures and where its table is
    python -m benchmarks.switches <switch> [options]      # e.g. pack-weights --models tiny --rows 1,4 --repeats 1
    python -m benchmarks.switches <switch> --help         # that switch's options

Each switch's measurement is a module of this package (``SWITCHES`` names it) with ``parser()`` (its options) and
``main(argv)``; none is a command of its own. Each writes the table named beside it (``--out``), headed by the
command line that made it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Switch:
    module: str  #: the module under ``benchmarks.switches`` that measures it
    setting: str  #: the config key or setting whose default the table decided
    measures: str  #: one line: what the table compares
    table: str  #: the committed table, from the repo root


SWITCHES: dict[str, Switch] = {
    "pack-weights": Switch(
        "pack_weights", "rollout.hf_pack_weights",
        "GB/s of a decode step's matmuls, F.linear vs oneDNN's packed weights, by rows",
        "results/benchmarks/decode_linear.md"),
    "suffix-buckets": Switch(
        "suffix_buckets", "trainer.suffix_buckets",
        "the trainer's passes with suffixes in length buckets vs one padded suffix forward",
        "results/benchmarks/buckets.md"),
    "old-logprobs": Switch(
        "old_logprobs", "trainer.old_logprobs",
        "old log-probs and hidden states taken from the rollout vs the trainer's own pass",
        "results/benchmarks/old_logprobs.md"),
    "row-order": Switch(
        "row_order", "PPOActor.row_order",
        "token positions of unshared passes, rows in prompt order vs length order",
        "results/benchmarks/row_order.md"),
    "threads": Switch(
        "threads", "torch threads, OMP_WAIT_POLICY",
        "an SFT step per thread count and OpenMP wait policy, idle and beside a busy process",
        "results/benchmarks/threads.md"),
}


def batch_parser(prog: str, description: str, preset: str):
    """The options every switch measured on real rollout batches takes: ``--preset``, ``--init-from``,
    ``--batches``, ``--out`` (a switch adds its own)."""
    import argparse

    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--preset", default=preset)
    ap.add_argument("--init-from", default=None, help="warm-started model folder (default, for the demo preset "
                                                      "only: its cached warm start)")
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--out", default=None, help="also write the table to this markdown file")
    return ap
