"""The hidden-state geometry report (analysis.geometry), the multi-layer capture (analysis.hidden_capture) and
``python -m experiments.geometry`` end to end on a tiny model.

The fixture batch has two prompt groups and hand-built hidden states at known cosine distances, so every
number of the report (singleton rates, pair purity, PACE row mix, the epsilon match) is computed by hand in
the comments below.
"""
from __future__ import annotations

import json
import math

import pytest
import torch

from analysis.geometry import GeometryConfig, geometry_report, match_epsilon, pair_counts, paper_targets
from estimators import StepBatch
from estimators.diagnostics import pair_purity

TINY = "tiny:layers=2,hidden=64,heads=2"  # also used by tests/experiments (built once into the cache)

# ---------------------------------------------------------------------------------------------- fixture
# rows (group, traj, step): true state, anchor obs, hidden direction, action
#   r0 (0,0,0) A "start"   e1          go
#   r1 (0,0,1) B "nothing" e2          take
#   r2 (0,0,2) C "nothing" e3          go
#   r3 (0,1,0) A "start"   e1          take
#   r4 (0,1,1) B "got b"   v1: cos(v1, e2) = 0.99  (d = 0.01)           take
#   r5 (0,1,2) B "nothing" v2: cos(v2, e2) = 0.97, orthogonal to v1 - e2  go
#   r6 (1,0,0) D "start1"  e1 (the same vector as r0: clusters never span prompt groups)  a
#   r7 (1,0,1) E "x"       e4          a
#   r8 (1,1,0) D "start1"  e1          a
#   r9 (1,1,1) F "x"       e5          (no action tag: key <invalid>)
# Greedy mean-centroid pass, group 0 in order r0 r1 r2 r3 r4 r5:
#   eps = 0     : {r0 r3} {r1} {r2} {r4} {r5}
#   eps >= 0.01 : r4 joins r1 (d = 0.01); centroid c = (e2 + v1)/sqrt(3.98);
#                 d(v2, c) = 1 - (0.97 + 0.97*0.99)/sqrt(3.98) = 0.03242...
#   eps >= 0.0325: r5 joins too -> {r0 r3} {r1 r4 r5} {r2}: exactly the true states.
D_V2 = 1 - (0.97 + 0.97 * 0.99) / math.sqrt(3.98)


def _unit(i: int, d: int = 8) -> torch.Tensor:
    v = torch.zeros(d, dtype=torch.float64)
    v[i] = 1.0
    return v


def fixture_batch(hidden_b: bool = False) -> tuple[StepBatch, dict]:
    e = [_unit(i) for i in range(8)]
    v1 = 0.99 * e[1] + math.sqrt(1 - 0.99**2) * e[5]
    v2 = 0.97 * e[1] + math.sqrt(1 - 0.97**2) * e[6]
    h = torch.stack([e[0], e[1], e[2], e[0], v1, v2, e[0], e[3], e[0], e[4]]).float()  # (N=10, D=8)
    tag = "<think>t</think><action>{}</action>"
    batch = StepBatch(
        group_id=torch.tensor([0, 0, 0, 0, 0, 0, 1, 1, 1, 1]),
        traj_id=torch.tensor([0, 0, 0, 1, 1, 1, 0, 0, 1, 1]),
        step=torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 0, 1]),
        reward=torch.zeros(10),
        valid=torch.tensor([True] * 9 + [False]),
        anchor_obs=["start", "nothing", "nothing", "start", "got b", "nothing", "start1", "x", "start1", "x"],
        response_text=[tag.format(a) for a in ("go", "take", "go", "take", "take", "go", "a", "a", "a")]
        + ["no tags here"],
        state_key=[("s", "A"), ("s", "B"), ("s", "C"), ("s", "A"), ("s", "B"), ("s", "B"),
                   ("s", "D"), ("s", "E"), ("s", "D"), ("s", "F")],
    )
    hidden = {-8: h}
    if hidden_b:  # every row of a prompt group on one vector: everything merges at eps = 0
        hidden[-4] = torch.stack([e[7] if g == 0 else e[6] for g in batch.group_id.tolist()]).float()
    return batch, hidden


GRID = (0.0, 0.02, 0.05)


@pytest.fixture(scope="module")
def report():
    batch, hidden = fixture_batch(hidden_b=True)
    return geometry_report(batch, hidden, GeometryConfig(grid=GRID), targets={"t40": 0.40, "t30": 0.30, "t10": 0.10})


