"""Checkpoints: exact continuation of a toy training loop, corrupt-latest fall-back, pruning, no unpickling."""
from __future__ import annotations

import errno
import hashlib
import json
import pickle
import random
import warnings

import numpy as np
import pytest
import torch

from tests.trainer.helpers import make_rollout_batch, tiny_qwen2
from trainer.checkpoint import (
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
    validate_checkpoint,
)
from trainer.config import ModelConfig, TrainerConfig
from trainer.ppo_actor import PPOActor
from trainer.seeding import seed_everything


class ToySampler:
    """A task sampler with its own state (like the env pool's): draws task ids from a numpy Generator."""

    def __init__(self, rng: np.random.Generator, num_tasks: int = 50):
        self.rng, self.num_tasks, self.draws = rng, num_tasks, 0

    def sample(self, k: int) -> list[int]:
        self.draws += 1
        return self.rng.integers(0, self.num_tasks, size=k).tolist()

    def state_dict(self) -> dict:
        return {"draws": self.draws, "num_tasks": self.num_tasks}

    def load_state_dict(self, d: dict) -> None:
        self.draws, self.num_tasks = d["draws"], d["num_tasks"]


def make_actor(stage: int, precision: str = "fp32") -> PPOActor:
    cfg = TrainerConfig(zero_stage=stage, precision=precision, lr=1e-3, mini_batch_rows=4, micro_batch_rows=2,
                        logprob_batch_rows=4,
                        shuffle_minibatches=True, kl_coef=0.05, save_every=2, keep_last=3)
    return PPOActor(tiny_qwen2(layers=2), cfg, model_cfg=ModelConfig(path="tiny:test", hidden_layer=-1))


def toy_loop(eng, seeds, sampler, start, stop, root):
    """A miniature of the training loop: every source of randomness the real loop has is used here."""
    out = {}
    for it in range(start, stop):
        tasks = sampler.sample(3)
        batch = make_rollout_batch(n=6, seed=int(sum(tasks)) + it)
        adv = torch.randn(len(batch), generator=seeds.rollout)
        noise = float(torch.rand(1)) + random.random() + float(np.random.rand())  # the global RNGs
        old = eng.compute_logprobs(batch.prompt_ids, batch.response_ids)
        ref = eng.compute_logprobs(batch.prompt_ids, batch.response_ids, reference=True, hidden=False)
        m = eng.update(batch.prompt_ids, batch.response_ids, adv, old.logprobs, ref.logprobs, generator=seeds.rollout)
        m["rollout/noise"] = noise
        m["rollout/hidden_sum"] = float(old.hidden.sum())
        out[it + 1] = m
        if (it + 1) % eng.cfg.save_every == 0:
            save_checkpoint(root, it + 1, eng, sampler=sampler,
                            generators={"task": seeds.task, "rollout": seeds.rollout},
                            extra={"last_metrics": m}, keep_last=eng.cfg.keep_last)
    return out


def final_params(eng):
    return {k: v.detach().clone() for k, v in eng.full_named_parameters()}


