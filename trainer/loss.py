"""PPO clipped surrogate with dual clip, KL loss to a frozen reference, entropy bonus, and loss aggregation.

Symbols: N step rows, T response tokens (padded). Every tensor argument is (N, T) unless said otherwise; ``mask``
is True on real response tokens. All losses are to be minimised.

Per token (row i, token t), with r = exp(logp - old_logp) and the row's advantage A_i broadcast over its tokens:

    L^clip   = max(-A r, -A clip(r, 1 - eps, 1 + eps))                         [PPO; GiGPO: eps = 0.2]
    L^pg     = min(L^clip, -A c)  if A < 0  else  L^clip                       [dual clip; GiGPO: c = 3]
    k3       = exp(ref - logp) - (ref - logp) - 1, clamped to [-10, 10]        [low_var_kl; GiGPO]
    L        = agg(L^pg) + beta * agg(k3) - h * agg(entropy)                    [GiGPO: beta = 0.01, h = 0.001]

``old_logp`` is the log-probability under the policy that sampled the batch: recomputed by the training actor
before the update by default [GiGPO], or taken from the rollout where it computes in the same dtype
(``trainer.old_logprobs``, whose docstring says when that is exact). Either way the first mini-batch of an iteration
has r = 1 up to floating-point noise.

Aggregation ``agg`` [GiGPO; verl's names]:

    token-mean           sum_{i,t} m_it x_it / sum_{i,t} m_it                   (default)
    seq-mean-token-mean  (1 / N') sum_i [ sum_t m_it x_it / sum_t m_it ]
    seq-mean-token-sum   (1 / N') sum_i sum_t m_it x_it

where N' counts rows with at least one token. With gradient accumulation the denominators must be those of the
whole mini-batch (over all micro-batches and ranks), not of each micro-batch, or the accumulated gradient is not
the mini-batch gradient [choice: we pass global denominators; verl's older per-micro-batch mean is biased when
micro-batches hold different token counts]. ``agg_loss`` takes them as ``total_tokens`` / ``total_rows``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .config import KL_TYPES, LOSS_AGG_MODES

__all__ = ["agg_loss", "policy_loss", "kl_penalty", "ppo_loss", "PPOLossSettings", "PPOLossOutput", "LOSS_AGG_MODES",
           "KL_TYPES"]

_LOG_RATIO_CLAMP = 20.0  # exp(20) ~ 5e8: a bound against overflow only (a clipped ratio never gets near it)


def _masked(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """x with padding set to exactly 0 (``where`` rather than ``*`` so NaN on padding cannot leak)."""
    return torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))


def agg_loss(values: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean",
             total_tokens: float | torch.Tensor | None = None,
             total_rows: float | torch.Tensor | None = None) -> torch.Tensor:
    """Aggregate token values (N, T) into a scalar (see module docstring).

    total_tokens / total_rows: denominators of the whole mini-batch (default: this batch's own counts).
    An empty batch (no tokens) gives 0.
    """
    mask = mask.bool()
    v = _masked(values, mask)
    if mode == "token-mean":
        denom = mask.sum() if total_tokens is None else total_tokens
        return v.sum() / torch.clamp(torch.as_tensor(denom, dtype=v.dtype, device=v.device), min=1.0)
    n_tok = mask.sum(dim=1)  # (N,)
    has = n_tok > 0
    if mode == "seq-mean-token-mean":
        per_row = v.sum(dim=1) / torch.clamp(n_tok, min=1).to(v.dtype)  # (N,)
    elif mode == "seq-mean-token-sum":
        per_row = v.sum(dim=1)
    else:
        raise ValueError(f"loss_agg_mode={mode!r} must be one of {list(LOSS_AGG_MODES)}")
    denom = has.sum() if total_rows is None else total_rows
    return _masked(per_row, has).sum() / torch.clamp(torch.as_tensor(denom, dtype=v.dtype, device=v.device), min=1.0)


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                clip_ratio: float = 0.2, dual_clip: float | None = 3.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Token-level PPO loss (N, T) with dual clip, and token indicators for the metrics.

    advantages: (N,) one per row (broadcast over its tokens) or (N, T).
    Returns (loss_tok, {"clipped": bool (N, T), "dual_clipped": bool (N, T), "ratio": (N, T), "log_ratio": (N, T)}).
    """
    if advantages.ndim == 1:
        advantages = advantages.unsqueeze(1)  # (N, 1) -> broadcast over tokens
    adv = advantages.to(logp.dtype)
    log_ratio = torch.clamp(logp - old_logp, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    loss_unclipped = -adv * ratio
    loss_clipped = -adv * torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio)
    loss_clip = torch.maximum(loss_unclipped, loss_clipped)  # pessimistic bound
    clipped = loss_clipped > loss_unclipped
    if dual_clip is not None:
        loss_dual = -adv * dual_clip  # the loss of a negative-advantage token never exceeds -A c
        neg = (adv < 0).expand_as(loss_clip)
        dual_clipped = neg & (loss_clip > loss_dual)
        loss_tok = torch.where(neg, torch.minimum(loss_clip, loss_dual), loss_clip)
    else:
        dual_clipped = torch.zeros_like(clipped)
        loss_tok = loss_clip
    return loss_tok, {"clipped": clipped, "dual_clipped": dual_clipped, "ratio": ratio, "log_ratio": log_ratio}


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "low_var_kl") -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi (N, T).

    low_var_kl: k3 = exp(ref - logp) - (ref - logp) - 1 clamped to [-10, 10] [GiGPO; Schulman's k3]
    kl:         k1 = logp - ref
    mse:        k2 = (logp - ref)^2 / 2
    """
    if kind == "low_var_kl":
        d = torch.clamp(ref_logp - logp, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)  # cannot change the clamped result
        return torch.clamp(torch.exp(d) - d - 1.0, -10.0, 10.0)
    if kind == "kl":
        return logp - ref_logp
    if kind == "mse":
        return 0.5 * (logp - ref_logp) ** 2
    raise ValueError(f"kl_type={kind!r} must be one of {list(KL_TYPES)}")


@dataclass
class PPOLossOutput:
    """loss: scalar to backpropagate; metrics: scalars (detached), named in the ``loss/`` namespace."""

    loss: torch.Tensor
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class PPOLossSettings:
    """The coefficients and modes of ``ppo_loss`` (defaults: GiGPO's; the run config's ``trainer`` section has the
    same names).

    clip_ratio    : eps of the clipped ratio 1 +- eps
    dual_clip     : c of the dual clip (None: none)
    loss_agg_mode : token-mean | seq-mean-token-mean | seq-mean-token-sum (``agg_loss``)
    entropy_coef  : h, the entropy bonus's weight (0: no entropy term)
    kl_coef       : beta, the KL loss's weight (0: no KL term)
    kl_type       : low_var_kl | kl | mse (``kl_penalty``)
    """

    clip_ratio: float = 0.2
    dual_clip: float | None = 3.0
    loss_agg_mode: str = "token-mean"
    entropy_coef: float = 0.001
    kl_coef: float = 0.01
    kl_type: str = "low_var_kl"


def ppo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    entropy: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    settings: PPOLossSettings = PPOLossSettings(),
    total_tokens: float | torch.Tensor | None = None,
    total_rows: float | torch.Tensor | None = None,
) -> PPOLossOutput:
    """The full actor loss of one (micro-)batch. ``ref_logp=None`` or ``settings.kl_coef=0`` leaves the KL term
    out; ``entropy=None`` or ``settings.entropy_coef=0`` the entropy term. ``total_tokens`` / ``total_rows``: the
    mini-batch's denominators (``agg_loss``).

    Metrics (each aggregated with the same mode and denominators, so that summing over micro-batches gives the
    mini-batch value): loss/policy, loss/kl, loss/entropy, loss/total, loss/clipfrac, loss/clipfrac_dual,
    loss/approx_kl (mean of -log r, old vs new), loss/ratio_mean.
    """
    clip_ratio, dual_clip, loss_agg_mode = settings.clip_ratio, settings.dual_clip, settings.loss_agg_mode
    entropy_coef, kl_coef, kl_type = settings.entropy_coef, settings.kl_coef, settings.kl_type
    mask = mask.bool()
    agg = lambda x: agg_loss(x, mask, loss_agg_mode, total_tokens, total_rows)  # noqa: E731
    pg_tok, ind = policy_loss(logp, old_logp, advantages, mask, clip_ratio, dual_clip)
    pg = agg(pg_tok)
    total = pg
    metrics: dict[str, torch.Tensor] = {"loss/policy": pg.detach()}
    if entropy is not None:
        ent = agg(entropy)
        metrics["loss/entropy"] = ent.detach()
        if entropy_coef:
            total = total - entropy_coef * ent
    if ref_logp is not None and kl_coef:
        kl = agg(kl_penalty(logp, ref_logp, kl_type))
        metrics["loss/kl"] = kl.detach()
        total = total + kl_coef * kl
    with torch.no_grad():
        metrics["loss/clipfrac"] = agg(ind["clipped"].float())
        metrics["loss/clipfrac_dual"] = agg(ind["dual_clipped"].float())
        metrics["loss/approx_kl"] = agg(-ind["log_ratio"])
        metrics["loss/ratio_mean"] = agg(ind["ratio"])
        metrics["loss/total"] = total.detach()
    return PPOLossOutput(loss=total, metrics=metrics)
