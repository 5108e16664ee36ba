"""``integrations/verl_agent/bipace.patch``: the change to verl-agent that feeds ``estimators.verl_agent``. The layer
lookup it adds is run on a tiny Qwen2 (transformers) against ``output_hidden_states``.

Without verl-agent (CI): the patch is a well-formed unified diff of the five expected files, each hunk's line counts
match its header, the pre-image blob ids are those of verl-agent at the pinned commit, and the adapter call it adds
uses only keywords ``compute_bipace_outcome_advantage`` accepts. With a checkout of verl-agent at that commit in
``BIPACE_VERL_AGENT_SRC``: the patch applies (``git apply --check``), the patched Python files compile and their
blob ids are the patch's post-image ids.
"""
from __future__ import annotations

import inspect
import os
import py_compile
import re
import shutil
import subprocess
from pathlib import Path

import pytest

PATCH = Path(__file__).resolve().parents[1] / "integrations" / "verl_agent" / "bipace.patch"
PINNED = "796ed310287fa605c9292a0fce07a86d79fde05e"
# blob ids of the five files at PINNED (git rev-parse --short=7 PINNED:path)
FILES = {
    "agent_system/multi_turn_rollout/rollout_loop.py": "d79e678",
    "verl/trainer/config/ppo_trainer.yaml": "d0f68ba",
    "verl/trainer/ppo/ray_trainer.py": "d85e23a",
    "verl/workers/actor/dp_actor.py": "853b45e",
    "verl/workers/fsdp_workers.py": "7d9b8b4",
}
HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _files() -> dict[str, dict]:
    """path -> {"index": pre-image blob id, "hunks": [(old_start, old_len, new_start, new_len, lines)]}."""
    out: dict[str, dict] = {}
    cur = None
    lines = PATCH.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            a, b = line.split()[2:4]
            assert a[2:] == b[2:], line
            cur = out.setdefault(a[2:], {"index": None, "hunks": []})
        elif line.startswith("index "):
            cur["index"] = line.split()[1].split("..")[0]
        elif line.startswith("@@"):
            m = HUNK.match(line)
            assert m, line
            o0, ol, n0, nl = (int(g) if g is not None else 1 for g in m.groups())
            body = []
            i += 1
            while i < len(lines) and not lines[i].startswith(("@@", "diff --git ")):
                body.append(lines[i])
                i += 1
            cur["hunks"].append((o0, ol, n0, nl, body))
            continue
        i += 1
    return out


def test_the_patch_touches_the_five_files_at_the_pinned_commit():
    files = _files()
    assert sorted(files) == sorted(FILES)
    for path, info in files.items():
        assert info["index"] == FILES[path], path
        assert info["hunks"], path


def test_every_hunk_is_well_formed():
    added = removed = 0
    for path, info in _files().items():
        shift = 0
        for o0, ol, n0, nl, body in info["hunks"]:
            assert all(ln[:1] in (" ", "+", "-") or ln == "\\ No newline at end of file" for ln in body), path
            old = sum(ln[:1] in (" ", "-") for ln in body)
            new = sum(ln[:1] in (" ", "+") for ln in body)
            assert (old, new) == (ol, nl), (path, o0)
            assert n0 == o0 + shift, (path, o0)  # hunks in order, each new start shifted by those before it
            shift += nl - ol
            added += sum(ln.startswith("+") for ln in body)
            removed += sum(ln.startswith("-") for ln in body)
    assert 40 <= added <= 90 and removed <= 10  # a small change, not a fork


def _added(path: str) -> str:
    return "\n".join(ln[1:] for *_, body in _files()[path]["hunks"] for ln in body if ln.startswith("+"))


def test_the_adapter_call_uses_keywords_the_adapter_accepts():
    from estimators.verl_agent import VERL_AGENT_ESTIMATORS, compute_bipace_outcome_advantage

    added = _added("verl/trainer/ppo/ray_trainer.py")
    call = added[added.index("compute_bipace_outcome_advantage("):]
    call = call[:call.index("**kwargs")]
    keywords = set(re.findall(r"(\w+)=", call))
    accepted = set(inspect.signature(compute_bipace_outcome_advantage).parameters)
    assert keywords and keywords <= accepted, keywords - accepted
    for name in VERL_AGENT_ESTIMATORS[1:]:
        assert f"'{name}'" in added
    yaml = _added("verl/trainer/config/ppo_trainer.yaml")
    bipace_keys = re.findall(r"^    (\w+):", yaml.split("bipace:", 1)[1], re.M)
    assert bipace_keys and set(bipace_keys) <= accepted
    assert "bipace_hidden_layer:" in yaml
    assert "output_hidden_states=True" not in PATCH.read_text()  # one layer by a hook, not every layer