@pytest.mark.parametrize("stage,precision", [(0, "fp32"), (2, "bf16"), pytest.param(3, "fp32", marks=pytest.mark.slow)])
def test_resume_continues_exactly(stage, precision, tmp_path):
    """bf16 (the GPU set-up, here on CPU): bf16 weights in the HF folder, fp32 masters in the optimizer file."""
    # uninterrupted run: 5 iterations
    seeds = seed_everything(0)
    eng = make_actor(stage, precision)
    want = toy_loop(eng, seeds, ToySampler(seeds.task), 0, 5, tmp_path / "a")
    want_params = final_params(eng)
    want_opt, _ = eng.optimizer_state()
    # interrupted run: stops after iteration 3 (its last checkpoint is iteration 2)
    seeds = seed_everything(0)
    eng = make_actor(stage, precision)
    toy_loop(eng, seeds, ToySampler(seeds.task), 0, 3, tmp_path / "b")
    del eng
    # a new process would start from other RNG states: scramble them, then resume
    seeds = seed_everything(999)
    eng = make_actor(stage, precision)
    sampler = ToySampler(seeds.task)
    loaded = load_checkpoint(tmp_path / "b", eng, sampler=sampler,
                             generators={"task": seeds.task, "rollout": seeds.rollout})
    assert loaded.iteration == 2 and not loaded.fell_back and sampler.draws == 2
    assert loaded.extra["last_metrics"]["rollout/noise"] == want[2]["rollout/noise"]
    got = toy_loop(eng, seeds, sampler, loaded.iteration, 5, tmp_path / "b")
    for it in (3, 4, 5):
        assert got[it] == want[it], it  # every metric bit-equal
    got_params = final_params(eng)
    assert all(torch.equal(got_params[k], want_params[k]) for k in want_params)
    got_opt, _ = eng.optimizer_state()
    assert all(torch.equal(got_opt[k], want_opt[k]) for k in want_opt)
    assert eng.optimizer_steps == 5 * 2  # 6 rows / 4 per mini-batch = 2 steps per iteration


@pytest.fixture(scope="module")
def actor0():
    return make_actor(0)


def _save(root, it, eng, **kw):
    seeds = seed_everything(it)
    return save_checkpoint(root, it, eng, sampler=ToySampler(seeds.task), generators={"rollout": seeds.rollout}, **kw)