# ---------------------------------------------------------------------------------------------- exact values
def test_anchor_row_hand_values(report):
    r = report.row("anchor")
    # anchor groups: start{r0 r3} nothing{r1 r2 r5} got b{r4} | start1{r6 r8} x{r7 r9}
    assert r["singleton_rate"] == pytest.approx(0.1)
    assert (r["groups"], r["size_mean"], r["size_max"]) == (5, 2.0, 3)
    # same-group pairs 1+3+0+1+1 = 6; same-state pairs A1 + B3 + D1 = 5; both: (r0,r3) (r1,r5) (r6,r8) = 3
    assert (r["pairs_group"], r["pairs_state"], r["pairs_both"]) == (6, 5, 3)
    assert r["precision"] == pytest.approx(0.5) and r["recall"] == pytest.approx(0.6)
    assert r["mixed_frac"] == pytest.approx(0.5)  # "nothing" holds B and C, "x" holds E and F
    # PACE: r2, r5 share "go" in a 2-key group -> PACE; r4 singleton; the rest fall back
    assert r["pace_frac_pace"] == pytest.approx(0.2)
    assert r["pace_frac_fallback"] == pytest.approx(0.7)
    assert r["pace_frac_singleton"] == pytest.approx(0.1)
    assert r["action_parse_rate"] == pytest.approx(0.9)


def test_true_state_row_is_the_floor(report):
    r = report.row("state")
    assert r["singleton_rate"] == pytest.approx(0.3)  # C, E, F
    assert r["precision"] == 1.0 and r["recall"] == 1.0 and r["mixed_frac"] == 0.0


@pytest.mark.parametrize("eps,single,groups,prec,rec,pace,fallback,multikey,keys", [
    # eps 0: {r0 r3} {r6 r8} and six singletons; {r0 r3} has keys go/take (no peers), {r6 r8} one key
    (0.0, 0.6, 8, 1.0, 0.4, 0.0, 0.4, 1 / 2, 3 / 2),
    # eps 0.02: {r1 r4} joins (both "take": one key -> fallback)
    (0.02, 0.4, 7, 1.0, 0.6, 0.0, 0.6, 1 / 3, 4 / 3),
    # eps 0.05: {r1 r4 r5} = take, take, go -> r1, r4 PACE, r5 fallback; partition equals the true states
    (0.05, 0.3, 6, 1.0, 1.0, 0.2, 0.5, 2 / 3, 5 / 3),
])
def test_hidden_rows_hand_values(report, eps, single, groups, prec, rec, pace, fallback, multikey, keys):
    r = report.row("hidden", -8, eps)
    assert r["singleton_rate"] == pytest.approx(single)
    assert r["groups"] == groups
    assert r["precision"] == pytest.approx(prec) and r["recall"] == pytest.approx(rec)
    assert r["pace_frac_pace"] == pytest.approx(pace)
    assert r["pace_frac_fallback"] == pytest.approx(fallback)
    assert r["pace_frac_singleton"] == pytest.approx(single)
    assert r["pace_multikey_cluster_frac"] == pytest.approx(multikey)
    assert r["pace_keys_per_cluster"] == pytest.approx(keys)
    assert r["mixed_frac"] == 0.0


def test_second_layer_merges_everything(report):
    r = report.row("hidden", -4, 0.0)
    # one cluster per prompt group: 15 + 6 = 21 same-group pairs, 5 of them one state
    assert r["singleton_rate"] == 0.0 and r["groups"] == 2
    assert r["precision"] == pytest.approx(5 / 21) and r["recall"] == 1.0 and r["mixed_frac"] == 1.0
    assert report.layers() == [-8, -4]


def test_epsilon_match(report):
    m = {(x["layer"], x["target_name"]): x for x in report.matches}
    t40 = m[(-8, "t40")]
    assert t40["epsilon"] == pytest.approx(0.01, abs=1.1e-3) and t40["row"]["singleton_rate"] == pytest.approx(0.4)
    t30 = m[(-8, "t30")]
    assert t30["epsilon"] == pytest.approx(D_V2, abs=1.1e-3)
    assert t30["row"]["singleton_rate"] == pytest.approx(0.3) and t30["row"]["recall"] == pytest.approx(1.0)
    assert m[(-8, "t10")]["epsilon"] is None and m[(-8, "t10")]["row"] is None  # 0.3 is the floor here
    assert m[(-4, "t10")]["epsilon"] == 0.0  # already 0% singletons at eps = 0


def test_epsilon_match_tolerance():
    batch, hidden = fixture_batch()
    fine = geometry_report(batch, hidden, GeometryConfig(grid=GRID), targets={"t30": 0.30}, match_tol=1e-6)
    (m,) = fine.matches
    assert fine.meta["match_tol"] == 1e-6
    # the smallest epsilon that merges r5, to the tolerance (plus float32 rounding of the distance)
    assert m["epsilon"] == pytest.approx(D_V2, abs=3e-6)
    assert "| -8 | t30 | 30.0% | 0.0324 |" in fine.markdown_matches()
    with pytest.raises(ValueError, match="match_tol=0.0 must be a positive"):
        geometry_report(batch, hidden, GeometryConfig(grid=GRID), targets={"t30": 0.30}, match_tol=0.0)


