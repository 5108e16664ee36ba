"""The PPO actor on DeepSpeed: updates, ZeRO stages, micro-batching, non-finite handling, LoRA, exports."""
from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch

from tests.trainer.helpers import make_rollout_batch, tiny_qwen2
from trainer.config import ModelConfig, TrainerConfig
from trainer.loss import ppo_loss
from trainer.ppo_actor import NonFiniteError, PPOActor, split_even

HIDDEN = -2


def make_actor(stage: int = 0, lora: int = 0, **kw) -> PPOActor:
    base = dict(zero_stage=stage, lr=1e-3, mini_batch_rows=8, micro_batch_rows=3, logprob_batch_rows=4,
                use_kl_loss=True, kl_coef=0.01)
    base.update(kw)
    return PPOActor(tiny_qwen2(layers=2), TrainerConfig(**base),
                    model_cfg=ModelConfig(path="tiny:test", hidden_layer=HIDDEN, lora_rank=lora, lora_alpha=8.0))


def advantages(n: int, seed: int) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed))


def train(eng: PPOActor, batch, iterations: int, seed: int = 0) -> list[dict]:
    metrics = []
    ref = eng.compute_logprobs(batch.prompt_ids, batch.response_ids, reference=True, hidden=False) \
        if eng.cfg.use_kl_loss else None
    for it in range(iterations):
        old = eng.compute_logprobs(batch.prompt_ids, batch.response_ids, hidden=False)
        metrics.append(eng.update(batch.prompt_ids, batch.response_ids, advantages(len(batch), seed + it),
                                  old.logprobs, None if ref is None else ref.logprobs))
    return metrics


def params(eng: PPOActor) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone().float() for k, v in eng.full_named_parameters()}


# Comparisons between set-ups use Adam with eps = 1: the update lr * m / (sqrt(v) + eps) is then close to SGD's,
# so it depends on the gradient's scale (plain Adam is scale-invariant and would hide a wrongly scaled gradient)
# and is well conditioned (with eps = 1e-8, a gradient of ~1e-9 that is zero in exact arithmetic, e.g. a key
# bias, gets a full +-lr step whose sign follows the rounding noise).
SGD_LIKE = dict(adam_eps=1.0, lr=0.05)


def assert_same_params(got: dict, want: dict, atol: float = 1e-6) -> None:
    assert got.keys() == want.keys()
    for k in want:
        assert torch.allclose(got[k], want[k], atol=atol), (k, float((got[k] - want[k]).abs().max()))


@pytest.fixture(scope="module")
def batch():
    return make_rollout_batch(n=10, seed=5)


@pytest.fixture(scope="module")
def stage0_reference(batch):
    eng = make_actor(0, **SGD_LIKE)
    metrics = train(eng, batch, 2)
    return params(eng), metrics


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_stages_match_stage0(stage, batch, stage0_reference):
    want, want_metrics = stage0_reference
    eng = make_actor(stage, **SGD_LIKE)
    got_metrics = train(eng, batch, 2)
    assert_same_params(params(eng), want)
    for a, b in zip(got_metrics, want_metrics):
        assert a["loss/optimizer_steps"] == b["loss/optimizer_steps"] == 2.0
        assert abs(a["loss/policy"] - b["loss/policy"]) < 1e-5
        assert abs(a["loss/grad_norm"] - b["loss/grad_norm"]) < 1e-4 * max(1.0, b["loss/grad_norm"])


def test_zero3_with_suffix_buckets_matches_stage0_unbucketed():
    """ZeRO-3 gathers parameters per module call: a forward of several bucket calls over a shared prefix gives
    stage 0's one-suffix-forward training."""
    from trainer.forward import pack_rows_shared

    b = make_rollout_batch(n=12, seed=7)
    g = torch.Generator().manual_seed(1)
    head = torch.randint(2, 256, (30,), generator=g)
    # a shared 30-token prefix, then 2..5 or 55..58 tokens of prompt of the row's own
    b.prompt_ids = [torch.cat([head, torch.randint(2, 256, ((2, 55)[i % 2] + i % 4,), generator=g)])
                    for i in range(12)]
    assert pack_rows_shared(b.prompt_ids[:6], b.response_ids[:6], suffix_buckets=3).suffix_bucket is not None
    kw = dict(SGD_LIKE, mini_batch_rows=12, micro_batch_rows=6, logprob_batch_rows=12)
    got = {}
    for stage, buckets in ((0, 1), (3, 3)):
        eng = make_actor(stage, suffix_buckets=buckets, **kw)
        hidden = eng.compute_logprobs(b.prompt_ids, b.response_ids).hidden
        train(eng, b, 2)
        got[stage] = (params(eng), hidden)
    assert_same_params(got[3][0], got[0][0], atol=1e-5)
    torch.testing.assert_close(got[3][1], got[0][1], atol=1e-5, rtol=1e-5)


