"""``python -m experiments.study``: the plan, the warm-start hand-off, and the demo pipeline end to end on the
tiny smoke model (warm start replaced by ``--init-from``): runs, skip on rerun, report, study record."""
from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from lab import study
from tests.experiments.helpers import fake_warmstart, run_module
from warmstart import cache

REPO = Path(__file__).resolve().parents[2]
TINY = "tiny:layers=2,hidden=64,heads=2"
SHRINK = ["env.groups=2", "env.group_size=2", "env.max_steps=3", "rollout.max_response_tokens=16",
          "trainer.iterations=2", "trainer.save_every=1", "eval.every=2", "eval.max_tasks_per_split=1",
          "logging.tensorboard=false"]


def _study(args, **kw) -> subprocess.CompletedProcess:
    return run_module("experiments.study", list(args), 900, **kw)


def test_every_study_names_an_existing_preset_and_loads():
    from trainer.config import load_config

    assert {"demo", "cpu", "cpu-alfworld", "smoke"} <= set(study.STUDIES)
    assert study.STUDIES["smoke"].out == "results/smoke" and "SMOKE TEST" in study.STUDIES["smoke"].title
    for s in study.STUDIES.values():
        cfg = load_config(REPO / s.preset, s.overrides)
        assert cfg.sft.enabled == (s.warmstart_env is not None), s.name
        if s.warmstart_env:
            assert cfg.env_name == s.warmstart_env
    demo = study.STUDIES["demo"]
    assert demo.estimators == ["grpo", "gigpo", "bipace_v", "bipace_q"] and demo.seeds == [0]
    # the user's demo goes to a git-ignored folder and is read against the committed one
    assert demo.out == "runs/demo" and demo.reference == "results/demo"
    assert study.STUDIES["cpu"].out == "results/cpu-study"
    assert study.STUDIES["cpu"].seeds == [0, 1, 2]


def test_the_cpu_study_is_pinned_to_its_row13_warm_start_and_the_demo_to_its_fast_one():
    from warmstart.recipe import WarmStartConfig, cache_key

    cpu, demo = study.STUDIES["cpu"], study.STUDIES["demo"]
    assert cache_key(cache._config_for("textcraft", cpu.warmstart_args)) == "fd697b49a966"  # results/cpu-study
    assert sorted(demo.warmstart_args) == sorted(["--threads", "2", "--epochs", "2", "--tiny-layers", "2"])
    demo_cfg = cache._config_for("textcraft", demo.warmstart_args)
    assert cache_key(demo_cfg) == "6c0ca8f35c2f"  # row 24 of results/warmstart/README.md, results/demo's start
    assert demo_cfg == WarmStartConfig(env="textcraft", threads=2, epochs=2, tiny_layers=2)  # defaults but these


def test_a_study_announces_the_measured_time_of_its_warm_start():
    demo, cpu = study.STUDIES["demo"], study.STUDIES["cpu"]
    assert "2 idle cores" in cache.warmstart_estimate("textcraft", demo.warmstart_args)
    assert "row 13" in cache.warmstart_estimate("textcraft", cpu.warmstart_args)
    assert "one core" in cache.warmstart_estimate("textcraft", [])  # the defaults, row 15
    assert "no measured time" in cache.warmstart_estimate("textcraft", ["--epochs", "7"])
    assert "no measured time" in cache.warmstart_estimate("textcraft", ["--no-such-option"])


