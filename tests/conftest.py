"""Shared test set-up: offline hub, CPU determinism, and the `gpu` and `vllm` markers."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import importlib.util  # noqa: E402

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:  # pragma: no cover - torch always installed by `make setup`
        has_cuda = False
    has_vllm = importlib.util.find_spec("vllm") is not None
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    skip_vllm = pytest.mark.skip(reason="needs vllm: run `make test-vllm` (uses the .venv-vllm venv)")
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)
        if "vllm" in item.keywords and not has_vllm:
            item.add_marker(skip_vllm)
