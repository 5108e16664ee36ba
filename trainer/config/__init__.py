"""The one typed configuration of a run: environment, model, rollout, estimator, trainer, logging, evaluation, SFT.

Every field carries one docstring with its unit, default and source tag:
[GiGPO] the reference training stack (verl-agent scripts, ``docs/protocol.md``); [paper] BiPACE
(arXiv 2606.25556); [platform] measured on a CPU machine (``docs/cpu.md``);
[choice] this repo's resolution where the sources are silent.

Loading::

    cfg = load_config("configs/x.yaml", ["trainer.lr=1e-5", "env.group_size=4"])
    save_config(cfg, run_dir / "config.yaml")        # the resolved config, next to the results

YAML files mirror the nesting (``trainer: {lr: 1e-6}``). Overrides are dotted ``key=value`` strings; values
are parsed against the field's type (``1e-6`` is a float even where YAML 1.1 would read a string). Unknown keys
are errors naming the closest valid key; bad values are errors naming the field, the value and the fix; all
before any compute. Paths to model folders are checked separately by ``RunConfig.check_paths()`` so that a
preset can be loaded (and tested) on a machine that does not hold the model.

The package: ``sections`` (the dataclasses), ``io`` (YAML, overrides, typing of values), ``reference`` (the
generated tables); everything is importable from ``trainer.config``.
"""
from __future__ import annotations

from common.dataclass_docs import field_docs
from estimators import EstimatorConfig

from .io import (
    REMOVED_KEYS,
    apply_overrides,
    config_from_dict,
    load_config,
    save_config,
)
from .reference import (
    README_END,
    README_START,
    config_from_argv,
    config_reference_markdown,
    write_reference_into,
)
from .sections import (
    _SECTIONS,  # noqa: F401  (the section table, used by trainer modules)
    KL_TYPES,
    KNOWN_ENV_IDS,
    LOSS_AGG_MODES,
    METRIC_NAMESPACES,
    MODEL_ALIASES,
    TRAIN_SAMPLING,
    ConfigError,
    EnvConfig,
    EvalConfig,
    LoggingConfig,
    ModelConfig,
    RolloutConfig,
    RunConfig,
    SFTConfig,
    TrainerConfig,
    config_to_dict,
)

__all__ = [
    "ConfigError",
    "EnvConfig",
    "ModelConfig",
    "RolloutConfig",
    "EstimatorConfig",
    "TrainerConfig",
    "LoggingConfig",
    "EvalConfig",
    "SFTConfig",
    "RunConfig",
    "load_config",
    "save_config",
    "config_from_dict",
    "config_to_dict",
    "apply_overrides",
    "config_from_argv",
    "field_docs",
    "config_reference_markdown",
    "write_reference_into",
    "README_START",
    "README_END",
    "REMOVED_KEYS",
    "KNOWN_ENV_IDS",
    "TRAIN_SAMPLING",
    "MODEL_ALIASES",
    "METRIC_NAMESPACES",
    "LOSS_AGG_MODES",
    "KL_TYPES",
]