def test_layout_manifest_and_pruning(tmp_path, actor0):
    for it in (2, 4, 6, 8):
        _save(tmp_path, it, actor0, keep_last=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["iter_00000006", "iter_00000008"]
    assert (tmp_path / "latest").read_text().strip() == "iter_00000008"
    ck = tmp_path / "iter_00000008"
    for rel in ("model/config.json", "model/model.safetensors", "optimizer/rank_00000.safetensors",
                "rng/rank_00000.safetensors", "rng/rank_00000.json", "state.json", "manifest.json"):
        assert (ck / rel).exists(), rel
    manifest = json.loads((ck / "manifest.json").read_text())["files"]
    assert manifest["state.json"]["size"] == (ck / "state.json").stat().st_size
    assert manifest["state.json"]["sha256"] == hashlib.sha256((ck / "state.json").read_bytes()).hexdigest()
    assert validate_checkpoint(ck) is None
    assert not list(tmp_path.glob("*.pt")) and not list(tmp_path.rglob("*.pt"))  # no pickles anywhere


def test_corrupt_latest_falls_back_with_a_warning(tmp_path, actor0):
    for it in (2, 4):
        _save(tmp_path, it, actor0, keep_last=5)
    f = tmp_path / "iter_00000004" / "optimizer" / "rank_00000.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])  # truncated, e.g. by a full disk
    assert "bytes, the manifest says" in validate_checkpoint(tmp_path / "iter_00000004")
    with pytest.warns(UserWarning, match="trying the previous one"):
        loaded = load_checkpoint(tmp_path, actor0, sampler=ToySampler(np.random.default_rng()),
                                 generators={"rollout": torch.Generator()})
    assert loaded.iteration == 2 and loaded.fell_back


def test_partial_and_dangling_latest(tmp_path, actor0):
    _save(tmp_path, 2, actor0)
    # a crash mid-save leaves a .partial folder (never loaded) and possibly a latest that names nothing
    (tmp_path / "iter_00000006.partial").mkdir()
    (tmp_path / "latest").write_text("iter_00000006\n")
    with pytest.warns(UserWarning, match="does not exist"):
        loaded = load_checkpoint(tmp_path, actor0, sampler=ToySampler(np.random.default_rng()),
                                 generators={"rollout": torch.Generator()})
    assert loaded.iteration == 2
    # a checkpoint without a manifest is partial
    _save(tmp_path, 4, actor0)
    (tmp_path / "iter_00000004" / "manifest.json").unlink()
    assert "no manifest" in validate_checkpoint(tmp_path / "iter_00000004")
    with pytest.warns(UserWarning):
        assert load_checkpoint(tmp_path, actor0, sampler=ToySampler(np.random.default_rng()),
                               generators={"rollout": torch.Generator()}).iteration == 2


def test_nothing_usable_is_an_error_and_empty_is_none(tmp_path, actor0):
    assert load_checkpoint(tmp_path / "none", actor0) is None
    _save(tmp_path, 2, actor0)
    (tmp_path / "iter_00000002" / "state.json").write_text("{broken")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(CheckpointError, match="every checkpoint under .* is unusable"):
            load_checkpoint(tmp_path, actor0)


def test_other_zero_stage_is_refused(tmp_path, actor0):
    """A good checkpoint of another stage (or rank count) is refused at once, not skipped for an older one."""
    from trainer.checkpoint import CheckpointMismatch

    _save(tmp_path, 1, actor0)
    _save(tmp_path, 2, actor0)
    eng2 = make_actor(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "skipping checkpoint" fall-back
        with pytest.raises(CheckpointMismatch, match="resume with the same launcher and trainer.zero_stage") as e:
            load_checkpoint(tmp_path, eng2)
    assert e.value.path.name == "iter_00000002" and (e.value.world_size, e.value.zero_stage) == (1, 0)


def test_loading_never_unpickles(tmp_path, actor0, monkeypatch):
    _save(tmp_path, 2, actor0)

    def forbidden(*a, **k):
        raise AssertionError("unpickling during checkpoint load")

    monkeypatch.setattr(torch, "load", forbidden)
    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(pickle, "Unpickler", forbidden)
    loaded = load_checkpoint(tmp_path, actor0, sampler=ToySampler(np.random.default_rng()),
                             generators={"rollout": torch.Generator()})
    assert loaded.iteration == 2


def test_state_must_be_json(tmp_path, actor0):
    class BadSampler(ToySampler):
        def state_dict(self):
            return {"rng": np.random.default_rng()}

    with pytest.raises(CheckpointError, match="not JSON-serialisable"):
        save_checkpoint(tmp_path, 2, actor0, sampler=BadSampler(np.random.default_rng()))
    assert not list_checkpoints(tmp_path)  # nothing half-written became a checkpoint


# ------------------------------------------------------------------- checksums, old manifests, a full disk
def _load(root, eng):
    return load_checkpoint(root, eng, sampler=ToySampler(np.random.default_rng()),
                           generators={"rollout": torch.Generator()})


def test_a_same_size_edit_fails_the_checksum_and_falls_back_naming_the_file(tmp_path, actor0):
    for it in (2, 4):
        _save(tmp_path, it, actor0, keep_last=5)
    f = tmp_path / "iter_00000004" / "model" / "model.safetensors"
    data = bytearray(f.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 64] = bytes(b ^ 0xFF for b in data[mid:mid + 64])  # 64 flipped bytes inside a tensor
    f.write_bytes(bytes(data))
    problem = validate_checkpoint(tmp_path / "iter_00000004")
    assert problem is not None and str(f) in problem and "SHA-256" in problem
    with pytest.warns(UserWarning, match="model.safetensors does not match the SHA-256"):
        loaded = _load(tmp_path, actor0)
    assert (loaded.iteration, loaded.fell_back) == (2, True)
    # the iteration number edited in place (same size) in state.json is caught the same way
    _save(tmp_path, 6, actor0, keep_last=5)
    state = tmp_path / "iter_00000006" / "state.json"
    text = state.read_text()
    assert '"iteration": 6' in text
    state.write_text(text.replace('"iteration": 6', '"iteration": 9'))
    with pytest.warns(UserWarning, match="state.json does not match the SHA-256"):
        assert _load(tmp_path, actor0).iteration == 2  # 6 edited, 4 corrupt


def test_a_manifest_without_checksums_still_loads_with_a_warning(tmp_path, actor0):
    _save(tmp_path, 2, actor0)
    man = tmp_path / "iter_00000002" / "manifest.json"
    m = json.loads(man.read_text())
    m["files"] = {k: v["size"] for k, v in m["files"].items()}  # the manifest of checkpoints made before checksums
    man.write_text(json.dumps(m))
    with pytest.warns(UserWarning, match="saved without checksums"):
        assert validate_checkpoint(tmp_path / "iter_00000002") is None
    with pytest.warns(UserWarning, match="saved without checksums"):
        assert _load(tmp_path, actor0).iteration == 2


def test_a_full_disk_during_a_save_keeps_the_previous_checkpoint_and_leaves_no_partial(tmp_path, actor0, monkeypatch):
    """ENOSPC injected where the optimizer file is written (safetensors reports it as a SafetensorError): the
    error names the checkpoint folder, the partial folder is gone, the previous checkpoint stays the latest."""
    from safetensors import SafetensorError

    import trainer.checkpoint as ck
    from common.fsio import disk_full

    _save(tmp_path, 2, actor0)
    real = ck.save_file

    def full_disk(tensors, filename, metadata=None):
        if "optimizer" in str(filename):
            with open(filename, "wb") as f:
                f.write(b"\0" * 1000)  # what fitted before the disk filled up
            raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: '
                                  '"No space left on device" })')
        return real(tensors, filename, metadata=metadata)

    monkeypatch.setattr(ck, "save_file", full_disk)
    with pytest.raises(OSError) as e:
        _save(tmp_path, 4, actor0)
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / "iter_00000004.partial")
    assert disk_full(e.value) is e.value
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iter_00000002", "latest"]
    assert _load(tmp_path, actor0).iteration == 2