def test_callers_that_unpack_two_values_are_untouched():
    """compute_log_prob and _forward_micro_batch keep their two return values; the state goes by an attribute."""
    hunks = _files()["verl/workers/actor/dp_actor.py"]["hunks"]
    assert not any(ln.startswith("-") for *_, body in hunks for ln in body)  # nothing in dp_actor.py is replaced
    text = _added("verl/workers/actor/dp_actor.py")
    returns = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("return ")]
    assert len(returns) == 1 and "layers[pos - 1]" in returns[0]  # the layer lookup's; no new return value
    assert "register_forward_hook" in text and "self.bipace_hidden" in text
    fsdp = _added("verl/workers/fsdp_workers.py")
    assert "self.actor.compute_log_prob" not in fsdp and "ref_policy" not in fsdp  # both calls unpack two, unchanged


SRC = os.environ.get("BIPACE_VERL_AGENT_SRC")


@pytest.mark.skipif(not SRC, reason="BIPACE_VERL_AGENT_SRC is not set: point it to a git checkout of "
                    f"langfengQ/verl-agent at {PINNED[:7]} to check that the patch applies")
def test_the_patch_applies_to_the_pinned_checkout(tmp_path):
    src = Path(SRC)
    subprocess.run(["git", "apply", "--check", str(PATCH)], cwd=src, check=True)
    for path in FILES:  # the patched files compile (a copy, the checkout is left alone)
        dst = tmp_path / path
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src / path, dst)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "apply", str(PATCH)], cwd=tmp_path, check=True)
    post = {m.group(2): m.group(1) for m in re.finditer(r"^index [0-9a-f]+\.\.([0-9a-f]+) \d+\n--- a/(\S+)",
                                                         PATCH.read_text(), re.M)}
    for path in FILES:
        if path.endswith(".py"):
            py_compile.compile(str(tmp_path / path), doraise=True)
        blob = subprocess.run(["git", "hash-object", path], cwd=tmp_path, check=True, capture_output=True,
                              text=True).stdout.strip()
        assert blob.startswith(post[path]), f"{path}: the patch's post-image id {post[path]} is not the result's {blob}"


def _added_function(path: str, name: str) -> str:
    """A module-level function the patch adds, as source."""
    hunk = next(body for *_, body in _files()[path]["hunks"] if any(ln.startswith(f"+def {name}(") for ln in body))
    lines = [ln[1:] for ln in hunk if ln.startswith("+")]
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"def {name}("))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].strip() and not lines[i].startswith(" ")),
               len(lines))
    return "\n".join(lines[start:end])


def test_the_hooked_module_gives_hugging_faces_hidden_states_index():
    """The patch's layer lookup on a tiny Qwen2: the hooked module's output is ``hidden_states[k]``."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    namespace = {"nn": torch.nn}
    exec(_added_function("verl/workers/actor/dp_actor.py", "_bipace_layer_module"), namespace)
    lookup = namespace["_bipace_layer_module"]
    cfg = transformers.Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=4,
                                   num_attention_heads=2, num_key_value_heads=1)
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    ids = torch.randint(0, 64, (2, 5))
    with torch.no_grad():
        want = model(input_ids=ids, output_hidden_states=True).hidden_states
    for k in (-1, -2, -4, 1, 3, 4):
        seen = []
        handle = lookup(model, k).register_forward_hook(
            lambda _m, _i, out, seen=seen: seen.append(out[0] if isinstance(out, (tuple, list)) else out))
        with torch.no_grad():
            model(input_ids=ids)
        handle.remove()
        assert len(seen) == 1, k
        torch.testing.assert_close(seen[0], want[k], msg=f"bipace_hidden_layer={k}")
    for k in (0, -5, 5):
        with pytest.raises(ValueError, match="bipace_hidden_layer"):
            lookup(model, k)