def test_a_missing_warm_start_stops_the_study_naming_the_command(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("BIPACE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "_has_module", lambda name: False)
    assert study.main(["demo", "--out", str(tmp_path / "demo")]) == 1
    err = capfd.readouterr().err
    assert "`python -m experiments.warmstart --env textcraft` makes it" in err and "--init-from" in err
    assert not (tmp_path / "demo" / "runs").exists()
    assert study.main(["demo", "--out", str(tmp_path / "demo"), "--dry-run"]) == 0
    assert "`python -m experiments.warmstart --env textcraft` makes it" in capfd.readouterr().out
    # a cached warm start is used without the command; its env options travel with it
    final = fake_warmstart(tmp_path / "cache" / "warmstart", "textcraft-tiny-abc", {"show_inventory": True})
    assert study.main(["demo", "--out", str(tmp_path / "demo"), "--dry-run"]) == 0
    out = capfd.readouterr().out
    # recorded portably: the run folders read the same in any clone and under any $BIPACE_CACHE
    assert f"warm start: cached: {final}" in out
    assert "sft.init_from=$BIPACE_CACHE/warmstart/textcraft-tiny-abc/final" in out
    assert "env.kwargs.show_inventory=true" in out
    # --no-warmstart: RL from the preset's model, so the preset's sft.enabled is switched off
    assert study.main(["demo", "--out", str(tmp_path / "demo"), "--no-warmstart", "--dry-run"]) == 0
    out = capfd.readouterr().out
    assert "sft.enabled=false" in out and "sft.init_from" not in out


def test_dry_run_plans_without_running(tmp_path):
    res = _study(["demo", "--out", str(tmp_path / "demo"), "--init-from",
                  str(fake_warmstart(tmp_path, "ws", {"show_inventory": True})), "--dry-run"])
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "# 4 runs: 0 finished (skipped), 0 to resume, 4 new" in out
    for est in ("grpo", "gigpo", "bipace_v", "bipace_q"):
        run = tmp_path / "demo" / "runs" / "textcraft" / "tiny-layers-4-hidden-128-heads-4" / est / "seed_0"
        assert str(run) in out
    assert "configs/cpu/textcraft_demo.yaml" in out and "env.kwargs.show_inventory=true" in out
    assert not (tmp_path / "demo" / "runs").exists()
    res = _study(["cpu", "--seeds", "0-1", "--estimators", "grpo,hgpo,rloo", "--dry-run", "--out", str(tmp_path / "c"),
                  "--init-from", str(tmp_path / "ws" / "final")])
    assert res.returncode == 0 and "# 6 runs:" in res.stdout
    # --control adds one no-update run per seed: the first estimator's rows at lr 0, in its own method folder
    res = _study(["cpu", "--seeds", "0-1", "--estimators", "grpo,gigpo", "--control", "--dry-run", "--out",
                  str(tmp_path / "c"), "--init-from", str(tmp_path / "ws" / "final")])
    assert res.returncode == 0 and "# 6 runs:" in res.stdout, res.stderr
    controls = [ln for ln in res.stdout.splitlines() if "variant=no-update" in ln]
    assert len(controls) == 2 and all("trainer.lr=0" in ln and "estimator.name=grpo" in ln for ln in controls)
    for seed in (0, 1):
        control = tmp_path / "c" / "runs" / "textcraft" / "tiny-layers-4-hidden-128-heads-4" / "no-update"
        assert f"{control}/seed_{seed}" in res.stdout
    # a study can ask for the control itself; its overrides reach every run but the control's lr stays 0
    res = _study(["cpu-lr3e-5", "--seeds", "0", "--dry-run", "--out", str(tmp_path / "l"),
                  "--init-from", str(tmp_path / "ws" / "final")])
    assert res.returncode == 0 and "# 5 runs:" in res.stdout, res.stderr
    cmds = [ln for ln in res.stdout.splitlines() if "experiments.train" in ln]
    assert len(cmds) == 5 and all("trainer.lr=3e-5 trainer.iterations=20" in ln for ln in cmds)
    assert sum("variant=no-update" in ln and ln.index("trainer.lr=0") > ln.index("trainer.lr=3e-5")
               for ln in cmds) == 1
    # a study's variants: an estimator with its own overrides, in its own method folder, beside the control
    res = _study(["learning", "--seeds", "1", "--dry-run", "--out", str(tmp_path / "v"),
                  "--init-from", str(tmp_path / "ws" / "final")])
    assert res.returncode == 0 and "# 7 runs:" in res.stdout, res.stderr
    cmds = [ln for ln in res.stdout.splitlines() if "experiments.train" in ln]
    shuffled = [ln for ln in cmds if "trainer.shuffle_minibatches=true" in ln]
    assert len(shuffled) == 3
    for method in ("grpo", "gigpo", "bipace_q"):
        line = next(ln for ln in shuffled if f"variant={method}-shuffle" in ln)
        assert f"estimator.name={method} " in line
        assert line.endswith(f"{tmp_path / 'v' / 'runs' / 'textcraft' / 'tiny-layers-4-hidden-128-heads-4'}"
                             f"/{method}-shuffle/seed_1")
    # --variants picks some of them (or none)
    res = _study(["learning", "--seeds", "1", "--dry-run", "--out", str(tmp_path / "v"), "--variants", "gigpo-shuffle",
                  "--init-from", str(tmp_path / "ws" / "final")])
    assert res.returncode == 0 and "# 5 runs:" in res.stdout, res.stderr
    assert "variant=gigpo-shuffle" in res.stdout and "variant=grpo-shuffle" not in res.stdout
    res = _study(["learning", "--seeds", "1", "--dry-run", "--out", str(tmp_path / "v"), "--variants", "none",
                  "--init-from", str(tmp_path / "ws" / "final")])
    assert res.returncode == 0 and "# 4 runs:" in res.stdout and "shuffle" not in res.stdout, res.stderr
    res = _study(["learning", "--seeds", "1", "--dry-run", "--out", str(tmp_path / "v"), "--variants", "gigpo-shufle",
                  "--init-from", str(tmp_path / "ws" / "final")])
    assert res.returncode == 2 and "gigpo-shufle: not a variant of learning" in res.stderr
    assert "grpo-shuffle" in res.stderr
    res = _study(["--list"])
    assert res.returncode == 0 and "cpu-alfworld" in res.stdout


@pytest.mark.slow
def test_demo_pipeline_end_to_end_on_the_smoke_model(tmp_path):
    """The demo's chain (runs from one model folder, two at a time, then the report) with the tiny smoke model in
    place of the SFT warm start and the runs shrunk to seconds."""
    from envs.paths import portable_path
    from trainer.models import resolve_model_folder

    model = resolve_model_folder(TINY)
    out = tmp_path / "demo"
    args = ["demo", "--out", str(out), "--init-from", str(model), "--estimators", "grpo,bipace_q", *SHRINK]
    res = _study(args)
    assert res.returncode == 0, res.stdout + res.stderr
    runs = out / "runs" / "textcraft" / "tiny-layers-2-hidden-64-heads-2"
    assert sorted(p.name for p in runs.iterdir()) == ["bipace_q", "grpo"]
    for m in ("grpo", "bipace_q"):
        cfg = (runs / m / "seed_0" / "config.yaml").read_text()
        assert f"init_from: {portable_path(model)}" in cfg and "init_from: $BIPACE_CACHE/" in cfg  # portable
    # the report: summary, tables and figures
    summary = (out / "summary.md").read_text()
    assert "grpo" in summary and "bipace_q" in summary
    assert (out / "tables.md").exists() and list(out.glob("*.png"))
    rec = json.loads((out / "study.json").read_text())
    assert rec["study"] == "demo" and rec["estimators"] == ["bipace_q", "grpo"]
    assert all(r["status"] == "finished" and r["cpu_s"] > 0 and r["attempts"] == 1 for r in rec["runs"].values())
    # again: nothing to run, the report is rewritten
    res = _study(args)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "nothing left to run" in res.stdout
    rec = json.loads((out / "study.json").read_text())
    assert all(r["attempts"] == 1 for r in rec["runs"].values())


def test_study_record_keeps_the_runs_of_earlier_calls(tmp_path, monkeypatch):
    """A study run in parts (four estimators, later two more) keeps one record of every run in study.json."""
    from lab import sweep as sweep_mod

    monkeypatch.setattr(study.os, "getloadavg", lambda: (0.5, 0.5, 0.5))
    out, runs_root = tmp_path / "cpu", tmp_path / "cpu" / "runs"
    runs_root.mkdir(parents=True)
    with open(runs_root / "sweep.jsonl", "w") as f:
        for label, wall in (("textcraft/tiny/grpo/seed_0", 100.0), ("textcraft/tiny/hgpo/seed_0", 50.0),
                            ("textcraft/tiny/hgpo/seed_0", 20.0)):
            f.write(json.dumps({"run": label, "wall_s": wall, "cpu_s": wall}) + "\n")

    def spec(est):
        return sweep_mod.RunSpec(config="c.yaml", overrides=[], env="textcraft", model="tiny", method=est,
                                 estimator=est, seed=0, iterations=8,
                                 run_dir=runs_root / "textcraft" / "tiny" / est / "seed_0", status="finished")

    cpu = study.STUDIES["cpu"]
    study.write_record(cpu, out, runs_root, [spec("grpo")], {"wall_s_this_call": 1.0})
    rec = study.write_record(cpu, out, runs_root, [spec("hgpo")], {})
    rec = json.loads(rec.read_text())
    assert sorted(rec["runs"]) == ["textcraft/tiny/grpo/seed_0", "textcraft/tiny/hgpo/seed_0"]
    assert rec["estimators"] == ["grpo", "hgpo"] and rec["seeds"] == [0] and len(rec["commands"]) == 1
    assert rec["runs"]["textcraft/tiny/hgpo/seed_0"]["wall_s"] == 70.0  # both attempts of the resumed run
    assert rec["runs"]["textcraft/tiny/grpo/seed_0"]["attempts"] == 1
    # another study's record in the folder is replaced, not merged
    rec = json.loads(study.write_record(study.STUDIES["demo"], out, runs_root, [spec("rloo")], {}).read_text())
    assert sorted(rec["runs"]) == ["textcraft/tiny/rloo/seed_0"]


def test_the_alfworld_study_is_pinned_to_the_warm_start_it_ran_from():
    alf = study.STUDIES["cpu-alfworld"]
    cfg = cache._config_for("alfworld", alf.warmstart_args)
    assert cfg.env == "alfworld" and cfg.history_length == 2 and cfg.expert_episodes == 200
    from warmstart.recipe import cache_key

    assert cache_key(cfg) == "fbcaf8988205"  # results/cpu-study-alfworld, row A1 of results/warmstart/README.md


def test_the_estimate_counts_the_iterations_left_at_the_measured_rate(monkeypatch):
    """Lengthening a study (every run already has an attempt) is estimated from CPU time per saved iteration."""
    from lab.sweep import RunSpec

    monkeypatch.setattr(study.os, "cpu_count", lambda: 2)
    cpu = study.STUDIES["cpu"]

    def spec(method, done, status, its=20):
        return RunSpec("c.yaml", [], "textcraft", "tiny", method, method, 0, its, Path("r") / method,
                       status=status, iterations_done=done)

    specs = [spec("grpo", 16, "resume"), spec("gigpo", 16, "resume"), spec("rloo", 20, "finished"),
             spec("hgpo", 0, "new")]
    timings = {  # 16 iterations in 960 CPU s (two attempts) and 16 in 1000: 1960 s / 32 its = 1.02 CPU min each
        "textcraft/tiny/grpo/seed_0": {"attempts": 2, "cpu_s": 960.0, "last_exit": 0},
        "textcraft/tiny/gigpo/seed_0": {"attempts": 2, "cpu_s": 1000.0, "last_exit": 0},
        # an attempt that failed, and a run of another study: neither is a measurement
        "textcraft/tiny/hgpo/seed_0": {"attempts": 1, "cpu_s": 50.0, "last_exit": 1},
        "textcraft/tiny/other/seed_0": {"attempts": 1, "cpu_s": 9999.0, "last_exit": 0},
    }
    msg = study._estimate(cpu, specs, timings, jobs=2)
    # left: 4 + 4 + 20 iterations = 28 at 1960 / 60 / 32 CPU min, 2 at a time
    assert msg.startswith("3 runs to do, 28 iterations left at ~1.02 CPU min each (measured): ~14 min")
    assert "2-core machine with 2 at a time" in msg
    assert study._estimate(cpu, specs, {}, jobs=2) == "3 runs to do (no measured time per run yet)"
    assert study._estimate(replace(cpu, minutes_per_run=10.0), specs, {}, jobs=1).startswith(
        "3 runs to do, ~10.0 CPU min each: ~30 min")
    assert study._estimate(cpu, [spec("rloo", 20, "finished")], timings, jobs=2) == "nothing left to run"


def test_a_variant_that_changes_the_warm_start_gets_its_own(tmp_path, monkeypatch):
    """A variant with ``sft.warmstart.*`` overrides (gate-textcraft's try 4: ``tiny_layers=4``) starts from the warm
    start of those settings, found in the cache like the study's own; the other runs keep the study's."""
    from envs.paths import portable_path
    from warmstart.config import cache_folder

    monkeypatch.setenv("BIPACE_CACHE", str(tmp_path / "cache"))
    s = study.STUDIES["gate-textcraft"]
    assert s.variant_warmstart_args("gigpo-lr1e-5") is None  # an lr change keeps the study's warm start
    v_args = s.variant_warmstart_args("gigpo-lr1e-5-4layer")
    assert v_args == [*s.warmstart_args[:-1], "4"] and s.warmstart_args[-2:] == ["--tiny-layers", "2"]
    folders = {}
    for name, args, layers in (("study", s.warmstart_args, 2), ("variant", v_args, 4)):
        entry = cache_folder(cache._config_for("textcraft", args))
        folders[name] = fake_warmstart(entry.parent, entry.name, {"show_inventory": True}, layers=layers)
    assert folders["study"] != folders["variant"]
    res = _study(["gate-textcraft", "--seeds", "0", "--dry-run", "--out", str(tmp_path / "g"),
                  "--variants", "gigpo-lr1e-5-4layer"])
    assert res.returncode == 0, res.stderr
    cmds = [ln for ln in res.stdout.splitlines() if "experiments.train" in ln]
    assert len(cmds) == 2, res.stdout
    base, deep = (next(ln for ln in cmds if ("variant=gigpo-lr1e-5-4layer" in ln) == v) for v in (False, True))
    ws, wv = (f"sft.init_from={portable_path(folders[k])}" for k in ("study", "variant"))  # $BIPACE_CACHE/...
    assert ws in base and wv not in base and "model.path=" not in base
    assert deep.index(wv) > deep.index(ws)
    assert "model.path=tiny:layers=4,hidden=128,heads=4" in deep and "sft.warmstart.tiny_layers=4" in deep
    assert deep.endswith("/tiny-layers-4-hidden-128-heads-4/gigpo-lr1e-5-4layer/seed_0")
    assert "variant gigpo-lr1e-5-4layer: cached: " in res.stdout
    # --init-from applies to every run: the variant's own setting is left aside
    res = _study(["gate-textcraft", "--seeds", "0", "--dry-run", "--out", str(tmp_path / "g"),
                  "--variants", "gigpo-lr1e-5-4layer", "--init-from", str(folders["study"])])
    assert res.returncode == 0 and wv not in res.stdout and "variant gigpo" not in res.stdout, res.stderr


def test_study_files_are_checked(tmp_path):
    """configs/studies/<name>.yaml: the warm start is the preset's sft.warmstart section, turned into the warm-start
    command's options in its order (the study's overrides apply); an unknown key or a missing field fails naming the
    file and the key."""
    ok = tmp_path / "mine.yaml"
    ok.write_text("title: t\npreset: configs/cpu/textcraft_tiny_sft.yaml\nout: results/mine\nestimators: [grpo]\n"
                  "seeds: [0]\noverrides: [sft.warmstart.eval_sampled=false]\n"
                  "variants:\n  g2: {estimator: grpo, overrides: [trainer.lr=1e-5]}\n")
    s = study.load_study(ok)
    assert s.name == "mine" and s.warmstart_env == "textcraft"
    assert s.warmstart_args == ["--epochs", "20", "--train-budget-s", "1500", "--dagger-rounds", "0",
                                "--eval-sampled", "false"]
    assert s.variants == {"g2": ("grpo", ["trainer.lr=1e-5"])}
    smoke = study.STUDIES["smoke"]  # its preset starts from the random model (sft.enabled false)
    assert smoke.warmstart_env is None and smoke.warmstart_args == []
    base = "title: t\npreset: p.yaml\nout: o\nestimators: [grpo]\nseeds: [0]\n"
    for extra, msg in {"seedz: [0]\n": "unknown key(s) ['seedz']",
                       "warmstart: {env: textcraft, epochs: 3}\n": "the preset's sft.warmstart section"}.items():
        bad = tmp_path / "bad.yaml"
        bad.write_text(base + extra)
        with pytest.raises(study.StudyFileError, match=re.escape(msg)) as e:
            study.load_study(bad)
        assert "bad.yaml" in str(e.value)
    (tmp_path / "bad.yaml").write_text("title: t\nout: o\n")
    with pytest.raises(study.StudyFileError, match=r"missing key\(s\) \['estimators', 'preset', 'seeds'\]"):
        study.load_study(tmp_path / "bad.yaml")


def _warmstart_overrides_of(saved: dict, preset) -> list[str]:
    """What ``warmstart_overrides`` gave the committed runs, read back from one of their saved configs (the warm
    start folder itself is a cache that a clean checkout lacks)."""
    ov = []
    if (saved.get("sft") or {}).get("init_from"):
        ov += ["sft.enabled=true", f"sft.init_from={saved['sft']['init_from']}"]
    if saved["model"]["path"] != preset.model.path:
        ov.append(f"model.path={saved['model']['path']}")
    if saved["rollout"].get("history_length") != preset.rollout.history_length:
        ov.append(f"rollout.history_length={saved['rollout']['history_length']}")
    for k, v in sorted((saved["env"].get("kwargs") or {}).items()):
        if (preset.env.kwargs or {}).get(k) != v:
            ov.append(f"env.kwargs.{k}={json.dumps(v)}")
    return ov


def test_every_committed_study_run_resumes_with_todays_code(tmp_path):
    """Rerunning a committed study (``python -m experiments.study <name>``, after ``python -m analysis.pack <study>
    --unpack`` for a packed one) must skip its finished runs, not refuse them: a setting added to the code since, or
    a preset edited since, must leave the committed folders' configs resumable (``RESUMABLE_CHANGES``, or the new
    key's default). Caught: ``trainer.suffix_buckets``, pinned to 1 by the ground-truth preset, blocked every seed-0
    folder that was saved before the key existed."""
    import yaml

    from analysis.pack import unpack
    from analysis.runs import packed_file
    from lab import sweep as sweep_mod
    from trainer.config import load_config

    checked = 0
    for s in study.STUDIES.values():
        runs = REPO / s.out / "runs"
        if (packed := packed_file(runs)) is not None:  # the folders as `--unpack` writes them back
            runs = tmp_path / s.name / "runs"
            unpack(packed, runs)
        saved_cfgs = sorted(runs.glob("**/config.yaml"))
        if not saved_cfgs:
            continue
        preset = load_config(REPO / s.preset)
        saved = yaml.safe_load(saved_cfgs[0].read_text())
        overrides = [*s.overrides, *_warmstart_overrides_of(saved, preset)]
        variants = dict(s.variants)
        for name, (est, extra) in s.variants.items():  # a variant with a warm start of its own (gate-textcraft)
            own = sorted(runs.glob(f"**/{name}/seed_*/config.yaml")) if s.variant_warmstart_args(name) else []
            if own:
                variants[name] = (est, [*extra, *_warmstart_overrides_of(yaml.safe_load(own[0].read_text()), preset)])
        seeds = sorted({int(p.parent.name.removeprefix("seed_")) for p in saved_cfgs})
        cwd = os.getcwd()
        os.chdir(REPO)  # presets are repo-relative, as in the command
        try:
            specs = study.study_specs(s, list(s.estimators), seeds, variants, overrides,
                                      runs if runs.is_relative_to(tmp_path) else Path(s.out) / "runs",
                                      control=s.control)
            try:
                sweep_mod.plan(specs)
            except sweep_mod.SweepError as e:
                pytest.fail(f"study {s.name}: {e}")
        finally:
            os.chdir(cwd)
        planned = {(REPO / sp.run_dir).resolve(): sp.status for sp in specs}
        for c in saved_cfgs:
            st = planned.get(c.parent.resolve())
            if st is not None:  # a committed folder the study names (cpu's hgpo runs came from another command)
                assert st in ("finished", "resume"), (s.name, c.parent, st)
                checked += 1
    assert checked >= 100  # the ground-truth study alone holds 58 folders
