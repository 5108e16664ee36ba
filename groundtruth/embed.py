"""Hidden states for the clustering estimators: a controlled proxy, and a real language model's states.

``ProxyEmbedder`` (quality set by two numbers)::

    z(s)  = [1, f(s)] U                      f(s): true-state features (F,), U: (F+1, D) random, rows ~ N(0, I/D)
    e(s)  = normalise( sqrt(1 − κ) b + sqrt(κ) normalise(z(s)) )       b: a shared random unit vector
    h_i   = e(s_i) + σ_obs ξ(o_i) + σ_row ζ_i                         ξ(o): a random vector fixed by the string o,
                                                                          ζ_i ~ N(0, I/D) fresh per row

ξ(o) = Σ_{j<8} T[h_j(o)] / sqrt(8), with T a (2^14, D) table of N(0, I/D) rows and h_j(o) eight 14-bit pieces of
a keyed BLAKE2 hash of o: approximately N(0, I/D), equal for equal strings, and two different strings share
all eight rows with probability 2^-112 (one hash and a gather per string instead of seeding a generator).

``κ`` (``spread``) sets how far apart distinct states lie (cosine distance κ(1 − cos(z, z'))): the shared
direction b mimics the anisotropy of LM hidden states, whose cosine distances are small. ``σ_obs``
(``obs_noise``) is the proxy's quality: two wordings of one state lie at cosine distance about
σ²/(1 + σ²); the same string always gets the same vector, as a deterministic forward pass would.

``LMEmbedder``: the hidden state of SmolLM2-135M-Instruct at a late layer (default −8) at the last token of
the chat-formatted observation (the token after which generation would start), as BiGPO's ``h_i``
(docs/method.md, "Hidden state"). Strings repeat, so vectors are cached in memory and on disk
(``cache_dir("groundtruth", "lm_hidden")``).
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["ProxyConfig", "ProxyEmbedder", "LMEmbedder", "string_seed"]

_TABLE_ROWS = 2**14
_PICKS = 8


def string_seed(text: str, salt: int = 0) -> int:
    """A stable 64-bit seed from a string (independent of PYTHONHASHSEED)."""
    h = hashlib.blake2b(text.encode("utf-8"), digest_size=8, key=str(salt).encode())
    return int.from_bytes(h.digest(), "little")


@dataclass(frozen=True)
class ProxyConfig:
    """A hidden-state proxy of controlled quality (module docstring)."""

    dim: int = 128
    """D, the proxy's hidden size."""
    spread: float = 0.3
    """κ in (0, 1]: weight of the state-specific direction; distinct states lie κ(1 − cos z) apart."""
    obs_noise: float = 0.2
    """σ_obs: perturbation fixed per observation string (0 = a perfect state embedding)."""
    row_noise: float = 0.0
    """σ_row: fresh perturbation per row (e.g. history in the prompt); 0 by default."""
    seed: int = 0
    """Seed of U, b and the string perturbations."""

    def __post_init__(self) -> None:
        if self.dim < 2:
            raise ValueError(f"ProxyConfig.dim={self.dim} must be >= 2")
        if not 0.0 < self.spread <= 1.0:
            raise ValueError(f"ProxyConfig.spread={self.spread} must lie in (0, 1]")
        if self.obs_noise < 0 or self.row_noise < 0:
            raise ValueError(f"ProxyConfig noise scales must be >= 0, got obs_noise={self.obs_noise}, "
                             f"row_noise={self.row_noise}")


class ProxyEmbedder:
    """``embed(states, observations, rng) -> (N, D)`` float32 proxy hidden states."""

    def __init__(self, features: np.ndarray, cfg: ProxyConfig):
        self.cfg = cfg
        rng = np.random.default_rng(cfg.seed)
        S, F = features.shape
        D = cfg.dim
        U = rng.standard_normal((F + 1, D)) / np.sqrt(D)  # (F+1, D)
        b = rng.standard_normal(D)
        b /= np.linalg.norm(b)
        z = np.concatenate([np.ones((S, 1)), features], axis=1) @ U  # (S, D)
        z /= np.linalg.norm(z, axis=1, keepdims=True)
        e = np.sqrt(1.0 - cfg.spread) * b[None, :] + np.sqrt(cfg.spread) * z
        self.state_vectors = e / np.linalg.norm(e, axis=1, keepdims=True)  # (S, D)
        self._table = rng.standard_normal((_TABLE_ROWS, D)) / np.sqrt(D)  # (2^14, D)
        self._key = str(cfg.seed).encode()

    def observation_noise(self, observations: list[str]) -> np.ndarray:
        """(N, D) ξ(o_i) of the module docstring."""
        key = self._key
        digests = b"".join(hashlib.blake2b(o.encode("utf-8"), digest_size=2 * _PICKS, key=key).digest()
                           for o in observations)
        idx = np.frombuffer(digests, dtype="<u2").reshape(len(observations), _PICKS) & (_TABLE_ROWS - 1)  # (N, 8)
        return self._table[idx.astype(np.int64)].sum(axis=1) / np.sqrt(_PICKS)

    def embed(self, states: np.ndarray, observations: list[str], rng: np.random.Generator | None = None) -> np.ndarray:
        h = self.state_vectors[np.asarray(states)].copy()  # (N, D)
        if self.cfg.obs_noise > 0:
            h += self.cfg.obs_noise * self.observation_noise(observations)
        if self.cfg.row_noise > 0:
            if rng is None:
                raise ValueError("ProxyEmbedder.embed needs an rng when row_noise > 0")
            h += self.cfg.row_noise * rng.standard_normal(h.shape) / np.sqrt(self.cfg.dim)
        return h.astype(np.float32)