def test_update_changes_parameters_and_lowers_the_surrogate(batch):
    eng = make_actor(2, use_kl_loss=False, entropy_coef=0.0, mini_batch_rows=10, micro_batch_rows=4, lr=3e-3)
    before = params(eng)
    adv = advantages(len(batch), 11)
    old = eng.compute_logprobs(batch.prompt_ids, batch.response_ids, hidden=False)
    surrogate_before = ppo_loss(old.logprobs, old.logprobs, adv, old.mask, ref_logp=None).metrics["loss/policy"]
    m = eng.update(batch.prompt_ids, batch.response_ids, adv, old.logprobs)
    assert m["loss/optimizer_steps"] == 1.0 and m["loss/skipped_steps"] == 0.0
    after = params(eng)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    new = eng.compute_logprobs(batch.prompt_ids, batch.response_ids, hidden=False)
    surrogate_after = ppo_loss(new.logprobs, old.logprobs, adv, old.mask, ref_logp=None).metrics["loss/policy"]
    assert float(surrogate_after) < float(surrogate_before) - 1e-3


def test_micro_batches_accumulate_to_the_large_batch_gradient(batch):
    """Stage 0 keeps full gradients in p.grad: compare them directly (Adam's updates hide gradient scale)."""
    eng = make_actor(0, mini_batch_rows=10)
    n = len(batch)
    old = eng.compute_logprobs(batch.prompt_ids, batch.response_ids, hidden=False)
    ref = eng.compute_logprobs(batch.prompt_ids, batch.response_ids, reference=True, hidden=False)
    adv = advantages(n, 3)
    r_len = torch.tensor([r.numel() for r in batch.response_ids])
    assert len(set(r_len.tolist())) > 2  # micro-batches hold different token counts
    grads = {}
    for micro in (1, 3, 10):
        eng._accumulate(list(range(n)), batch.prompt_ids, batch.response_ids, adv, old.logprobs, ref.logprobs,
                        r_len, list(range(n)), 0, micro_batch_rows=micro)
        grads[micro] = torch.cat([p.grad.flatten().clone() for p in eng.module.parameters()])
        eng.engine.optimizer.zero_grad(set_to_none=True)
        eng.engine._unmanaged_backward_count = 0
    scale = float(grads[10].abs().max())
    for micro in (1, 3):
        assert torch.allclose(grads[micro], grads[10], rtol=1e-5, atol=1e-6 * scale), micro


def test_micro_batch_size_does_not_change_zero2_training(batch):
    a = make_actor(2, micro_batch_rows=1, **SGD_LIKE)
    b = make_actor(2, micro_batch_rows=8, **SGD_LIKE)
    train(a, batch, 2)
    train(b, batch, 2)
    assert_same_params(params(a), params(b))


