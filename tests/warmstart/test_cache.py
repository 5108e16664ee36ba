"""``warmstart.cache``: the warm start a study or sweep starts from, found in the cache or in a build's output,
built by the command this checkout has, logged once per cache entry, and handed to RL as run-config overrides."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.experiments.helpers import fake_warmstart
from warmstart import cache

REPO = Path(__file__).resolve().parents[2]


def test_warmstart_overrides_carry_env_options_and_the_model_shape(tmp_path):
    final = fake_warmstart(tmp_path, "textcraft-tiny-abc", {"show_inventory": True})
    ov = cache.warmstart_overrides(final, "tiny:layers=4,hidden=128,heads=4")
    assert ov == ["sft.enabled=true", f"sft.init_from={final}", "env.kwargs.show_inventory=true"]
    other = fake_warmstart(tmp_path, "textcraft-tiny-def", {}, layers=2, hidden=64, heads=2)
    ov = cache.warmstart_overrides(other, "tiny:layers=4,hidden=128,heads=4")
    assert ov[-1] == "model.path=tiny:layers=2,hidden=64,heads=2"
    # the warm start's prompt history reaches the rollout; its horizon does not (RL's is the preset's env.max_steps)
    third = fake_warmstart(tmp_path, "textcraft-tiny-ghi", {"show_inventory": True, "max_steps": 15},
                            settings={"history_length": 0})
    ov3 = cache.warmstart_overrides(third, "tiny:layers=4,hidden=128,heads=4", preset_history=2)
    assert ov3 == ["sft.enabled=true", f"sft.init_from={third}", "env.kwargs.show_inventory=true",
                  "rollout.history_length=0"]
    assert cache.warmstart_overrides(third, "tiny:layers=4,hidden=128,heads=4", preset_history=0)[-1] != \
        "rollout.history_length=0"
    # the overrides make a valid run config whose folder is named after the trained shape
    from trainer.config import load_config

    cfg = load_config(REPO / "configs/cpu/textcraft_demo.yaml", ov)
    assert cfg.sft.init_from == str(other) and cfg.model.short_name == "tiny-layers-2-hidden-64-heads-2"


def test_find_warmstart_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BIPACE_CACHE", str(tmp_path))
    assert cache.find_warmstart("textcraft") is None
    a = fake_warmstart(tmp_path / "warmstart", "textcraft-tiny-aaa", {})
    os.utime(tmp_path / "warmstart" / "textcraft-tiny-aaa" / "DONE", (1, 1))
    b = fake_warmstart(tmp_path / "warmstart", "textcraft-tiny-bbb", {})
    fake_warmstart(tmp_path / "warmstart", "alfworld-tiny-ccc", {})
    unfinished = tmp_path / "warmstart" / "textcraft-tiny-zzz" / "final"
    unfinished.mkdir(parents=True)
    assert cache.find_warmstart("textcraft") == b  # the newest finished entry
    assert cache.find_warmstart("textcraft", ["[warmstart] done: " + str(a) + "; held-out 0.3"]) == a  # printed
    assert cache.find_warmstart("webshop") is None
    # with the study's own settings, only their entry counts (not the newest one of another setting)
    from warmstart.recipe import cache_folder

    extra = ["--rename-copies", "3", "--rationale", "none"]
    assert cache.find_warmstart("textcraft", extra=extra) is None
    assert cache.find_warmstart("textcraft", extra=[]) is None  # the defaults' entry is not built either
    cfg = cache._config_for("textcraft", extra)
    assert cfg.rename_copies == 3 and cfg.rationale == "none"
    own = cache_folder(cfg)
    mine = fake_warmstart(own.parent, own.name, {})
    assert cache.find_warmstart("textcraft", extra=extra) == mine
    assert cache._config_for("textcraft", ["--rationale", "long"]) is None  # a bad setting: no entry


def test_the_warm_start_a_study_ran_is_the_one_it_gets_even_under_a_path_with_spaces(tmp_path, monkeypatch):
    """The folder is read from the warm start's output ("model: <path>", spaces allowed), else from the cache entry
    of the study's own settings, never from the newest entry of another setting (a CPU study's, built later)."""
    root = tmp_path / "my cache"
    monkeypatch.setenv("BIPACE_CACHE", str(root))
    from warmstart.recipe import cache_folder

    extra = ["--threads", "2", "--epochs", "2"]
    own = cache_folder(cache._config_for("textcraft", extra))
    mine = fake_warmstart(own.parent, own.name, {})
    os.utime(own / "DONE", (1, 1))
    fake_warmstart(own.parent, "textcraft-tiny-newer", {})
    printed = [f"[warmstart] cache hit: {mine}", f"model: {mine}", "built in 0.0 min wall; this call 0.0 s"]
    assert cache.find_warmstart("textcraft", printed) == mine
    assert cache.find_warmstart("textcraft", [f"[warmstart] done: {mine}; held-out 0.3"]) == mine
    assert cache.find_warmstart("textcraft", ["no path here"], extra=extra) == mine
    # run_warmstart hands its settings on: a command that prints no usable path still yields the study's entry
    monkeypatch.setattr(cache, "warmstart_command", lambda env, ex=(): [sys.executable, "-c", "print('built')"])
    assert cache.run_warmstart("textcraft", extra, tmp_path / "ws.log") == mine


def test_warmstart_command_uses_what_the_checkout_has(monkeypatch):
    have: set[str] = set()
    monkeypatch.setattr(cache, "_has_module", lambda name: name in have)
    assert cache.warmstart_command("textcraft") is None
    msg = cache.missing_warmstart_message("textcraft")
    assert "`python -m experiments.warmstart --env textcraft`" in msg and "--init-from" in msg
    have.add("warmstart.recipe")  # the library without its command line: called through python -c
    cmd = cache.warmstart_command("alfworld")
    assert cmd[:2] == [sys.executable, "-c"] and cmd[-1] == "alfworld" and "WarmStartConfig(env=sys.argv[1])" in cmd[2]
    with pytest.raises(RuntimeError, match="--warmstart-args"):
        cache.warmstart_command("alfworld", ["--epochs", "2"])
    have.add("experiments.warmstart")
    assert cache.warmstart_command("webshop", ["--epochs", "2"]) == [
        sys.executable, "-m", "experiments.warmstart", "--env", "webshop", "--epochs", "2"]


def test_repeated_cache_hits_are_logged_once(tmp_path, monkeypatch, capfd):
    """A study called again finds the cached warm start: its report goes to the terminal every time but into the
    study's warmstart.log once (it used to grow by a copy per call); a build and a different entry are kept."""
    final = fake_warmstart(tmp_path / "cache" / "warmstart", "textcraft-tiny-abc", {"show_inventory": True})
    report = ("[warmstart] cache hit: {f}\nmodel: {f}\nbuilt in 26.0 min wall; this call {t} s\n")
    calls = iter(["0.0", "0.1", "12.5", "0.0"])

    def command(env, extra=None, text=None):
        out = text or report.format(f=final, t=next(calls))
        return [sys.executable, "-c", f"import sys; sys.stdout.write({out!r})"]

    monkeypatch.setattr(cache, "warmstart_command", command)
    log = tmp_path / "study" / "warmstart.log"
    for _ in range(3):
        assert cache.run_warmstart("textcraft", [], log) == final
    assert log.read_text().count("[warmstart] cache hit") == 1
    assert capfd.readouterr().out.count("[warmstart] cache hit") == 3
    # a build is logged in full; a cache hit on another entry is new text and is kept too
    monkeypatch.setattr(cache, "warmstart_command", lambda env, extra=None: command(
        env, text=f"epoch 1/2 loss 3.1\nsaved {final}\n"))
    assert cache.run_warmstart("textcraft", [], log) == final
    other = fake_warmstart(tmp_path / "cache" / "warmstart", "textcraft-tiny-def", {})
    monkeypatch.setattr(cache, "warmstart_command", lambda env, extra=None: command(
        env, text=report.format(f=other, t="0.0")))
    assert cache.run_warmstart("textcraft", [], log) == other
    text = log.read_text()
    assert "epoch 1/2 loss 3.1" in text and text.count("[warmstart] cache hit") == 2


def test_the_study_warmstart_log_keeps_progress_bars_as_last_drawn(tmp_path, monkeypatch, capfd):
    """The build's output goes into warmstart.log without carriage-return frames, and to the study's output the same
    way where that is not a terminal (here: captured; ``common.fsio.ConsoleCopy`` passes a terminal the frames)."""
    final = fake_warmstart(tmp_path / "cache" / "warmstart", "textcraft-tiny-abc", {})
    out = f"\rsft 0/600\rsft 300/600\rsft 600/600\nmodel: {final}\n"
    monkeypatch.setattr(cache, "warmstart_command",
                        lambda env, extra=None: [sys.executable, "-c", f"import sys; sys.stdout.write({out!r})"])
    log = tmp_path / "study" / "warmstart.log"
    assert cache.run_warmstart("textcraft", [], log) == final
    shown = capfd.readouterr().out
    assert "\r" not in shown and "\nsft 600/600\nmodel: " in shown
    text = log.read_text()
    assert "\r" not in text and text.startswith("sft 600/600\nmodel: ")