def test_pair_counts_agree_with_estimators_pair_purity():
    g = torch.randint(0, 5, (200,), generator=torch.Generator().manual_seed(0))
    s = torch.randint(0, 7, (200,), generator=torch.Generator().manual_seed(1))
    same_group, same_state, both = pair_counts(g, s)
    prec, rec = pair_purity(g, s)
    assert both / same_group == pytest.approx(prec) and both / same_state == pytest.approx(rec)


def test_report_outputs(report, tmp_path):
    paths = report.save(tmp_path)
    lines = paths["csv"].read_text().splitlines()
    assert lines[0].startswith("layer,grouping,epsilon,singleton_rate")
    assert len(lines) == 1 + 2 + 2 * len(GRID)  # anchor, state, two layers x grid
    data = json.loads(paths["json"].read_text())
    assert len(data["rows"]) == len(lines) - 1 and data["meta"]["distinct_states"] == 6
    md = report.markdown_table(-8)
    assert "| exact anchor obs | 10.0% |" in md and "| hidden eps=0.05 | 30.0% |" in md
    assert "t30" in report.markdown_matches()


def test_paper_targets():
    t = paper_targets("ALFWorld-v0", anchor_rate=0.5)
    assert t["paper hidden"] == pytest.approx(0.173)
    assert t["paper ratio"] == pytest.approx(0.5 * 0.173 / 0.342)
    assert paper_targets("WebShop-v0") == {}


# ---------------------------------------------------------------------------------------------- determinism
def test_row_order_and_repeat_do_not_change_the_report():
    batch, hidden = fixture_batch(hidden_b=True)
    a = geometry_report(batch, hidden, GeometryConfig(grid=GRID))
    perm = torch.randperm(len(batch), generator=torch.Generator().manual_seed(3))
    shuffled = batch.select(perm)
    b = geometry_report(shuffled, {k: v[perm] for k, v in hidden.items()}, GeometryConfig(grid=GRID))
    c = geometry_report(batch, hidden, GeometryConfig(grid=GRID))
    assert a.to_csv() == b.to_csv() == c.to_csv()


# ---------------------------------------------------------------------------------------------- bad input
def test_bad_input_messages():
    batch, hidden = fixture_batch()
    with pytest.raises(ValueError, match=r"hidden\[-8\] has 9 rows but the batch has 10"):
        geometry_report(batch, {-8: hidden[-8][:9]})
    with pytest.raises(ValueError, match="NaN/Inf at rows \\[2\\]"):
        h = hidden[-8].clone()
        h[2, 0] = float("nan")
        geometry_report(batch, {-8: h})
    with pytest.raises(ValueError, match=r"cosine distance in \[0, 2\]"):
        GeometryConfig(grid=(0.1, -0.5))
    with pytest.raises(ValueError, match="no hidden states"):
        geometry_report(batch, None)
    with pytest.raises(ValueError, match="fraction in"):
        match_epsilon(batch, hidden[-8], 1.5)


def test_batch_without_state_key_reports_nan_purity():
    batch, hidden = fixture_batch()
    batch.state_key = None
    rep = geometry_report(batch, hidden, GeometryConfig(grid=(0.0,)))
    assert [r["grouping"] for r in rep.rows] == ["anchor", "hidden"]
    assert math.isnan(rep.row("anchor")["precision"])


# ---------------------------------------------------------------------------------------------- capture
@pytest.fixture(scope="module")
def tiny_folder():
    from trainer.models import resolve_model_folder

    return resolve_model_folder(TINY)


