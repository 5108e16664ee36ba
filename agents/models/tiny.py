"""Tiny Qwen2-architecture models with random weights and a byte-level BPE tokenizer, for CPU training.

``build_tiny_model(out, TinyModelConfig(...), corpus)`` writes a standard model folder (config,
safetensors, generation config, tokenizer, chat template) that transformers and vLLM load with the
same token ids. Command: ``python -m agents.models build-tiny --out DIR [--layers 4 --hidden 256 ...]``.

Tokenizer [choice]: byte-level BPE trained with ``tokenizers`` using *Qwen2's own* pre-tokenizer
(NFC normaliser, Qwen's split regex, byte-level without prefix space). ``AutoTokenizer`` on a folder
whose config says ``qwen2`` rebuilds Qwen2's pre-tokenizer around the saved vocab and merges
(docs/cpu.md, "Tokenizer trap"); training with the same pipeline makes the two identical, so
``AutoTokenizer`` (vLLM's loader), ``PreTrainedTokenizerFast`` and the raw ``tokenizers.Tokenizer``
give the same ids (tested). Special tokens ``<|endoftext|>`` (pad), ``<|im_start|>``, ``<|im_end|>``
(EOS) as in Qwen2.5-Instruct; the protocol tags ``<think>``, ``</think>``, ``<action>``, ``</action>``
are added (non-special) tokens, so each is one id and survives ``skip_special_tokens`` decoding.

Limits to know: ``hidden_states`` has ``layers + 1`` entries, so BiPACE's default hidden-state layer
``-8`` needs ``layers >= 7`` (``-8`` is then the embedding output; ``>= 8`` for a transformer layer);
vLLM's CPU attention needs ``hidden / heads >= 32``.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from common.fsio import atomic_folder

__all__ = [
    "QWEN2_SPLIT_REGEX",
    "SPECIAL_TOKENS",
    "PROTOCOL_TAGS",
    "CHAT_TEMPLATE",
    "TinyModelConfig",
    "train_tokenizer",
    "wrap_tokenizer",
    "build_tiny_model",
]

# Qwen2's pre-tokenisation regex (the one transformers' Qwen2Tokenizer uses); a public constant of
# the Qwen2 tokenizer format, not code.
QWEN2_SPLIT_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
PROTOCOL_TAGS = ("<think>", "</think>", "<action>", "</action>")

# Qwen-style roles, no default system prompt (docs/protocol.md: one user message per step, no system prompt).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


@dataclass
class TinyModelConfig:
    """Shape of a tiny Qwen2 model. Defaults: the 3.4M-parameter model of docs/cpu.md's SFT check."""

    layers: int = 4
    """transformer layers (``hidden_states`` has layers + 1 entries; BiPACE's layer -8 needs >= 8)"""
    hidden: int = 256
    """hidden size D"""
    heads: int = 4
    """attention heads; head dim = hidden / heads must be >= 32 for vLLM's CPU build"""
    kv_heads: int | None = None
    """key/value heads (grouped-query attention); None = heads"""
    intermediate: int | None = None
    """MLP width; None = 4 * hidden"""
    vocab_size: int = 2048
    """BPE vocabulary upper bound incl. special and tag tokens (the TextCraft corpus saturates near 1.2k)"""
    max_positions: int = 4096
    """max_position_embeddings (prompt + response tokens)"""
    rope_theta: float = 10000.0
    """RoPE base frequency"""
    tie_embeddings: bool = True
    """share the input embedding and the LM head (as Qwen2.5-0.5B/1.5B do)"""
    dtype: str = "float32"
    """saved weight dtype: float32 (default, CPU training) or bfloat16"""
    seed: int = 0
    """seeds the random weights"""
    min_frequency: int = 2
    """BPE merges need a pair seen at least this often"""

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "vocab_size", "max_positions"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"TinyModelConfig.{name}={v!r} must be a positive integer")
        if self.hidden % self.heads:
            raise ValueError(f"TinyModelConfig: hidden={self.hidden} is not divisible by heads={self.heads}")
        if self.hidden // self.heads < 32:
            raise ValueError(f"TinyModelConfig: head dim hidden/heads = {self.hidden // self.heads} < 32, which "
                             "vLLM's CPU attention rejects; use fewer heads or a larger hidden size")
        kv = self.kv_heads if self.kv_heads is not None else self.heads
        if kv < 1 or self.heads % kv:
            raise ValueError(f"TinyModelConfig: heads={self.heads} must be a multiple of kv_heads={kv}")
        min_vocab = 256 + len(SPECIAL_TOKENS) + len(PROTOCOL_TAGS)
        if self.vocab_size < min_vocab:
            raise ValueError(f"TinyModelConfig.vocab_size={self.vocab_size} < {min_vocab} (256 byte tokens + "
                             "special and tag tokens)")
        if self.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"TinyModelConfig.dtype={self.dtype!r}: use 'float32' or 'bfloat16'")


