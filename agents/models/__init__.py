"""Model folders: loading local causal LMs, SmolLM2 conversion, tiny Qwen2 models and their tokenizers.

See agents/README.md ("Models and engines") and ``python -m agents.models --help``.
"""
from .loading import (
    SMOLLM2_NAME,
    ModelNotFoundError,
    check_model_dir,
    load_model,
    load_model_and_tokenizer,
    load_tokenizer,
    resolve_model_path,
)

__all__ = [
    "SMOLLM2_NAME",
    "ModelNotFoundError",
    "check_model_dir",
    "load_model",
    "load_model_and_tokenizer",
    "load_tokenizer",
    "resolve_model_path",
]