@pytest.mark.parametrize("stage", [0, 2])
def test_nonfinite_steps_are_skipped_counted_and_stop_after_three(stage, batch, caplog):
    eng = make_actor(stage, mini_batch_rows=10, micro_batch_rows=4, use_kl_loss=False)
    n = len(batch)
    row_ids = [f"row{i}" for i in range(n)]
    train(eng, batch, 1)  # optimizer state exists
    before = params(eng)
    opt_before, _ = eng.optimizer_state()
    old = eng.compute_logprobs(batch.prompt_ids, batch.response_ids, hidden=False)
    adv = advantages(n, 1)
    adv[6] = float("nan")
    with caplog.at_level("WARNING", logger="trainer.ppo_actor"):
        m = eng.update(batch.prompt_ids, batch.response_ids, adv, old.logprobs, row_ids=row_ids)
    assert m["loss/skipped_steps"] == 1.0 and m["loss/optimizer_steps"] == 0.0
    assert eng.skipped_steps == 1 and eng.consecutive_skips == 1
    assert eng.last_nonfinite_rows == ["row6"] and "row6" in caplog.text
    after = params(eng)
    assert all(torch.equal(before[k], after[k]) for k in before)  # parameters untouched
    opt_after, _ = eng.optimizer_state()
    assert all(torch.equal(opt_before[k], opt_after[k]) for k in opt_before)  # optimizer state untouched
    # non-finite logits (a poisoned forward) are caught the same way, with the row id. The hook poisons the second
    # row of every forward, so rows must reach the forwards in their own order: no reordering by prefix or length
    eng.cfg.prefix_sharing = False
    eng.row_order = lambda prompt_ids, response_ids, grad: list(range(len(prompt_ids)))
    h = eng.lm.model.norm.register_forward_hook(lambda mod, i, o: o.index_fill(0, torch.tensor([1]), float("inf")))
    try:
        m = eng.update(batch.prompt_ids, batch.response_ids, advantages(n, 2), old.logprobs, row_ids=row_ids)
    finally:
        h.remove()
        eng.cfg.prefix_sharing = True
        del eng.row_order
    assert m["loss/skipped_steps"] == 1.0 and "row1" in eng.last_nonfinite_rows and eng.consecutive_skips == 2
    # a good step resets the run of skips
    m = eng.update(batch.prompt_ids, batch.response_ids, advantages(n, 3), old.logprobs)
    assert m["loss/optimizer_steps"] == 1.0 and eng.consecutive_skips == 0
    assert all(torch.isfinite(v).all() for v in params(eng).values())
    # three in a row raise
    with pytest.raises(NonFiniteError, match=r"3 optimizer steps in a row.*row6"):
        for _ in range(3):
            eng.update(batch.prompt_ids, batch.response_ids, adv, old.logprobs, row_ids=row_ids)


def _forward_rows(eng: PPOActor, monkeypatch) -> list[list[int]]:
    """The rows (by response length, unique in the batch below) of every forward ``eng`` packs from now on."""
    seen: list[list[int]] = []
    pack = eng.pack

    def spy(prompt_ids, response_ids, pad_id, *, grad):
        seen.append([int(r.numel()) for r in response_ids])
        return pack(prompt_ids, response_ids, pad_id, grad=grad)

    monkeypatch.setattr(eng, "pack", spy)
    return seen


