"""Benchmarks: each module is a command (``python -m benchmarks.<name>``) that prints a table with the machine and
writes it under ``results/benchmarks/``. Speed: ``env_speed`` (``--env webshop`` for WebShop), ``estimator_speed``,
``generation_speed``, ``iteration_phases``, ``iteration_speed``, ``rollout_speed``, ``thread_scaling``,
``trainer_speed``.
Accuracy:
``estimator_accuracy`` (the ground-truth advantage benchmark, library in ``groundtruth/``)."""
