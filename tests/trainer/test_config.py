"""The run config: YAML + overrides, type checks, unknown keys, cross-field rules, round trip, documentation."""
from __future__ import annotations

import dataclasses
import os
import re
import typing

import pytest
import yaml

from trainer.config import (
    _SECTIONS,
    ConfigError,
    RunConfig,
    TrainerConfig,
    config_reference_markdown,
    config_to_dict,
    field_docs,
    load_config,
    save_config,
)


def write(tmp_path, data) -> str:
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(data))
    return str(p)


def test_defaults_are_the_reference_protocol():
    cfg = RunConfig()
    t = cfg.trainer
    assert (t.lr, t.betas, t.weight_decay, t.grad_clip) == (1e-6, (0.9, 0.999), 0.01, 1.0)
    assert (t.clip_ratio, t.dual_clip, t.loss_agg_mode, t.entropy_coef) == (0.2, 3.0, "token-mean", 0.001)
    assert (t.use_kl_loss, t.kl_coef, t.kl_type, t.ppo_epochs, t.iterations) == (True, 0.01, "low_var_kl", 1, 150)
    assert (cfg.env.groups, cfg.env.group_size) == (16, 8)
    assert (cfg.rollout.temperature, cfg.rollout.top_p, cfg.rollout.max_response_tokens) == (1.0, 1.0, 512)
    assert (cfg.eval.every, cfg.eval.temperature) == (5, 0.4)


def test_yaml_and_overrides_are_typed(tmp_path):
    # YAML 1.1 reads "1e-6" as a string: the loader converts it against the field type
    path = write(tmp_path, {"seed": 3, "trainer": {"lr": "1e-6", "zero_stage": 3}, "env": {"id": "ALFWorld-v0"}})
    cfg = load_config(path, ["trainer.lr=2e-5", "trainer.dual_clip=null", "env.eval_splits=[valid_seen,valid_unseen]",
                             "trainer.betas=[0.8,0.95]", "logging.wandb=true", "model.hidden_layer=-8",
                             "env.kwargs.data_dir=/data/alf", "estimator.name=bipace_q", "estimator.epsilon=0.1"])
    assert cfg.seed == 3 and cfg.trainer.zero_stage == 3 and cfg.env.id == "ALFWorld-v0"
    assert cfg.trainer.lr == 2e-5 and isinstance(cfg.trainer.lr, float)
    assert cfg.trainer.dual_clip is None
    assert cfg.env.eval_splits == ["valid_seen", "valid_unseen"]
    assert cfg.trainer.betas == (0.8, 0.95)
    assert cfg.logging.wandb is True and cfg.model.hidden_layer == -8
    assert cfg.env.kwargs == {"data_dir": "/data/alf"}
    assert cfg.estimator.name == "bipace_q" and cfg.estimator.epsilon == 0.1