class LMEmbedder:
    """Last-prompt-token hidden states of a causal LM at ``layer`` (Hugging Face ``hidden_states`` index).

    ``model`` and ``tokenizer`` come from ``groundtruth.lm.load_smollm2`` (or any causal LM). The layers
    after ``layer`` are never run: the model keeps only the decoder layers it needs (checked against the
    full forward in the tests). Texts are right-padded and the state is gathered at each text's own last
    token, so padding never changes a vector.
    """

    def __init__(self, model, tokenizer, layer: int = -8, model_tag: str = "smollm2-135m-instruct-fp32",
                 cache_path: Path | None = None, batch_size: int = 16, chat_template: bool = True):
        import torch

        self.torch = torch
        n_layers = int(model.config.num_hidden_layers)  # the config keeps the full count after truncation
        index = layer if layer >= 0 else n_layers + 1 + layer  # entry of hidden_states (0 = embeddings)
        if not 1 <= index <= n_layers:
            raise ValueError(f"layer={layer} is outside the model's hidden states (1..{n_layers} or -{n_layers}..-1)")
        self.index = index
        self.layer = layer
        # keep layers 0..index: hidden_states[index] (the input of layer `index`) is then an intermediate,
        # un-normalised entry exactly as in the full model; the final norm only touches the last entry
        if index + 1 < n_layers:
            model.model.layers = model.model.layers[: index + 1]
        model.eval()
        self.model, self.tok = model, tokenizer
        self.batch_size = batch_size
        self.chat_template = chat_template
        self.cache_path = cache_path
        self._cache: dict[str, np.ndarray] = {}
        self._dirty = False
        if cache_path is not None and Path(cache_path).exists():
            with np.load(cache_path, allow_pickle=False) as z:
                for k, v in zip(z["keys"].tolist(), z["vectors"]):
                    self._cache[k] = v.astype(np.float32)

    def format(self, text: str) -> str:
        if not self.chat_template:
            return text
        return self.tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                            add_generation_prompt=True)

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(text.encode("utf-8")).hexdigest()

    def _forward(self, texts: list[str]) -> np.ndarray:
        torch = self.torch
        enc = self.tok([self.format(t) for t in texts], return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = self.model.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                                   output_hidden_states=True)
        hs = out.hidden_states[self.index]  # (B, T, D)
        last = enc["attention_mask"].sum(dim=1) - 1  # right padding: last real token
        return hs[torch.arange(hs.shape[0]), last].float().numpy()

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        """(N, D) float32, one row per text (cached by content)."""
        keys = [self.key(t) for t in texts]
        todo = sorted({k: t for k, t in zip(keys, texts) if k not in self._cache}.items(), key=lambda kv: len(kv[1]))
        if self.tok.pad_token is None:
            self.tok.pad_token = self.tok.eos_token
        self.tok.padding_side = "right"
        for i in range(0, len(todo), self.batch_size):
            chunk = todo[i: i + self.batch_size]
            vecs = self._forward([t for _, t in chunk])
            for (k, _), v in zip(chunk, vecs):
                self._cache[k] = v.astype(np.float32)
            self._dirty = True
        return np.stack([self._cache[k] for k in keys])

    def save(self) -> None:
        """Write the cache to ``cache_path`` (atomically) when it grew."""
        if self.cache_path is None or not self._dirty:
            return
        path = Path(self.cache_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        keys = np.array(list(self._cache.keys()))
        vecs = np.stack(list(self._cache.values())).astype(np.float32)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}.npz")
        np.savez(tmp, keys=keys, vectors=vecs)
        os.replace(tmp, path)
        self._dirty = False

    def __len__(self) -> int:
        return len(self._cache)