def test_capture_equals_the_trainer_actor_pass(tiny_folder):
    """Prompt-only multi-layer capture == trainer.forward.policy_forward's hidden (prompt+response rows), per layer;
    and the rollout engine's prefill capture agrees with both."""
    from agents.engines import SamplingConfig
    from agents.engines.hf import HFEngine
    from analysis.hidden_capture import CapturingEngine, capture_prompt_states
    from trainer.forward import pack_rows, policy_forward

    hf = HFEngine(tiny_folder, dtype="float32", device="cpu")
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(5, 200, (n,), generator=g) for n in (7, 12, 3, 12, 9)]
    prompts[3] = prompts[1].clone()  # two identical prompts
    responses = [torch.randint(5, 200, (n,), generator=g) for n in (4, 1, 6, 2, 3)]
    layers = [-1, -2, -3]
    cap = capture_prompt_states(hf.model, prompts, layers, batch_size=2, pad_id=hf.pad_id)
    packed = pack_rows(prompts, responses, pad_id=hf.pad_id)
    eng = CapturingEngine(hf, layers)
    eng.generate([p.tolist() for p in prompts], SamplingConfig(max_tokens=3), seeds=list(range(5)))

    class _B:  # the two fields hidden_for reads
        prompt_ids = prompts
        group_id = torch.zeros(5, dtype=torch.long)
        step = torch.zeros(5, dtype=torch.long)

    pre, sources = eng.hidden_for(_B())
    assert sources == ["model"] * 5
    for layer in layers:
        with torch.no_grad():
            ref = policy_forward(hf.model, packed, hidden_layer=layer).hidden  # (N, D)
        assert cap[layer].shape == ref.shape
        torch.testing.assert_close(cap[layer], ref, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(pre[layer], ref, atol=1e-4, rtol=1e-4)
    assert not torch.equal(cap[-1], cap[-2])  # layers differ
    with pytest.raises(ValueError, match="out of range"):
        capture_prompt_states(hf.model, prompts, [-9])


def test_action_mix_is_a_function_of_the_seed():
    from analysis.hidden_capture import ActionMix

    mix = ActionMix(expert=0.5, random=0.25)
    seeds = list(range(4000))
    a = [mix.source(s) for s in seeds]
    assert a == [mix.source(s) for s in seeds]
    share = {k: a.count(k) / len(a) for k in ("expert", "random", "model")}
    assert share["expert"] == pytest.approx(0.5, abs=0.03) and share["random"] == pytest.approx(0.25, abs=0.03)
    with pytest.raises(ValueError, match="exceeds 1"):
        ActionMix(expert=0.8, random=0.3)


# ---------------------------------------------------------------------------------------------- the command
def _cli(tmp_path, name, *extra):
    from experiments.geometry import main

    out = tmp_path / name
    rc = main(["--model", TINY, "--env", "TextCraft-v0", "--groups", "2", "--group-size", "2", "--max-steps", "3",
               "--max-tokens", "6", "--layers", "-1,-2", "--eps", "0,0.05,0.2", "--seed", "1", "--no-plots",
               "--out", str(out), *extra])
    assert rc == 0
    return out


@pytest.mark.slow
def test_command_end_to_end_and_rereading(tmp_path, capsys):
    out = _cli(tmp_path, "a", "--expert-prob", "0.5")
    again = _cli(tmp_path, "b", "--expert-prob", "0.5")
    csv_a = (out / "geometry.csv").read_text()
    assert csv_a == (again / "geometry.csv").read_text()  # same seed, same numbers
    data = json.loads((out / "geometry.json").read_text())
    meta = data["meta"]
    assert meta["rows"] == 12 and meta["groups"] == 2  # P G T = 2 x 2 x 3, nothing wins in 3 steps
    assert meta["sources"]["expert"] > 0 and meta["sources"]["model"] > 0
    assert {r["layer"] for r in data["rows"] if r["grouping"] == "hidden"} == {-1, -2}
    assert any(m["target_name"] == "paper hidden" for m in data["matches"])
    report = (out / "report.md").read_text()
    assert "## Beside the paper" in report and "50.3%" in report and "### layer -2" in report
    # the saved rollouts give the same numbers without the model
    capsys.readouterr()
    from experiments.geometry import main

    rc = main(["--from", str(out), "--layers", "-1,-2", "--eps", "0,0.05,0.2", "--no-plots",
               "--out", str(tmp_path / "c")])
    assert rc == 0
    assert (tmp_path / "c" / "geometry.csv").read_text() == csv_a
    report = (tmp_path / "c" / "report.md").read_text()
    assert "Rollouts collected by: `python -m experiments.geometry --model" in report
    # a StepBatch file alone (its one layer) also works
    rc = main(["--batch", str(out / "rollouts" / "steps.pt"), "--env", "TextCraft-v0", "--eps", "0,0.05",
               "--out", str(tmp_path / "d")])
    assert rc == 0 and (tmp_path / "d" / "singleton_vs_eps.png").stat().st_size > 0


def test_command_user_errors(tmp_path, capsys):
    from experiments.geometry import main

    assert main(["--env", "TextCraft-v0"]) == 2
    assert "give --model and --env" in capsys.readouterr().err
    assert main(["--from", str(tmp_path / "nothing")]) == 2
    assert "no " in capsys.readouterr().err
    assert main(["--model", TINY, "--env", "TextCraft-v0", "--layers", "-1,x"]) == 2
    assert "layer 'x' is not an integer" in capsys.readouterr().err