@pytest.mark.parametrize(
    "override,needle",
    [
        ("trainer.lrr=1", "unknown config key 'trainer.lrr'; did you mean 'trainer.lr'"),
        ("traner.lr=1", "did you mean 'trainer'"),
        ("trainer.lr=fast", "trainer.lr='fast' is not a number"),
        ("trainer.zero_stage=2.5", "trainer.zero_stage='2.5' is not an integer"),
        ("trainer.zero_stage=5", "trainer.zero_stage=5 must be one of [0, 1, 2, 3]"),
        ("logging.wandb=maybe", "is not a bool"),
        ("trainer.lr=-1", "trainer.lr=-1.0 must lie in [0, 1.0]"),
        ("trainer.lr=1e30", "trainer.lr=1e+30 must lie in [0, 1.0]; a learning rate above 1 diverges"),
        ("env.worker_timeout_s=0", "env.worker_timeout_s=0.0 must lie in (0, 86400]"),
        ("env.max_worker_restarts=-1", "env.max_worker_restarts=-1 must be >= 0"),
        ("trainer.loss_agg_mode=mean", "must be one of"),
        ("env.group_size=1", "env.group_size=1 must be >= 2"),
        ("env.id=Alfworld-v0", "did you mean 'ALFWorld-v0'"),
        ("model.hidden_layer=3", "must be a negative int"),
        ("estimator.name=bipace", "is not a registered estimator"),
        ("trainer.lr", "must look like key=value"),
        ("trainer.betas=[0.9]", "must have exactly 2 entries"),
        ("trainer.lr.x=1", "is a value, not a section"),
        ("env.train_pool=0", "env.train_pool=0 must be >= 1"),
        ("env.train_pool=[3, 3]", "lists a task twice"),
        ("env.train_pool=[-1]", "task indices (ints >= 0)"),
        ("env.train_sampling=shuffle", "env.train_sampling='shuffle' must be one of ['epoch', 'replacement']"),
        ("estimator.epsilon=big", "must be a number in [0, 2] or 'auto'"),
        ("estimator.epsilon_criterion=f1", "estimator.epsilon_criterion='f1' must be one of"),
        ("trainer.suffix_buckets=0", "trainer.suffix_buckets=0 must lie in [1, 64]"),
        ("trainer.old_logprobs=sampler", "trainer.old_logprobs='sampler' must be one of ['recompute', 'rollout']"),
        ("logging.jsonl_digits=20", "logging.jsonl_digits=20 must lie in [0, 17]"),
        ("rollout.hf_pack_weights=yes", "rollout.hf_pack_weights='yes' must be one of ['auto', 'on', 'off']"),
        ("rollout.vllm_tensor_parallel=2", "rollout.vllm_tensor_parallel=2 is not supported"),
        ("rollout.vllm_tensor_parallel=0", "rollout.vllm_tensor_parallel=0 must be >= 1"),
        ("eval.refill=sometimes", "is not a bool"),
    ],
)
def test_bad_keys_and_values_name_the_field(override, needle):
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    assert needle in str(e.value)


def _choice_fields():
    """(section, field, allowed values) of every choice field of the run config (typed ``Literal[...]``)."""
    from common.config_checks import literal_choices

    out = []
    for name, cls in [("", RunConfig), *_SECTIONS.items()]:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            found = literal_choices(hints[f.name])
            if found is not None:
                out.append((name, f.name, found[0]))
    return out


def test_a_choice_is_refused_alike_when_read_and_when_built_in_code():
    """Every choice field is a ``Literal``: the reader refuses another value as it reads it, and the sections'
    ``validate`` (a config built in code) with the same message, naming the field, the value and the values."""
    fields_ = _choice_fields()
    assert {(s, f) for s, f, _ in fields_} >= {
        ("", "device"), ("env", "train_sampling"), ("model", "attn_implementation"), ("rollout", "engine"),
        ("rollout", "hf_decode"), ("rollout", "hf_pack_weights"), ("trainer", "old_logprobs"),
        ("trainer", "loss_agg_mode"), ("trainer", "kl_type"), ("trainer", "zero_stage"), ("trainer", "precision"),
        ("logging", "wandb_mode"), ("estimator", "norm_mode"), ("estimator", "epsilon_criterion"),
        ("estimator", "centroid"), ("estimator", "cluster_backend"), ("estimator", "pace_key"),
        ("estimator", "pace_fallback"), ("estimator", "pace_norm")}
    for section, name, allowed in fields_:
        key = f"{section}.{name}" if section else name
        bad = "bogus" if isinstance(allowed[0], str) else 7
        with pytest.raises(ConfigError) as read:
            load_config(None, [f"{key}={bad}"])
        assert str(read.value) == f"{key}={bad!r} must be one of {list(allowed)}"
        if section == "estimator":
            from estimators import EstimatorConfig

            with pytest.raises(ConfigError) as built:  # EstimatorConfig checks itself when built, under its own name
                EstimatorConfig(**{name: bad})
            assert str(built.value) == f"EstimatorConfig.{name}={bad!r} must be one of {list(allowed)}"
            continue
        cfg = RunConfig()
        setattr(getattr(cfg, section) if section else cfg, name, bad)
        with pytest.raises(ConfigError) as built:
            cfg.validate()
        assert str(built.value) == str(read.value)