def train_tokenizer(texts: Iterable[str], vocab_size: int = 2048, min_frequency: int = 2):
    """Train a byte-level BPE ``tokenizers.Tokenizer`` with Qwen2's pre-tokenizer on ``texts``.

    Special tokens get ids 0, 1, 2 (``SPECIAL_TOKENS`` order); the protocol tags are added tokens after
    the learned vocabulary. ``vocab_size`` bounds the learned vocabulary plus the special tokens.
    """
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(PROTOCOL_TAGS),
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    n = 0

    def counted():
        nonlocal n
        for t in texts:
            if not isinstance(t, str):
                raise TypeError(f"tokenizer corpus must yield str, got {type(t).__name__}: {t!r:.80}")
            n += 1
            yield t

    tok.train_from_iterator(counted(), trainer=trainer)
    if n == 0:
        raise ValueError("tokenizer corpus is empty; pass an iterable of strings (e.g. agents.models.corpus."
                         "default_corpus())")
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in PROTOCOL_TAGS])
    return tok


def wrap_tokenizer(tok):
    """A transformers ``PreTrainedTokenizerFast`` around a trained tokenizer, with roles and chat template."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        additional_special_tokens=["<|im_start|>"],
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model(out_dir: str | os.PathLike, cfg: TinyModelConfig | None = None,
                     corpus: Iterable[str] | None = None, force: bool = False) -> Path:
    """Build and save a tiny Qwen2 model folder at ``out_dir``; returns the path.

    ``corpus``: texts for the tokenizer (default ``agents.models.corpus.default_corpus()``). An existing
    folder is an error unless ``force`` (then it is replaced). Written to a temporary sibling and renamed.
    """
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    cfg = cfg or TinyModelConfig()
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()) and not force:
        raise FileExistsError(f"{out} exists and is not empty; pass force=True (--force) to replace it")
    if corpus is None:
        from .corpus import default_corpus

        corpus = default_corpus(cfg.seed)

    tok = train_tokenizer(corpus, vocab_size=cfg.vocab_size, min_frequency=cfg.min_frequency)
    fast = wrap_tokenizer(tok)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    ids = {t: tok.token_to_id(t) for t in (*SPECIAL_TOKENS, *PROTOCOL_TAGS)}

    # A fresh Qwen2Config (editing an existing config's dict trips the layer_types check; docs/cpu.md).
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=cfg.hidden,
        intermediate_size=cfg.intermediate or 4 * cfg.hidden,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.kv_heads or cfg.heads,
        max_position_embeddings=cfg.max_positions,
        rope_theta=cfg.rope_theta,
        tie_word_embeddings=cfg.tie_embeddings,
        bos_token_id=None,
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        use_sliding_window=False,
    )
    config.architectures = ["Qwen2ForCausalLM"]
    torch.manual_seed(cfg.seed)
    model = Qwen2ForCausalLM(config).to(getattr(torch, cfg.dtype)).eval()
    model.generation_config = GenerationConfig(
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        pad_token_id=ids["<|endoftext|>"],
        bos_token_id=None,
    )

    with atomic_folder(out) as tmp:
        model.save_pretrained(tmp)
        fast.save_pretrained(tmp)
        meta = {"builder": "agents.models.tiny", "config": asdict(cfg), "vocab_size": vocab,
                "parameters": sum(p.numel() for p in model.parameters()), "token_ids": ids}
        (tmp / "bipace_tiny.json").write_text(json.dumps(meta, indent=1) + "\n")
    return out
