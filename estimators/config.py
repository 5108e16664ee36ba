"""EstimatorConfig: every switch of every estimator, with its unit, default and source.

Tags: [paper] BiPACE (arXiv 2606.25556); [GiGPO] the official GiGPO code (arXiv 2505.10978);
[HGPO] arXiv 2602.22817; [choice] this repo's resolution where the paper is silent
(docs/method.md, "Choices where the sources are silent").
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal, get_args

from .config_checks import check_choices, check_number, fail
from .registry import ESTIMATORS

__all__ = ["EstimatorConfig", "NORM_MODES", "CENTROIDS", "CLUSTER_BACKENDS", "PACE_KEYS", "PACE_FALLBACKS",
           "PACE_NORMS", "EPSILON_CRITERIA", "HGPO_RULES"]

NormMode = Literal["mean_std_norm", "mean_norm"]
Centroid = Literal["mean", "seed"]
ClusterBackend = Literal["torch", "faiss"]
PaceKey = Literal["action_tag", "first_tokens"]
PaceFallback = Literal["either", "unique_key", "single_key", "none"]
PaceNorm = Literal["none", "cluster_std"]
EpsilonCriterion = Literal["anchor_recall", "anchor_f1", "singleton_match", "return_loo", "state_f1"]
HgpoRule = Literal["verl_agent", "start_marker"]
NORM_MODES = get_args(NormMode)
CENTROIDS = get_args(Centroid)
CLUSTER_BACKENDS = get_args(ClusterBackend)
PACE_KEYS = get_args(PaceKey)
PACE_FALLBACKS = get_args(PaceFallback)
PACE_NORMS = get_args(PaceNorm)
EPSILON_CRITERIA = get_args(EpsilonCriterion)
HGPO_RULES = get_args(HgpoRule)


@dataclass(frozen=True)
class EstimatorConfig:
    """Configuration of ``compute_advantages``. Unknown names and bad values raise ``ConfigError`` (a
    ``ValueError``; ``estimators.config_checks``) when it is built; it is frozen, so a built one stays valid and is
    never checked again (``dataclasses.replace`` builds, and checks, a changed copy)."""

    name: str = "grpo"
    """Registry key of ``estimators.ESTIMATORS``: grpo | gigpo | bigpo | bipace_v | bipace_q | pace_anchor | hgpo |
    rloo, or one added with ``@register_estimator`` (``estimators/README.md``, "Adding an estimator")."""
    gamma: float = 0.95
    """Discount of the step return R_t = r_t + gamma R_{t+1} [GiGPO]."""
    invalid_penalty: float = 0.1
    """lambda: subtracted once from the episode score and the step return of an invalid row [GiGPO]."""
    norm_mode: NormMode = "mean_std_norm"
    """Group normalisation: mean_std_norm = (x - mean)/(std + 1e-6), unbiased std; mean_norm = x - mean [GiGPO].
    GiGPO scripts: mean_std_norm for ALFWorld/TextCraft, mean_norm for WebShop."""
    step_weight: float = 1.0
    """w (GiGPO's omega): A = A^ep + w A^S [GiGPO; choice w = 1 for PACE]."""
    epsilon: float | str = 0.05
    """Cosine-distance threshold of the greedy clustering: 0.05 for Qwen2.5-1.5B, 0.10 for 7B [paper].
    epsilon = 0 groups only (numerically) equal vectors (1e-6 tolerance). ``auto``: the trainer scans the first
    training batch, picks epsilon by ``epsilon_criterion`` and freezes it for the run (``estimators.calibrate``,
    saved as ``epsilon.json`` in the run folder) [paper: a scan on the first step; its criterion is unpublished]."""
    epsilon_criterion: EpsilonCriterion = "anchor_f1"
    """Rule of ``epsilon: auto`` (``estimators.calibrate.choose_epsilon``): anchor_f1 = the smallest epsilon whose
    clusters agree best (pair F1) with the exact observations (GiGPO's anchors); anchor_recall = the smallest epsilon
    whose clusters keep ``epsilon_target`` of the same-observation pairs together; singleton_match = the smallest
    epsilon whose cluster singleton rate is at most the anchors'; return_loo = the epsilon whose clusters best
    predict the step returns of other trajectories (leave-one-trajectory-out; reads neither anchors nor states);
    state_f1 = the smallest epsilon whose clusters agree best with the true state (an oracle for ablations: it reads
    ``info["state_key"]``, which the agent never sees; best defined on the finite worlds, whose state_key is the MDP
    state) [choice: the rules compared against the true state in results/epsilon/README.md]."""
    epsilon_target: float = 0.9
    """anchor_recall's target share of same-anchor pairs [choice]."""
    center_states: bool = False
    """Subtract each prompt group's mean hidden state before the cosine (spreads the distances of anisotropic
    states, whose rows all lie within ~0.01-0.03 of each other in small models) [choice; off = the paper]."""
    centroid: Centroid = "mean"
    """Cluster centroid: normalised mean of members, updated at each join (mean) or the seed row (seed) [choice]."""
    cluster_backend: ClusterBackend = "torch"
    """Similarity backend of the clustering: torch (Gram matrix) or faiss (IndexFlatIP); same clusters [choice]."""
    pace_key: PaceKey = "action_tag"
    """Action key k_i of PACE: action_tag = normalised body of the first <action> tag; first_tokens = the first
    ``pace_key_tokens`` response token ids [paper]."""
    pace_key_tokens: int = 8
    """Number of response tokens in the first_tokens key [paper]."""
    pace_fallback: PaceFallback = "either"
    """When PACE falls back to leave-one-out: either = no same-key peer OR one key in the cluster;
    unique_key = no same-key peer only; single_key = one key in the cluster only; none = never [choice]."""
    pace_norm: PaceNorm = "none"
    """Divide the PACE step term by the cluster's return std (cluster_std) or not (none) [choice]."""
    hgpo_levels: int = 2
    """K: HGPO uses history levels k = 0..K (K = the prompt's history length) [HGPO]."""
    hgpo_alpha: float = 1.0
    """alpha: level weights (k+2)^alpha / sum_l (l+2)^alpha (``hgpo_rule: verl_agent``; (k+1)^alpha under
    ``start_marker``); 0 = a plain average [HGPO]."""
    hgpo_rule: HgpoRule = "verl_agent"
    """Which HGPO: verl_agent = HGPO's published code (verl-agent ``recipe/hgpo/core_hgpo.py``): level k is formed
    only for rows at step t >= k, weights (k+2)^alpha (its history length counts observations) [HGPO's code];
    start_marker = this repo's earlier rule: positions before step 0 hold a start marker, so every row has all
    K + 1 levels, weights (k+1)^alpha [choice]. Every HGPO figure committed before 2026-12-06 used start_marker
    (docs/method.md, "HGPO")."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        s = "EstimatorConfig"
        if self.name not in ESTIMATORS:
            fail(f"EstimatorConfig.name={self.name!r} is not a registered estimator; choose one of "
                 f"{sorted(ESTIMATORS)} or register a new one with @register_estimator")
        check_choices(self, s)
        if isinstance(self.epsilon, str) and self.epsilon != "auto":
            fail(f"EstimatorConfig.epsilon={self.epsilon!r} must be a number in [0, 2] or 'auto'")
        if self.epsilon != "auto":
            check_number(s, "epsilon", self.epsilon, lo=0, hi=2,
                         fix="a cosine distance, or 'auto'; the paper uses 0.05 (1.5B) and 0.10 (7B)")
        check_number(s, "epsilon_target", self.epsilon_target, lo=0, lo_open=True, hi=1, fix="a share of pairs")
        if not isinstance(self.center_states, bool):
            fail(f"EstimatorConfig.center_states={self.center_states!r} must be true or false")
        check_number(s, "gamma", self.gamma, lo=0, hi=1)
        check_number(s, "invalid_penalty", self.invalid_penalty, lo=0)
        check_number(s, "step_weight", self.step_weight)
        check_number(s, "hgpo_alpha", self.hgpo_alpha)
        check_number(s, "pace_key_tokens", self.pace_key_tokens, lo=1, integer=True)
        check_number(s, "hgpo_levels", self.hgpo_levels, lo=0, integer=True)

    @property
    def epsilon_is_auto(self) -> bool:
        return self.epsilon == "auto"

    def to_dict(self) -> dict:
        return asdict(self)
