"""Plain-loop reference implementations of every estimator, written straight from docs/method.md.

They loop over rows with Python floats and dicts, share no code with the vectorised estimators
(except the action-tag parser, whose behaviour is tested on its own), and exist for two reasons:
the tests check that the vectorised estimators equal them on random batches, and the benchmark
(``benchmarks.estimator_speed``) reports the speed-up over them.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict

import torch

from .batch import StepBatch
from .config import EstimatorConfig

__all__ = ["reference_advantages", "reference_clusters"]

_TAG = re.compile(r"<action>(.*?)</action>", re.DOTALL)


def _tag(text: str) -> str:
    m = _TAG.search(text.lower())
    return "<invalid>" if m is None else " ".join(m.group(1).split())


def _norm(values: list[float], mode: str, unbiased: bool = True) -> list[float]:
    n = len(values)
    if len(set(values)) == 1:  # equal values carry no signal: exactly 0, not an ulp of the mean over std + 1e-6
        return [0.0] * n
    mean = sum(values) / n
    if mode == "mean_norm":
        return [v - mean for v in values]
    var = sum((v - mean) ** 2 for v in values) / ((n - 1) if unbiased else n)
    std = math.sqrt(var)
    return [(v - mean) / (std + 1e-6) for v in values]


def _rows(batch: StepBatch):
    g = batch.group_id.tolist()
    t = batch.traj_id.tolist()
    s = batch.step.tolist()
    r = batch.reward.double().tolist()
    v = batch.valid.tolist()
    return g, t, s, r, v


def _scores_and_returns(batch: StepBatch, cfg: EstimatorConfig):
    g, t, s, r, v = _rows(batch)
    n = len(g)
    traj_rows = defaultdict(list)
    for i in range(n):
        traj_rows[(g[i], t[i])].append(i)
    score = [0.0] * n
    ret = [0.0] * n
    for rows in traj_rows.values():
        total = sum(r[i] for i in rows)
        rows = sorted(rows, key=lambda i: s[i])
        acc = 0.0
        nxt = None
        for i in reversed(rows):
            # gaps in step indices count as zero-reward steps
            if nxt is not None:
                acc *= cfg.gamma ** (s[nxt] - s[i])
            acc = r[i] + acc
            ret[i] = acc
            nxt = i
        for i in rows:
            score[i] = total
    pen = [cfg.invalid_penalty * (0.0 if v[i] else 1.0) for i in range(n)]
    return [score[i] - pen[i] for i in range(n)], [ret[i] - pen[i] for i in range(n)]


def _normalise_groups(values, keys, mode, singleton_identity, unbiased=True):
    members = defaultdict(list)
    for i, k in enumerate(keys):
        members[k].append(i)
    out = [0.0] * len(values)
    for rows in members.values():
        if len(rows) == 1:
            out[rows[0]] = values[rows[0]] if singleton_identity else 0.0
            continue
        normed = _norm([values[i] for i in rows], mode, unbiased)
        for i, a in zip(rows, normed):
            out[i] = a
    return out


def reference_clusters(batch: StepBatch, cfg: EstimatorConfig, margins: list[float] | None = None) -> list[int]:
    """Greedy single pass per prompt group in (trajectory, step) order, one row at a time.

    margins: if a list is given, each join-or-open decision appends |d - (epsilon + 1e-6)|, the distance of
    its cosine distance d from the threshold. The vectorised clustering computes the similarities in float32
    (about 1e-7 relative error), so a decision closer than ~1e-5 to the threshold may legitimately go either
    way; tests use the margins to skip such knife-edge examples.
    """
    g, t, s, _, _ = _rows(batch)
    h = batch.hidden.double()
    if cfg.center_states:  # minus the mean state of the row's prompt group, one group at a time
        h = h.clone()
        for grp in set(g):
            idx = [i for i in range(len(g)) if g[i] == grp]
            m = h[idx].mean(dim=0)
            for i in idx:
                c = h[i] - m
                h[i] = c if float(c.norm()) > 1e-6 * float(h[i].norm()) else m  # a row at the mean keeps the mean
    norms = h.norm(dim=1)
    phi = [(h[i] / norms[i]) if norms[i] > 0 else torch.zeros_like(h[i]) for i in range(len(g))]
    label = [-1] * len(g)
    next_id = 0
    for grp in sorted(set(g)):
        rows = sorted((i for i in range(len(g)) if g[i] == grp), key=lambda i: (t[i], s[i]))
        sums, seeds, ids = [], [], []
        for i in rows:
            best, best_k = -math.inf, -1
            for k in range(len(ids)):
                c = seeds[k] if cfg.centroid == "seed" else sums[k]
                cn = float(c.norm())
                cos = float(phi[i] @ c) / cn if cn > 0 else 0.0
                if cos > best:
                    best, best_k = cos, k
            if margins is not None and best_k >= 0:
                margins.append(abs(1.0 - best - (cfg.epsilon + 1e-6)))
            if best_k >= 0 and 1.0 - best <= cfg.epsilon + 1e-6:
                label[i] = ids[best_k]
                sums[best_k] = sums[best_k] + phi[i]
            else:
                ids.append(next_id)
                sums.append(phi[i].clone())
                seeds.append(phi[i].clone())
                label[i] = next_id
                next_id += 1
    return label


def _pace(ret, cluster, key, variant, fallback, norm):
    members = defaultdict(list)
    for i, c in enumerate(cluster):
        members[c].append(i)
    out = [0.0] * len(ret)
    for rows in members.values():
        if len(rows) == 1:
            continue
        keys = {key[i] for i in rows}
        mean_c = sum(ret[i] for i in rows) / len(rows)
        std_c = math.sqrt(sum((ret[i] - mean_c) ** 2 for i in rows) / (len(rows) - 1))
        for i in rows:
            same = [j for j in rows if key[j] == key[i]]
            other = [j for j in rows if key[j] != key[i]]
            no_peer, single = len(same) == 1, len(keys) == 1
            fb = {"either": no_peer or single, "unique_key": no_peer, "single_key": single, "none": False}[fallback]
            if fb:
                a = ret[i] - sum(ret[j] for j in rows if j != i) / (len(rows) - 1)
            elif variant == "q":
                a = sum(ret[j] for j in same) / len(same) - mean_c
            else:
                a = ret[i] - sum(ret[j] for j in other) / len(other) if other else 0.0
            out[i] = a / (std_c + 1e-6) if norm == "cluster_std" else a
    return out


def reference_advantages(batch: StepBatch, cfg: EstimatorConfig) -> tuple[list[float], list[float], list[float]]:
    """(advantages, episode, step) as Python lists, one entry per row, for ``cfg.name``."""
    g, t, s, r, v = _rows(batch)
    n = len(g)
    score, ret = _scores_and_returns(batch, cfg)
    zeros = [0.0] * n
    episode = _normalise_groups(score, g, cfg.norm_mode, singleton_identity=True)
    name = cfg.name
    if name == "grpo":
        step = zeros
    elif name == "gigpo":
        step = _normalise_groups(ret, [(g[i], batch.anchor_obs[i]) for i in range(n)], cfg.norm_mode, False)
    elif name in ("bigpo", "bipace_q", "bipace_v", "pace_anchor"):
        if name == "pace_anchor":  # the exact anchors as the clusters
            cl = [(g[i], batch.anchor_obs[i]) for i in range(n)]
        else:
            cl = reference_clusters(batch, cfg)
        if name == "bigpo":
            step = _normalise_groups(ret, cl, cfg.norm_mode, False)
        else:
            if cfg.pace_key == "action_tag":
                key = [_tag(x) for x in batch.response_text]
            else:
                ids, mask = batch.response_ids.tolist(), batch.response_mask.tolist()
                key = [
                    tuple(ids[i][j] if j < len(ids[i]) and mask[i][j] else -1 for j in range(cfg.pace_key_tokens))
                    for i in range(n)
                ]
            variant = "diff_peer" if name == "bipace_v" else "q"
            step = _pace(ret, cl, key, variant, cfg.pace_fallback, cfg.pace_norm)
    elif name == "hgpo":
        episode = zeros
        obs_at = {(g[i], t[i], s[i]): batch.anchor_obs[i] for i in range(n)}
        num, den = [0.0] * n, [0.0] * n
        verl_agent = cfg.hgpo_rule == "verl_agent"
        for k in range(cfg.hgpo_levels + 1):
            keys = [
                (g[i],)
                + tuple(obs_at.get((g[i], t[i], s[i] - j), None) if s[i] - j >= 0 else None for j in range(k + 1))
                for i in range(n)
            ]
            counts = defaultdict(int)
            for kk in keys:
                counts[kk] += 1
            a_k = _normalise_groups(ret, keys, cfg.norm_mode, False, unbiased=False)
            w = (k + 2 if verl_agent else k + 1) ** cfg.hgpo_alpha
            for i in range(n):
                if verl_agent and s[i] < k:  # verl-agent forms no level reaching before step 0
                    continue
                if counts[keys[i]] > 1 and a_k[i] != 0:
                    num[i] += w * a_k[i]
                    den[i] += w
        step = [num[i] / den[i] if den[i] > 0 else 0.0 for i in range(n)]
    elif name == "rloo":
        traj_ret = defaultdict(float)
        for i in range(n):
            traj_ret[(g[i], t[i])] += r[i]
        by_group = defaultdict(list)
        for (grp, tr), val in traj_ret.items():
            by_group[grp].append((tr, val))
        episode = []
        for i in range(n):
            others = [val for tr, val in by_group[g[i]] if tr != t[i]]
            base = sum(others) / len(others) if others else 0.0
            episode.append(traj_ret[(g[i], t[i])] - base - cfg.invalid_penalty * (0.0 if v[i] else 1.0))
        step = zeros
    else:
        raise ValueError(f"no reference implementation for {name!r}")
    adv = [episode[i] + cfg.step_weight * step[i] for i in range(n)]
    return adv, episode, step