def test_dropping_the_optimizer_state_keeps_the_weights_and_says_what_stays(tmp_path, actor0):
    """A finished run frees its checkpoints' optimizer state: the model folder, RNG state and state.json stay, the
    manifest still verifies, and a resume from it is refused with the reason."""
    from trainer.checkpoint import drop_optimizer_state

    for it in (2, 4):
        _save(tmp_path, it, actor0, keep_last=2)
    opt_bytes = sum(f.stat().st_size for f in tmp_path.rglob("optimizer/*") if f.is_file())
    assert opt_bytes > 0
    n, freed, kept = drop_optimizer_state(tmp_path)
    assert (n, freed) == (2, opt_bytes)
    assert kept == ["manifest.json", "model", "rng", "state.json"]
    for ck in list_checkpoints(tmp_path):
        assert not (ck / "optimizer").exists() and (ck / "model" / "model.safetensors").exists()
        assert validate_checkpoint(ck) is None
        assert json.loads((ck / "manifest.json").read_text())["optimizer_dropped"] is True
    assert drop_optimizer_state(tmp_path)[:2] == (0, 0)  # nothing left to drop
    with pytest.warns(UserWarning, match="optimizer state was dropped"), pytest.raises(CheckpointError,
                                                                                       match="unusable"):
        _load(tmp_path, actor0)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_nonfinite_weights_are_never_saved(tmp_path, actor0, value):
    """A NaN/Inf weight stops the save with the run's non-finite stop (NonFiniteError: exit 3 in experiments.train),
    naming the weight; nothing is written and the previous checkpoint stays the latest."""
    from trainer.ppo_actor import NonFiniteError

    _save(tmp_path, 2, actor0)
    name, p = next((n, p) for n, p in actor0.lm.named_parameters() if n.endswith("layers.1.mlp.up_proj.weight"))
    keep = p.data[0, 3].item()
    try:
        with torch.no_grad():
            p.data[0, 3] = value
        assert actor0.nonfinite_parameters() == [name]
        with pytest.raises(NonFiniteError, match=rf"iteration 4: no checkpoint saved, 1 weight\(s\) hold NaN/Inf: "
                                                 rf"{name}; the newest checkpoint, iter_00000002, is kept"):
            _save(tmp_path, 4, actor0)
    finally:
        with torch.no_grad():
            p.data[0, 3] = keep
    assert sorted(q.name for q in tmp_path.iterdir()) == ["iter_00000002", "latest"]
    assert actor0.nonfinite_parameters() == []
    assert _save(tmp_path, 4, actor0).name == "iter_00000004"