def _rows_by_prompt_and_length(n: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Rows whose prompt order (lexicographic) and length order disagree: row i has prompt [2 + i] * (5 + 3 * (i % 3))
    and a response of 1 + i tokens, every length distinct."""
    prompts = [torch.full((5 + 3 * (i % 3),), 2 + i) for i in range(n)]
    responses = [torch.arange(1 + i) % 200 + 3 for i in range(n)]
    return prompts, responses


def test_rows_go_in_length_order_where_sharing_is_refused(monkeypatch):
    """Sharing refused (here under gradient checkpointing in the update; as ZeRO-3 on several ranks refuses it in
    every pass): the forwards take rows longest first, not by prompt, although ``prefix_sharing`` is on."""
    prompts, responses = _rows_by_prompt_and_length(9)
    lengths = [int(p.numel() + r.numel()) for p, r in zip(prompts, responses)]
    eng = make_actor(0, gradient_checkpointing=True, mini_batch_rows=9, micro_batch_rows=3, logprob_batch_rows=3,
                     use_kl_loss=False, shuffle_minibatches=False)
    assert eng.cfg.prefix_sharing and eng.sharing_allowed(grad=False) and not eng.sharing_allowed(grad=True)
    seen = _forward_rows(eng, monkeypatch)
    old = eng.compute_logprobs(prompts, responses, hidden=False)
    by_prompt = [int(responses[i].numel()) for i in sorted(range(9), key=lambda i: prompts[i].tolist())]
    assert [r for f in seen for r in f] == by_prompt  # allowed in the no-gradient pass: rows sharing a prefix together
    seen.clear()
    eng.update(prompts, responses, advantages(9, 0), old.logprobs)
    by_length = sorted(range(9), key=lambda i: -lengths[i])
    assert seen == [[int(responses[i].numel()) for i in by_length[k: k + 3]] for k in (0, 3, 6)]
    # refused in every pass (ZeRO-3 on several ranks): the log-prob pass goes by length as well
    monkeypatch.setattr(eng, "sharing_allowed", lambda *, grad: False)
    seen.clear()
    again = eng.compute_logprobs(prompts, responses, hidden=False)
    assert seen == [[int(responses[i].numel()) for i in by_length[k: k + 3]] for k in (0, 3, 6)]
    assert torch.equal(again.mask, old.mask)  # each row's log-probs land in its own place


def test_zero3_reference_model_and_hidden_states(batch):
    eng = make_actor(3)
    initial = tiny_qwen2(layers=2).eval()
    from trainer.forward import pack_rows, policy_forward

    with torch.no_grad():
        want = policy_forward(initial, pack_rows(batch.prompt_ids, batch.response_ids), hidden_layer=HIDDEN)
    got = eng.compute_logprobs(batch.prompt_ids, batch.response_ids)  # hidden layer from the model config
    assert torch.allclose(got.logprobs, want.logprobs, atol=1e-5)
    assert torch.allclose(got.hidden, want.hidden, atol=1e-4)
    train(eng, batch, 1)
    ref = eng.compute_logprobs(batch.prompt_ids, batch.response_ids, reference=True, hidden=False)
    new = eng.compute_logprobs(batch.prompt_ids, batch.response_ids, hidden=False)
    assert torch.allclose(ref.logprobs, want.logprobs, atol=1e-5)  # the reference stays frozen
    assert (new.logprobs - want.logprobs).abs().max() > 1e-3


def test_export_hf_reloads_with_transformers(tmp_path, batch):
    from transformers import AutoModelForCausalLM

    eng = make_actor(3)
    train(eng, batch, 1)
    out = eng.export_hf(tmp_path / "hf")
    reloaded = AutoModelForCausalLM.from_pretrained(out).eval()
    ids = torch.cat([batch.prompt_ids[0], batch.response_ids[0]])[None]
    want = params(eng)
    got = dict(reloaded.named_parameters())
    for k, v in want.items():
        assert torch.equal(got[k].detach(), v), k
    with torch.no_grad():
        assert torch.isfinite(reloaded(input_ids=ids).logits).all()


def test_lora_actor(batch, tmp_path):
    import peft

    eng = make_actor(2, lora=4)
    trainable = [n for n, p in eng.lm.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert eng.ref is None  # the reference is the base model with adapters off
    base = tiny_qwen2(layers=2)
    train(eng, batch, 2)
    ref = eng.compute_logprobs(batch.prompt_ids, batch.response_ids, reference=True, hidden=False)
    from trainer.forward import pack_rows, policy_forward

    with torch.no_grad():
        base_out = policy_forward(base.eval(), pack_rows(batch.prompt_ids, batch.response_ids))
    assert torch.allclose(ref.logprobs, base_out.logprobs, atol=1e-5)
    merged = params(eng)
    assert set(merged) == {n for n, _ in base.named_parameters()}
    # the merged weights equal peft's own merge of the same adapters
    ref_model = copy.deepcopy(eng.lm).merge_and_unload()
    for k, v in ref_model.named_parameters():
        assert torch.allclose(merged[k], v.detach().float(), atol=1e-6), k
    assert any(not torch.equal(merged[k], p.detach()) for k, p in base.named_parameters())
    assert isinstance(eng.lm, peft.PeftModel)


def test_warmup_learning_rate():
    eng = make_actor(0, warmup_steps=4, lr=1e-3)
    assert [eng.lr_at(s) for s in range(6)] == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])
    eng._set_lr(eng.lr_at(0))
    assert eng._base_optimizer().param_groups[0]["lr"] == pytest.approx(2.5e-4)


def test_gradient_checkpointing_gives_the_same_update(batch, stage0_reference):
    want, _ = stage0_reference
    eng = make_actor(0, gradient_checkpointing=True, **SGD_LIKE)
    train(eng, batch, 2)
    assert_same_params(params(eng), want)


def test_hidden_layer_checked_before_compute():
    with pytest.raises(ValueError, match="out of range for a 2-layer model"):
        PPOActor(tiny_qwen2(layers=2), TrainerConfig(zero_stage=0, mini_batch_rows=8, micro_batch_rows=2),
                 model_cfg=ModelConfig(path="tiny:x", hidden_layer=-12))


def test_split_even():
    assert split_even(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert split_even([1], 3) == [[1], [], []]


@pytest.mark.parametrize("name", ["grpo", "bipace_q"])
def test_hidden_states_feed_the_estimator_registry(name, batch):
    """The old-log-prob pass yields what compute_advantages needs; the update consumes its advantages."""
    from estimators import EstimatorConfig, compute_advantages

    eng = make_actor(0, use_kl_loss=False)
    old = eng.compute_logprobs(batch.prompt_ids, batch.response_ids)
    rb = copy.copy(batch)
    rb.reward = torch.tensor([10.0 if i % 3 == 0 else 0.0 for i in range(len(batch))])
    result = compute_advantages(rb.to_step_batch(hidden=old.hidden), EstimatorConfig(name=name, epsilon=0.05))
    assert result.advantages.shape == (len(batch),)
    m = eng.update(batch.prompt_ids, batch.response_ids, result.advantages, old.logprobs)
    assert m["loss/optimizer_steps"] >= 1.0


def test_single_process_rendezvous_is_not_inherited():
    """Subprocesses (other tests, the rollout's workers) must not inherit this process's MASTER_PORT."""
    import os

    make_actor(0)
    assert "MASTER_PORT" not in os.environ and "RANK" not in os.environ


_FAILED_START_SCRIPT = """
import os, deepspeed
from trainer.ppo_actor import init_distributed
def broken(**kw):
    raise RuntimeError("no rendezvous")
deepspeed.init_distributed = broken  # the rendezvous fails (the ImportError of a half-built op, a refused port)
try:
    init_distributed("cpu")
except RuntimeError as e:
    print("raised:", e)
print("left:", sorted(k for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE") if k in os.environ))
"""


def test_a_failed_rendezvous_leaves_no_address_behind():
    """Seen in a fresh clone: a start that failed inside DeepSpeed left MASTER_PORT set, and every later start of the
    same process (and its subprocesses) tried to join that dead rendezvous."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    res = subprocess.run([sys.executable, "-c", _FAILED_START_SCRIPT], cwd=Path(__file__).resolve().parents[2],
                         env=dict(env, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=300)
    assert "raised: no rendezvous" in res.stdout and "left: []" in res.stdout, res.stdout + res.stderr


_RESTART_SCRIPT = """
import torch, torch.distributed as dist
from tests.trainer.helpers import tiny_qwen2
from trainer.config import ModelConfig, TrainerConfig
from trainer.ppo_actor import PPOActor
for attempt in range(2):
    PPOActor(tiny_qwen2(layers=2), TrainerConfig(zero_stage=2), model_cfg=ModelConfig(path="tiny:t", hidden_layer=-1),
             device="cpu")
    dist.destroy_process_group()  # what an in-process vLLM engine does when it shuts down
print("two actors")
"""


def test_actor_after_the_process_group_was_destroyed():
    """A second actor in a process whose default group was destroyed and re-created (vLLM in-process, or a
    script that trains twice) must not fail on DeepSpeed's cached clone of the old world group."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", _RESTART_SCRIPT], cwd=root, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "two actors" in out.stdout


def test_each_venv_builds_the_op_in_its_own_folder(tmp_path, monkeypatch):
    """No TORCH_EXTENSIONS_DIR: this venv's own folder; one the user set: kept; one inherited from a parent process that
    chose its own venv's folder: replaced by this venv's."""
    import os

    from trainer.ppo_actor import _AUTO_EXT_FLAG, use_venv_extensions_dir, venv_extensions_dir

    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    monkeypatch.delenv(_AUTO_EXT_FLAG, raising=False)
    mine = venv_extensions_dir()
    assert use_venv_extensions_dir() == mine and os.environ["TORCH_EXTENSIONS_DIR"] == str(mine)
    assert mine.parent.name == "torch_extensions" and mine.name.startswith(Path(sys.prefix).name.lstrip(".") + "-")
    assert venv_extensions_dir("/elsewhere/.venv-vllm") != mine  # another venv, another folder
    # a venv reached through a link builds with include paths under the link: its own folder, or the two paths
    # would rebuild the op in turn
    (tmp_path / "clone").mkdir()
    (tmp_path / "clone" / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    assert venv_extensions_dir(str(tmp_path / "clone" / ".venv")) != venv_extensions_dir(sys.prefix)
    assert venv_extensions_dir(sys.prefix + "/") == venv_extensions_dir(sys.prefix)  # the same path, spelt otherwise
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))  # the user's choice
    assert use_venv_extensions_dir() == tmp_path
    other = str(venv_extensions_dir("/elsewhere/.venv-vllm"))  # what a parent of another venv chose
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", other)
    monkeypatch.setenv(_AUTO_EXT_FLAG, other)
    assert use_venv_extensions_dir() == mine


def _lock(folder: Path, age_s: float) -> Path:
    from experiments.fault_injection import aged_lock

    return aged_lock(folder, age_s)


def _built_op(tmp_path: Path) -> Path:
    """A copy of this venv's built ``deepspeed_shm_comm`` folder (built first if needed), in ``tmp_path``."""
    import shutil
    import subprocess

    from common.procs import child_env
    from trainer.ppo_actor import built_op_is_current, venv_extensions_dir

    mine = venv_extensions_dir() / "deepspeed_shm_comm"
    if not built_op_is_current("deepspeed_shm_comm", mine):
        env = dict(child_env(), TORCH_EXTENSIONS_DIR=str(venv_extensions_dir()))
        subprocess.run([sys.executable, "-c", "from trainer.ppo_actor import init_distributed; "
                        "init_distributed('cpu')"], cwd=REPO, env=env, capture_output=True, timeout=600, check=True)
    copy = tmp_path / "ext" / "deepspeed_shm_comm"
    shutil.copytree(mine, copy, ignore=shutil.ignore_patterns("lock"))  # mtimes kept: ninja sees it built
    return copy


REPO = Path(__file__).resolve().parents[2]


def test_a_build_lock_on_an_op_that_is_built_is_not_waited_on(tmp_path):
    """A lock left by a start killed while it checked the (built) op: the next start loads the op at once, says
    which lock it did not wait on and that only that file is to be removed, and leaves the lock alone."""
    import subprocess

    from common.procs import child_env

    folder = _built_op(tmp_path)
    lock = _lock(folder, age_s=20.0)  # a lock a live build could hold: torch would wait on it forever
    env = dict(child_env(), TORCH_EXTENSIONS_DIR=str(folder.parent))
    res = subprocess.run([sys.executable, "-c", "from trainer.ppo_actor import init_distributed; "
                          "print(init_distributed('cpu'))"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0 and "(0, 1, 0)" in res.stdout, res.stderr[-2000:]
    import re

    assert re.search(re.escape(str(lock)) + r" \(\d+ s old\) is not waited on", res.stderr), res.stderr
    assert f"rm {lock})" in res.stderr
    assert res.stderr.count("is not waited on") == 1 and lock.exists()


def test_a_build_lock_is_waited_on_with_a_line_saying_so_then_refused(tmp_path, monkeypatch, capsys):
    """An op that is not built yet: a lock that a running build removes is waited out, with one line naming the
    lock, its age and the file to remove; a lock older than the bound raises ``BuildLockError`` naming that file."""
    import threading
    import time

    from trainer.ppo_actor import BuildLockError, wait_for_build_lock

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    wait_for_build_lock()  # no lock: returns at once
    lock = _lock(tmp_path / "deepspeed_shm_comm", age_s=5.0)
    threading.Timer(0.3, lock.unlink).start()  # a build that finishes
    t = time.perf_counter()
    wait_for_build_lock(poll_s=0.05)
    assert 0.2 < time.perf_counter() - t and not lock.exists()
    err = capsys.readouterr().err
    assert err.count("waiting for DeepSpeed's op deepspeed_shm_comm") == 1
    assert f"build lock {lock} is 5 s old" in err and f"remove the lock file only (rm {lock})" in err
    _lock(lock.parent, age_s=0.0)  # a build that never finishes: refused once the lock is older than the bound
    with pytest.raises(BuildLockError, match=f"Remove the lock file only \\(rm {lock}; not its folder"):
        wait_for_build_lock(max_age_s=0.3, poll_s=0.05)


def test_a_stale_build_lock_stops_train_with_exit_2_naming_the_lock_file(tmp_path):
    """``experiments.train`` on a venv whose op is locked for longer than a build takes: one message, exit 2."""
    import subprocess

    from common.procs import child_env
    from tests.experiments.test_train_cli import FAST

    lock = _lock(tmp_path / "ext" / "deepspeed_shm_comm", age_s=3600.0)
    env = dict(child_env(), TORCH_EXTENSIONS_DIR=str(tmp_path / "ext"))
    res = subprocess.run([sys.executable, "-m", "experiments.train", *FAST, f"output_dir={tmp_path / 'run'}"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr[-3000:]
    assert f"build lock {lock} is 60." in res.stderr and f"(rm {lock}; not its folder" in res.stderr
    assert "Traceback" not in res.stderr and lock.exists()


def test_collective_timeout_is_30_minutes_a_config_key_and_the_environment_overrides(monkeypatch):
    """A frozen rank holds the others for 30 minutes (was 120), the config key sets it, the environment variable
    overrides both; DeepSpeed's 10-minute default is shorter than a rank may wait for the others' evaluation share."""
    import datetime

    from trainer.config import ConfigError, TrainerConfig
    from trainer.ppo_actor import TIMEOUT_ENV, collective_timeout

    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    assert TrainerConfig().collective_timeout_min == 30.0
    assert collective_timeout() == datetime.timedelta(minutes=30)
    assert collective_timeout(45) == datetime.timedelta(minutes=45)
    monkeypatch.setenv(TIMEOUT_ENV, "12.5")
    assert collective_timeout() == collective_timeout(45) == datetime.timedelta(minutes=12.5)
    for bad in ("0", "-5", "soon", "inf"):
        monkeypatch.setenv(TIMEOUT_ENV, bad)
        with pytest.raises(ValueError, match=TIMEOUT_ENV):
            collective_timeout()
    for bad in (0, -1, 1e9, float("nan")):
        with pytest.raises(ConfigError, match=r"trainer\.collective_timeout_min=.* raise it when one rank's "
                                              "evaluation share"):
            TrainerConfig(collective_timeout_min=bad).validate()


_TIMEOUT_SCRIPT = """
import deepspeed
from tests.trainer.helpers import tiny_qwen2
from trainer.config import TrainerConfig
from trainer.ppo_actor import PPOActor
def record(**kw):
    print("timeout:", kw["timeout"].total_seconds())
    raise RuntimeError("stop here")
deepspeed.init_distributed = record
try:
    PPOActor(tiny_qwen2(layers=1), TrainerConfig(collective_timeout_min=7.5))
except RuntimeError:
    pass
"""


def test_the_process_group_gets_the_configured_collective_timeout():
    import os
    import subprocess
    import sys

    from trainer.ppo_actor import TIMEOUT_ENV

    env = {k: v for k, v in os.environ.items()
           if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", TIMEOUT_ENV)}
    res = subprocess.run([sys.executable, "-c", _TIMEOUT_SCRIPT], cwd=Path(__file__).resolve().parents[2],
                         env=dict(env, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=300)
    assert "timeout: 450.0" in res.stdout, res.stdout + res.stderr


def test_optimizer_threads_for_an_offloaded_optimizer():
    """torchrun gives each rank one OpenMP thread; an offloaded optimizer (DeepSpeed's CPU Adam on GPU) gets the
    node's cores shared among its ranks, or the configured count."""
    from trainer.ppo_actor import optimizer_threads

    assert optimizer_threads(0, offload=True, device="cuda", cores=64, local_ranks=4) == 16
    assert optimizer_threads(0, offload=True, device="cuda", cores=3, local_ranks=4) == 1
    assert optimizer_threads(6, offload=True, device="cuda", cores=64, local_ranks=4) == 6
    assert optimizer_threads(6, offload=True, device="cpu") == 6
    assert optimizer_threads(0, offload=True, device="cpu") is None  # a CPU run keeps its own thread setting
    assert optimizer_threads(6, offload=False, device="cuda") is None


def test_offloaded_optimizer_steps_on_the_configured_threads():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # as torchrun leaves a rank
        eng = make_actor(1, offload_optimizer=True, optimizer_threads=2, use_kl_loss=False)
        assert torch.get_num_threads() == 2
        b = make_rollout_batch(n=4, seed=3)
        old = eng.compute_logprobs(b.prompt_ids, b.response_ids, hidden=False)
        m = eng.update(b.prompt_ids, b.response_ids, advantages(4, 0), old.logprobs)
        assert m["loss/optimizer_steps"] == 1.0
    finally:
        torch.set_num_threads(before)