def test_a_numeric_choice_is_read_as_a_number():
    """``trainer.zero_stage=3`` on the command line is the text "3": the reader makes it the int 3 (a ``Literal``
    of ints compared with the text would refuse every stage), and refuses a bool, a fraction or another int."""
    assert load_config(None, ["trainer.zero_stage=3"]).trainer.zero_stage == 3
    assert type(load_config(None, ["trainer.zero_stage=0"]).trainer.zero_stage) is int
    for value, needle in [("true", "is not an integer"), ("2.5", "is not an integer"), ("4", "must be one of")]:
        with pytest.raises(ConfigError, match=needle):
            load_config(None, [f"trainer.zero_stage={value}"])
    with pytest.raises(ConfigError, match=r"trainer.zero_stage=True must be one of \[0, 1, 2, 3\]"):
        RunConfig(trainer=TrainerConfig(zero_stage=True))


def test_eval_refill_built_in_code_must_be_a_bool():
    from trainer.config.sections import EvalConfig

    with pytest.raises(ConfigError, match=r"eval.refill=1 must be true or false \(true keeps the env pool full"):
        RunConfig(eval=EvalConfig(refill=1))
    assert load_config(None, ["eval.refill=true"]).eval.refill is True and EvalConfig().refill is False


def test_one_error_type_for_every_config():
    """The run config, the estimator's and the warm start's raise the same ``ConfigError`` (a ``ValueError``)."""
    from estimators import EstimatorConfig
    from warmstart.config import WarmStartConfig

    for build in (lambda: RunConfig(seed=-1), lambda: EstimatorConfig(gamma=2.0),
                  lambda: EstimatorConfig(pace_norm="global"), lambda: WarmStartConfig(epochs=0),
                  lambda: WarmStartConfig(batch_by="goal"), lambda: WarmStartConfig(rationale="long")):
        with pytest.raises(ConfigError):
            build()
    assert issubclass(ConfigError, ValueError)
    with pytest.raises(ConfigError, match=r"^estimator: EstimatorConfig.gamma=2.0 must lie in \[0, 1\]$"):
        load_config(None, ["estimator.gamma=2"])
    with pytest.raises(ConfigError) as e:
        WarmStartConfig(rationale="long")
    assert str(e.value) == "WarmStartConfig.rationale='long' must be one of ['trace', 'goal', 'none']"


