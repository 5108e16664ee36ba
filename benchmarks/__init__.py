"""Benchmarks: each module is a command (``python -m benchmarks.<name>``) that prints a table with the machine and
writes it under ``results/benchmarks/``. Speed: ``env_speed`` (``--env webshop`` for WebShop), ``estimator_speed``,
``eval_refill``, ``generation_speed``, ``iteration_phases``, ``iteration_speed``, ``rollout_speed``, ``sft_phases``,
``trainer_speed``; ``switches`` (``python -m benchmarks.switches <switch>``): one subcommand per speed switch whose
default is decided (packed decode weights, suffix buckets, old log-probs from the rollout, row order, torch threads).
Accuracy:
``estimator_accuracy`` (the ground-truth advantage benchmark, library in ``groundtruth/``)."""