@pytest.mark.parametrize(
    "overrides,needle",
    [
        (["trainer.micro_batch_rows=512"], "because a mini-batch is accumulated from micro-batches"),
        (["trainer.offload_params=true"], "because only ZeRO-3 partitions parameters"),
        (["trainer.offload_optimizer=true", "trainer.zero_stage=0"], "because stage 0 keeps a plain optimizer"),
        (["trainer.kl_coef=0"], "set trainer.use_kl_loss=false instead"),
        (["trainer.old_logprobs=rollout", "rollout.engine=vllm"],
         "because only the hf engine returns the sampler's log-probs and the prompt's hidden state: use "
         "trainer.old_logprobs=recompute"),
    ],
)
def test_cross_field_checks_say_because(overrides, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config(None, overrides)
    # and the valid combinations pass
    load_config(None, ["trainer.offload_params=true", "trainer.zero_stage=3"])
    load_config(None, ["trainer.kl_coef=0", "trainer.use_kl_loss=false"])
    load_config(None, ["trainer.old_logprobs=rollout", "rollout.engine=hf"])


def test_vllm_tensor_parallel_is_refused_with_the_fix():
    """Each rank feeds its own prompt groups to its own engine; a tensor-parallel group would need the same prompts
    on every rank, so values > 1 stop at config time (engine hf or vllm) and the message gives the fix."""
    for engine in ("vllm", "hf"):
        with pytest.raises(ConfigError) as e:
            load_config(None, [f"rollout.engine={engine}", "rollout.vllm_tensor_parallel=4"])
        msg = str(e.value)
        assert "rollout.vllm_tensor_parallel=4" in msg
        assert "set rollout.vllm_tensor_parallel=1 (one engine per rank)" in msg
    cfg = load_config(None, ["rollout.engine=vllm", "rollout.vllm_tensor_parallel=1"])
    assert cfg.rollout.vllm_tensor_parallel == 1


def test_unknown_yaml_key_and_bad_file(tmp_path):
    with pytest.raises(ConfigError,
                       match="unknown config key 'rollout.temperatur'; did you mean 'rollout.temperature'"):
        load_config(write(tmp_path, {"rollout": {"temperatur": 0.5}}))
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer: [1, 2")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(write(tmp_path, {"trainer": 3}))


def test_resolved_config_round_trip(tmp_path):
    cfg = load_config(None, ["seed=7", "trainer.lr=3e-6", "env.eval_splits=[a]", "trainer.dual_clip=null",
                             "estimator.name=gigpo", "estimator.norm_mode=mean_norm"])
    path = save_config(cfg, tmp_path / "run" / "config.yaml")
    again = load_config(path)
    assert again == cfg
    assert config_to_dict(again) == config_to_dict(cfg)


def test_run_dir_and_name():
    cfg = load_config(None, ["seed=2", "estimator.name=bipace_q", "model.path=/models/Qwen2.5-1.5B-Instruct",
                             "env.id=ALFWorld-v0"])
    assert str(cfg.run_dir()) == "results/runs/alfworld/Qwen2.5-1.5B-Instruct/bipace_q/seed_2"
    assert cfg.run_name == "bipace_q__seed2"
    cfg2 = load_config(None, ["model.path=tiny:layers=4", "output_dir=/tmp/x"])  # spec: trainer/models.py
    assert cfg2.model.short_name == "tiny-layers-4" and str(cfg2.run_dir()) == "/tmp/x"


def test_check_paths_is_separate_from_loading(tmp_path):
    cfg = load_config(None, [f"model.path={tmp_path / 'missing'}"])  # loading a preset needs no model folder
    with pytest.raises(ConfigError, match="is not a Hugging Face model folder"):
        cfg.check_paths()
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    load_config(None, [f"model.path={tmp_path / 'm'}"]).check_paths()


def test_every_field_is_documented_once():
    for cls in [RunConfig, *_SECTIONS.values()]:
        docs = field_docs(cls)
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(f.type) or f.name in _SECTIONS:
                continue
            assert docs.get(f.name), f"{cls.__name__}.{f.name} has no docstring"
    md = config_reference_markdown()
    for f in dataclasses.fields(TrainerConfig):
        assert f"`trainer.{f.name}`" in md
    assert "[GiGPO: 0.2]" in md  # the source tag travels into the reference


def test_readme_reference_is_in_sync():
    from pathlib import Path

    from trainer.config import README_END, README_START

    text = (Path(__file__).resolve().parents[2] / "trainer" / "CONFIG.md").read_text()
    generated = text.split(README_START, 1)[1].split(README_END, 1)[0].strip()
    assert generated == config_reference_markdown().strip(), (
        "trainer/CONFIG.md is stale: run `python -m trainer.config --write trainer/CONFIG.md`")


def test_command_line_front_end(tmp_path, capsys):
    from trainer.config import config_from_argv

    cfg = config_from_argv(["--config", write(tmp_path, {"seed": 4}), "trainer.lr=1e-5", "estimator.name=gigpo"])
    assert (cfg.seed, cfg.trainer.lr, cfg.estimator.name) == (4, 1e-5, "gigpo")
    with pytest.raises(SystemExit) as e:
        config_from_argv(["trainer.lrr=1"])
    assert e.value.code == 2 and "did you mean 'trainer.lr'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        config_from_argv(["--help-config"])
    assert e.value.code == 0 and "`trainer.clip_ratio`" in capsys.readouterr().out


@pytest.mark.parametrize("flag", [["--local_rank=1"], ["--local_rank", "1"], ["--local-rank=1"]])
def test_the_deepspeed_launchers_local_rank_is_accepted(tmp_path, monkeypatch, flag):
    """``deepspeed`` runs ``python -m experiments.train --local_rank=N <args>``: the flag parses (before, between
    or after the arguments), gives the same config as without it, and sets LOCAL_RANK only where it is unset."""
    from trainer.config import config_from_argv

    args = ["--config", write(tmp_path, {"seed": 4}), "trainer.lr=1e-5", "estimator.name=gigpo"]
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    plain = config_to_dict(config_from_argv(args))
    for argv in ([*flag, *args], [*args[:2], *flag, *args[2:]], [*args, *flag]):
        monkeypatch.delenv("LOCAL_RANK", raising=False)
        assert config_to_dict(config_from_argv(argv)) == plain
        assert os.environ["LOCAL_RANK"] == "1"
    monkeypatch.setenv("LOCAL_RANK", "0")  # the launcher's environment wins
    config_from_argv([*flag, *args])
    assert os.environ["LOCAL_RANK"] == "0"


def test_package_exports():
    import trainer

    assert trainer.RunConfig is RunConfig and callable(trainer.PPOActor)


def test_removed_sft_keys_load_and_resume(tmp_path):
    """An old run folder's config still holds the SFT fields that were never read (sft.episodes, ...): it loads (a
    non-default value warns), and a folder whose saved config holds them resumes (no difference)."""
    import warnings

    import yaml

    from trainer.config import REMOVED_KEYS, config_to_dict, load_config
    from trainer.run_folder import config_differences

    old = config_to_dict(load_config(None))
    old["sft"].update({k.split(".", 1)[1]: v for k, v in REMOVED_KEYS.items()})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(old))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the old defaults: silent
        cfg = load_config(path)
    assert not hasattr(cfg.sft, "episodes")
    assert config_differences(old, config_to_dict(cfg)) == []
    old["sft"]["episodes"] = 5000
    path.write_text(yaml.safe_dump(old))
    with pytest.warns(UserWarning, match="sft.episodes"):
        load_config(path)
    with pytest.raises(ConfigError, match="unknown config key 'sft.episode'"):
        load_config(None, ["sft.episode=3"])


def test_sft_warmstart_section(tmp_path):
    """``sft.warmstart`` holds the warm start's settings: a mapping in the run config, checked against
    WarmStartConfig (unknown key, bad value) by the warm start's own package and by the commands before they compute,
    turned into the cache entry the committed studies ran from, and no obstacle to resuming a folder whose saved
    config predates the section (the folder it names, ``sft.init_from``, is compared)."""
    from experiments import train
    from trainer.config import config_to_dict, load_config
    from trainer.run_folder import config_differences
    from warmstart.config import from_run_config
    from warmstart.recipe import cache_key

    cfg = load_config("configs/cpu/textcraft_tiny_sft.yaml")
    assert cfg.sft.warmstart == {"epochs": 20, "train_budget_s": 1500, "dagger_rounds": 0}
    assert cache_key(from_run_config(cfg)) == "fd697b49a966"  # results/cpu-study's warm start (row 13)
    # the demo's: row 24 (2 layers, 2 passes, 2 threads), results/demo's warm start
    assert cache_key(from_run_config(load_config("configs/cpu/textcraft_demo.yaml"))) == "6c0ca8f35c2f"
    with pytest.raises(ConfigError, match=r"sft.warmstart.epoch is not a warm-start setting; did you mean 'epochs'"):
        from_run_config(load_config(None, ["sft.warmstart.epoch=3"]))
    with pytest.raises(ConfigError, match=r"sft.warmstart: WarmStartConfig.epochs=-3 must be > 0"):
        from_run_config(load_config(None, ["sft.warmstart.epochs=-3"]))
    with pytest.raises(ConfigError, match="sft.warmstart.env is not a warm-start setting"):
        from_run_config(load_config(None, ["sft.warmstart.env=alfworld"]))  # the run's env is the warm start's
    with pytest.raises(ConfigError, match="sft.warmstart=3 is not a mapping"):
        load_config(None, ["sft.warmstart=3"])
    # the training command refuses a bad setting before it computes anything (exit 2, no run folder)
    out = tmp_path / "run"
    assert train.main(["--config", "configs/cpu/textcraft_tiny.yaml", "sft.warmstart.epoch=3",
                       f"output_dir={out}"]) == 2
    assert not out.exists()
    saved = config_to_dict(cfg)
    del saved["sft"]["warmstart"]
    assert config_differences(saved, config_to_dict(cfg)) == []
    moved = config_to_dict(load_config("configs/cpu/textcraft_tiny_sft.yaml", ["sft.init_from=/elsewhere"]))
    assert config_differences(saved, moved) == ["sft.init_from: None -> '/elsewhere'"]


def test_speed_switches_do_not_block_a_resume():
    """``trainer.prefix_sharing``, ``trainer.suffix_buckets``, ``trainer.old_logprobs``, ``rollout.hf_decode``,
    ``rollout.hf_share_prefixes`` and ``rollout.hf_pack_weights`` change results only by float rounding: a folder made
    with one setting resumes with another, and a folder saved before they existed resumes too; a real change (the
    learning rate) still blocks."""
    from trainer.config import config_to_dict, load_config
    from trainer.run_folder import config_differences

    base = config_to_dict(load_config("configs/cpu/textcraft_demo.yaml"))
    other = config_to_dict(load_config("configs/cpu/textcraft_demo.yaml", [
        "trainer.prefix_sharing=false", "trainer.suffix_buckets=1", "rollout.hf_decode=hf",
        "rollout.hf_share_prefixes=false", "trainer.old_logprobs=rollout", "rollout.hf_pack_weights=off"]))
    assert config_differences(base, other) == []
    old = config_to_dict(load_config("configs/cpu/textcraft_demo.yaml"))
    del old["trainer"]["prefix_sharing"], old["trainer"]["suffix_buckets"], old["rollout"]["hf_decode"]
    del old["rollout"]["hf_share_prefixes"], old["trainer"]["old_logprobs"], old["rollout"]["hf_pack_weights"]
    assert config_differences(old, base) == []
    assert config_differences(old, other) == []  # a preset that pins a switch off still resumes an older folder
    lr = config_to_dict(load_config("configs/cpu/textcraft_demo.yaml", ["trainer.lr=0.5"]))
    assert config_differences(base, lr) == ["trainer.lr: 0.0001 -> 0.5"]


def test_an_hgpo_folder_saved_before_hgpo_rule_resumes_only_under_its_rule():
    """``estimator.hgpo_rule`` changed what HGPO computes: an HGPO run saved without the key used ``start_marker``,
    so resuming it under the new default is a difference; other estimators never read the key."""
    from trainer.config import config_to_dict, load_config
    from trainer.run_folder import config_differences

    for name, rule, diff in (("hgpo", "verl_agent", ["estimator.hgpo_rule: 'start_marker' -> 'verl_agent'"]),
                             ("hgpo", "start_marker", []), ("gigpo", "verl_agent", [])):
        old = config_to_dict(load_config(None, [f"estimator.name={name}"]))
        del old["estimator"]["hgpo_rule"]
        new = config_to_dict(load_config(None, [f"estimator.name={name}", f"estimator.hgpo_rule={rule}"]))
        assert config_differences(old, new) == diff, (name, rule)


def test_the_warm_start_rule_is_one_check_for_the_command_and_the_trainer(tmp_path, capsys):
    """sft.enabled without sft.init_from loads (a preset leaves the folder to experiments.study) and is refused
    before compute, with one message, by ``RunConfig.check_warm_start``: in ``experiments.train`` before the run
    folder is touched, and at the set-up of a ``Trainer`` another driver builds."""
    from experiments.train import main
    from trainer.loop import Trainer
    from trainer.run_folder import RunFolder

    out = tmp_path / "run"
    cfg = load_config(None, ["sft.enabled=true", "model.path=tiny:layers=2", f"output_dir={out}"])
    msg = r"sft.enabled=true but no warm-started model is given: training does not build the warm start"
    with pytest.raises(ConfigError, match=msg):
        cfg.check_warm_start()
    with pytest.raises(ConfigError, match=msg):
        Trainer(cfg, RunFolder(cfg))._check_config()
    load_config(None, ["sft.enabled=true", "sft.init_from=/some/folder"]).check_warm_start()
    load_config(None, []).check_warm_start()
    assert main(["sft.enabled=true", "model.path=tiny:layers=2", f"output_dir={out}"]) == 2
    assert re.search(msg, capsys.readouterr().err) and not out.exists()
