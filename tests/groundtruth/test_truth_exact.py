"""The truth of a training run is that of the run's return and its policy (issue: "make the truth exact"): γ and λ
from the estimator config, one parser for the env and the truth, every reachable cell scored, the ceiling."""
from __future__ import annotations

import numpy as np
import pytest

from common.config_checks import ConfigError
from groundtruth.live import probe_for
from groundtruth.policy import evaluate_policy


def _independent_values(mdp, pi, gamma, lam):
    """V_0, Q by a plain backward loop over outcomes, written apart from ``evaluate_policy``."""
    H, S, A = pi.shape
    V = np.zeros((H + 1, S))
    Q = np.zeros((H, S, A))
    m = mdp.malformed_action
    for t in range(H - 1, -1, -1):
        for s in range(S):
            for a in range(A):
                q = -lam if a == m else 0.0
                for p, ns, r, done, _ in mdp.outcomes(s, a):
                    q += p * (r + (0.0 if done else gamma * V[t + 1, ns]))
                Q[t, s, a] = q
            V[t, s] = pi[t, s] @ Q[t, s]
    return V, Q


def test_gamma_and_penalty_come_from_the_run_config():
    from trainer.config.io import load_config

    cfg = load_config("configs/cpu/finite_rooms_gt.yaml", ["estimator.gamma=0.8", "estimator.invalid_penalty=0.5",
                                                           "env.kwargs.alias=0.5"])
    probe = probe_for(cfg)
    assert probe.mdp.gamma == 0.8 and probe.mdp.invalid_penalty == 0.5
    rng = np.random.default_rng(0)
    mdp = probe.mdp
    pi = rng.dirichlet(np.ones(mdp.num_actions), size=(mdp.horizon, mdp.num_states))
    v = evaluate_policy(mdp, pi)
    V, Q = _independent_values(mdp, pi, 0.8, 0.5)
    np.testing.assert_allclose(v.Q, Q, atol=1e-10)
    np.testing.assert_allclose(v.V[:mdp.horizon], V[:mdp.horizon], atol=1e-10)
    default = probe_for(load_config("configs/cpu/finite_rooms_gt.yaml", ["env.kwargs.alias=0.5"])).mdp
    assert default.gamma == 0.95 and default.invalid_penalty == 0.1
    v_default = evaluate_policy(default, pi)
    assert np.abs(v_default.V[0] - v.V[0]).max() > 0.1  # another γ is another truth


def test_a_setting_the_mdp_cannot_honour_is_a_config_error(chain_mdp, small_rooms):
    with pytest.raises(ConfigError, match=r"estimator.invalid_penalty=0.3 .* no malformed action.*invalid_penalty: 0"):
        chain_mdp.with_returns(0.9, 0.3)
    assert chain_mdp.with_returns(0.9, 0.0).gamma == 0.9
    with pytest.raises(ConfigError, match=r"estimator.gamma=1.5"):
        small_rooms.with_returns(1.5, 0.1)
    assert small_rooms.with_returns(small_rooms.gamma, small_rooms.invalid_penalty) is small_rooms
    other = small_rooms.with_returns(0.5, 0.2)
    assert small_rooms.gamma != 0.5 and small_rooms.invalid_penalty == 0.1  # the original is untouched
    assert other.penalty[other.malformed_action] == 0.2 and other.penalty.sum() == 0.2



def _variants(a: str) -> list[str]:
    return [a, f"  {a}  ", a.upper(), a.replace(" ", "  "), a.replace(" ", "\t"), a.replace(" ", "\u00a0")]


def test_the_env_and_the_truth_parse_every_response_alike():
    """Whitespace runs, tabs, non-breaking spaces, case: what the env plays is what the truth's row takes."""
    import gymnasium as gym

    import envs  # noqa: F401
    from agents.projection import project
    from groundtruth.live import row_actions

    kw = {"surface": "none", "alias": 0.0, "n_locations": 4, "n_objects": 1, "n_tasks": 2, "max_steps": 4}
    env = gym.make("FiniteRooms-v0", **kw).unwrapped
    mdp = env.mdp
    texts = [v for a in mdp.actions if a != "<malformed>" for v in _variants(a)]
    texts += ["", "jump", "<malformed>", "go to", "go to fridge 1 now", "\x00"]
    responses = [f"<think>x</think><action>{t}</action>" for t in texts]
    projected = [project(r) for r in responses]
    rows = row_actions(mdp, [p.action for p in projected], [p.valid for p in projected])
    m = mdp.malformed_action
    named = 0
    for text, p, row in zip(texts, projected, rows):
        env.reset(seed=0, options={"task_index": 0})
        s0 = env._s
        _, _, _, _, info = env.step(p.action)
        j = mdp.action_of(p.action)
        assert (row == m) == (j is None)
        if j is None:  # the no-op: state unchanged, the "not understood" event
            assert info["noop"] and info["state_key"] == s0, text
        else:
            named += 1
            assert mdp.actions[row] == mdp.actions[j]
            outs = mdp.outcomes(s0, j)
            assert info["state_key"] in {o[1] for o in outs}, text
    assert named == 6 * (mdp.num_actions - 1)


def test_a_well_formed_response_naming_no_action_is_charged_as_the_estimators_charge_it(small_rooms):
    """Invalid rows are charged λ, well-formed rows naming nothing are not; the DP charges the no-action mass λ·q."""
    from groundtruth.onpolicy import exact_row_advantages

    mdp = small_rooms
    m, lam = mdp.malformed_action, mdp.invalid_penalty
    rng = np.random.default_rng(1)
    H, S, A = mdp.horizon, mdp.num_states, mdp.num_actions
    pi = rng.dirichlet(np.ones(A), size=(H, S))
    s0 = int(mdp.start_states[0])
    lp = np.log(pi[0, s0])[None].repeat(4, 0)
    step, state = np.zeros(4, int), np.full(4, s0)
    action = np.array([m, m, m, 0])
    invalid = np.array([True, False, False, False])  # q = 1/3
    t = exact_row_advantages(mdp, step, state, action, lp, fallback=pi, invalid=invalid)
    assert t.A[0] - t.A[1] == pytest.approx(-lam, abs=1e-12)
    assert t.A[1] == t.A[2]
    V, Q = _independent_values(mdp, pi, mdp.gamma, lam / 3)
    np.testing.assert_allclose(t.values.V[:H], V[:H], atol=1e-10)
    assert t.Q[1] == pytest.approx(mdp.gamma * V[1, s0], abs=1e-10)  # the no-op keeps the state, no charge
    assert t.Q[0] == pytest.approx(-lam + mdp.gamma * V[1, s0], abs=1e-10)
    np.testing.assert_allclose(t.A, t.Q - V[0, s0], atol=1e-10)
    old = exact_row_advantages(mdp, step, state, action, lp, fallback=pi)  # without flags: every no-op pays λ
    assert old.A[0] == old.A[1]
    with pytest.raises(ValueError, match="row 3 is invalid"):
        exact_row_advantages(mdp, step, state, action, lp, fallback=pi, invalid=np.array([0, 0, 0, 1], bool))


# ---------------------------------------------------------------------------------------------- every reachable cell
PLAIN = {"surface": "none", "alias": 0.0, "n_locations": 4, "n_objects": 1, "n_tasks": 2, "max_steps": 6}


@pytest.fixture(scope="module")
def plain_rollout(tiny_lm):
    """The expert plays every slot of a deterministic-surface world (equal states, equal observations)."""
    import gymnasium as gym

    from agents.engines import SamplingConfig
    from agents.rollout import Agent, collect, prompt_config_for
    from envs.pool import EnvPool, Task
    from tests.agents.rollout_helpers import ExpertEngine

    _, tok = tiny_lm
    mdp = gym.make("FiniteRooms-v0", **PLAIN).unwrapped.mdp
    pc = prompt_config_for(tok, 2048, 2)
    with EnvPool("FiniteRooms-v0", num_envs=4, mode="inline", env_kwargs=PLAIN) as pool:
        batch, _ = collect(Agent(pool=pool, engine=ExpertEngine(tok, pool), tokenizer=tok, prompt_config=pc,
                                 max_prompt_tokens=2048), [Task("train", 0, 1), Task("train", 1, 2)], group_size=2,
                           sampling=SamplingConfig(temperature=1.0, max_tokens=12), seed=0)
    return mdp, batch, pc


def test_reachable_cells_are_those_some_action_sequence_reaches(small_rooms):
    from groundtruth.cells import history_nodes, reachable_cells

    reach = reachable_cells(small_rooms)
    frontier = {int(s) for s in small_rooms.start_states}
    for t in range(small_rooms.horizon):  # plain set-based breadth-first search
        assert set(np.flatnonzero(reach[t]).tolist()) == frontier
        frontier = {ns for s in frontier for a in range(small_rooms.num_actions)
                    for _p, ns, _r, done, _e in small_rooms.outcomes(s, a) if not done}
    nodes = history_nodes(small_rooms, 0)
    np.testing.assert_array_equal(nodes, reach.sum(1))  # without history a node is a cell
    assert (history_nodes(small_rooms, 2) >= nodes).all()


def test_every_reachable_cell_is_scored_at_the_prompt_the_rollout_shows(tiny_lm, plain_rollout):
    """On a deterministic surface the canonical prompt of a start cell, and of a cell whose arrival is unique, is
    the very prompt the rollout encoded; its distribution is the scored one of that prompt and the thought."""
    from groundtruth.cells import canonical_thought, cell_policy, reachable_cells
    from groundtruth.live import row_contexts
    from groundtruth.onpolicy import action_token_ids, row_distributions, score_actions

    model, tok = tiny_lm
    mdp, batch, pc = plain_rollout
    thought = canonical_thought(batch.response_text)
    assert thought == "<think>I follow the plan.</think>"
    cp = cell_policy(mdp, model, tok, env_name="FiniteRooms-v0", prompt_config=pc, max_prompt_tokens=2048,
                     thought=thought, pad_id=tok.pad_token_id or 0)
    np.testing.assert_array_equal(cp.reachable, reachable_cells(mdp))
    assert cp.prompts == cp.reachable.sum() == len(cp.prompt_ids)
    np.testing.assert_allclose(cp.pi.sum(-1), 1.0)
    step, state = batch.step.numpy(), np.asarray(batch.state_key, dtype=np.int64)
    # arrivals at step 1: (state, action) pairs of step 0 leading to each state
    arrivals: dict[int, set] = {}
    for s in mdp.start_states:
        for a in range(mdp.num_actions):
            for _p, ns, _r, done, _e in mdp.outcomes(int(s), a):
                if not done:
                    arrivals.setdefault(ns, set()).add((int(s), a))
    checked = 0
    for i in range(len(batch)):
        t, s = int(step[i]), int(state[i])
        if t == 0 or (t == 1 and len(arrivals[s]) == 1):
            assert cp.prompt_ids[(t, s)] == batch.prompt_ids[i].tolist()
            ctx = row_contexts(tok, [batch.prompt_ids[i]], [batch.response_text[i]])
            lp = score_actions(model, ctx, action_token_ids(tok, mdp), pad_id=tok.pad_token_id or 0)
            np.testing.assert_allclose(cp.pi[t, s], row_distributions(mdp, lp)[0], atol=1e-6)
            checked += 1
    assert checked >= 4


def test_bad_fill_settings_are_refused_before_any_scoring(tiny_lm, plain_rollout):
    from groundtruth.cells import cell_policy
    from groundtruth.live import TruthProbe

    model, tok = tiny_lm
    mdp, _, pc = plain_rollout
    with pytest.raises(ValueError, match=r"start_weights must be 2 non-negative weights"):
        cell_policy(mdp, model, tok, env_name="FiniteRooms-v0", prompt_config=pc, max_prompt_tokens=2048,
                    start_weights=[1.0, -1.0])
    with pytest.raises(ValueError, match=r"cells='all' must be one of \('reachable', 'visited'\)"):
        TruthProbe("FiniteRooms-v0", PLAIN, cells="all")


def test_the_truth_against_an_independent_solve_on_an_lm_like_table(small_rooms):
    """A step-dependent, nearly deterministic table with mass on the malformed action (what a warm-started LM
    gives): the probe's truth (rows in visited cells, the table elsewhere) equals plain backward induction."""
    from groundtruth.onpolicy import exact_row_advantages

    mdp = small_rooms.with_returns(0.9, 0.2)
    H, S, A = mdp.horizon, mdp.num_states, mdp.num_actions
    rng = np.random.default_rng(3)
    best = mdp.optimal_actions()
    logits = rng.normal(0, 1, (H, S, A))
    logits[np.arange(H)[:, None], np.arange(S)[None], best] += 4.0
    logits[..., mdp.malformed_action] += 1.0
    table = np.exp(logits - logits.max(-1, keepdims=True))
    table /= table.sum(-1, keepdims=True)
    n = 40
    step, state = rng.integers(0, H, n), rng.integers(0, S, n)
    action = np.array([rng.choice(A, p=table[t, s]) for t, s in zip(step, state)])
    lp = np.log(table[step, state])  # the rows score the table itself
    invalid = (action == mdp.malformed_action) & (rng.random(n) < 0.5)
    truth = exact_row_advantages(mdp, step, state, action, lp, fallback=table, invalid=invalid)
    q = float(invalid[action == mdp.malformed_action].mean())
    V, Q = _independent_values(mdp, table, 0.9, 0.2 * q)
    row_q = Q[step, state, action] - (action == mdp.malformed_action) * 0.2 * (invalid - q)
    np.testing.assert_allclose(truth.Q, row_q, atol=1e-10)
    np.testing.assert_allclose(truth.A, row_q - V[step, state], atol=1e-10)


def test_the_ceiling_is_exact_returns_normalised_in_true_state_groups(small_rooms):
    """``ceiling_metrics`` = the Pearson of the exact Q, normalised per (prompt group, state) as GiGPO's step term,
    with A (recomputed here with plain loops); with the policy's own action mix and mean_norm it reaches 1."""
    from groundtruth.live import BatchTruth, ceiling_metrics
    from groundtruth.onpolicy import exact_row_advantages

    mdp = small_rooms
    H, S, A = mdp.horizon, mdp.num_states, mdp.num_actions
    rng = np.random.default_rng(5)
    pi = rng.dirichlet(np.ones(A) * 0.5, size=(H, S))
    n = 60
    step, state = rng.integers(0, 3, n), rng.integers(0, 4, n)
    group = rng.integers(0, 2, n)
    action = rng.integers(0, A - 1, n)
    truth = exact_row_advantages(mdp, step, state, action, np.log(pi[step, state]), fallback=pi)
    bt = BatchTruth(step=step, state=state, action=action, truth=truth)
    got = ceiling_metrics(group, bt, "mean_std_norm")
    term = np.zeros(n)
    for key in set(zip(group.tolist(), state.tolist())):
        idx = [i for i in range(n) if (group[i], state[i]) == key]
        if len(idx) > 1:
            x = truth.Q[idx]
            term[idx] = (x - x.mean()) / (x.std(ddof=1) + 1e-6) if np.ptp(x) > 0 else 0.0
    assert got["groundtruth/ceiling/pearson_step"] == pytest.approx(np.corrcoef(term, truth.A)[0, 1], abs=1e-9)
    assert got["groundtruth/ceiling/pearson_q"] == pytest.approx(np.corrcoef(truth.Q, truth.A)[0, 1], abs=1e-9)
    assert got["groundtruth/ceiling/pearson_step"] < 0.99
    # every action of a two-action state taken in the policy's proportions: the group mean is V, the term is A
    s0 = int(mdp.start_states[0])
    best = mdp.optimal_actions()
    two = np.zeros((H, S, A))
    hh, ss_ = np.meshgrid(np.arange(H), np.arange(S), indexing="ij")
    two[hh, ss_, best] += 0.5
    two[hh, ss_, (best + 1) % (A - 1)] += 0.5
    b0 = int(best[0, s0])
    st, ss, sa = np.zeros(4, int), np.full(4, s0), np.array([b0, (b0 + 1) % (A - 1)] * 2)
    with np.errstate(divide="ignore"):
        t2 = exact_row_advantages(mdp, st, ss, sa, np.log(two[st, ss]), fallback=two)
    c2 = ceiling_metrics(np.zeros(4, int), BatchTruth(step=st, state=ss, action=sa, truth=t2), "mean_norm")
    assert np.ptp(t2.A) > 0
    assert c2["groundtruth/ceiling/pearson_step"] == pytest.approx(1.0, abs=1e-9)



def _warm(model, contexts, targets, pad: int, steps: int, lr: float):
    """Full-batch Adam SFT on (context, target) token lists, the loss on the targets only: a quick warm start."""
    import torch

    seqs = [c + y for c, y in zip(contexts, targets)]
    width = max(map(len, seqs))
    ids = torch.tensor([x + [pad] * (width - len(x)) for x in seqs])
    mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in seqs])
    labels = torch.full_like(ids, -100)
    for i, (c, y) in enumerate(zip(contexts, targets)):
        labels[i, len(c):len(c) + len(y)] = torch.tensor(y)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        loss = model(ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


@pytest.mark.slow
def test_the_truth_matches_monte_carlo_returns_of_the_lm(tmp_path):
    """A tiny LM, warm-started for 100 Adam steps on the expert's answers along the expert's paths (so that it acts
    neither randomly nor deterministically), plays the real env: each response is *generated* from the canonical
    prompt of its cell (``cell_policy``'s ``prompt_ids`` + the thought), projected and parsed as in training. Its
    mean discounted return from each start state must match V^π_0 of the truth within 4 standard errors + 0.05
    (seeded; 300 episodes per start; ~1 min on one core). This checks the scoring (scored action distribution =
    generation distribution, malformed mass included), the DP, and the env's dynamics and parser together; the
    canonical prompt itself is the truth's definition (``groundtruth.cells``), and λ = 0 (the charges are tested
    on their own above)."""
    import copy
    import random

    import gymnasium as gym
    import torch

    import envs  # noqa: F401
    from agents.models.corpus import default_corpus
    from agents.models.loading import load_model_and_tokenizer
    from agents.models.tiny import TinyModelConfig, build_tiny_model
    from agents.projection import project
    from agents.rollout import prompt_config_for
    from groundtruth.cells import cell_policy
    from groundtruth.policy import evaluate_policy

    torch.manual_seed(0)
    torch.set_num_threads(1)
    kw = dict(PLAIN, max_steps=5)
    env = gym.make("FiniteRooms-v0", **kw).unwrapped
    mdp = env.mdp.with_returns(0.95, 0.0)
    rng = random.Random(0)  # a tokenizer that knows the world's words: short prompts, few tokens per action
    world = [f"<think></think><action>{a}</action>" for a in mdp.actions]
    world += [mdp.family.render(e, s, 0, rng) for e in mdp.events for s in mdp.states[:50]]
    world += [mdp.family.task_text(s) for s in mdp.states[:5]]
    d = build_tiny_model(tmp_path / "tiny", TinyModelConfig(layers=2, hidden=64, heads=2),
                         corpus=list(default_corpus(0)) + world * 20)
    model, tok = load_model_and_tokenizer(d, dtype="float32")
    pc = prompt_config_for(tok, 2048, 2)
    thought = "<think></think>"
    th = tok(thought, add_special_tokens=False)["input_ids"]
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0

    def policy():
        return cell_policy(mdp, model, tok, env_name="FiniteRooms-v0", prompt_config=pc, max_prompt_tokens=2048,
                           thought=thought, pad_id=pad)

    cp = policy()
    best = mdp.optimal_actions()
    path = set()  # the expert's cells
    for s0 in mdp.start_states:
        s = int(s0)
        for t in range(mdp.horizon):
            path.add((t, s))
            _p, ns, _r, done, _e = mdp.outcomes(s, int(best[t, s]))[0]  # its first outcome
            if done:
                break
            s = ns
    ctx = [cp.prompt_ids[c] + th for c in sorted(path) if c in cp.prompt_ids]
    tgt = [tok(f"<action>{mdp.actions[best[c]]}</action>", add_special_tokens=False)["input_ids"]
           + [tok.eos_token_id] for c in sorted(path) if c in cp.prompt_ids]
    _warm(model, ctx, tgt, pad, steps=100, lr=3e-3)
    cp = policy()
    V = evaluate_policy(mdp, cp.pi).V
    assert V[0, mdp.start_states].max() > 0.5  # some start state is won within the horizon
    named = cp.pi.copy()
    named[..., mdp.malformed_action] = 0
    V_named = evaluate_policy(mdp, named / named.sum(-1, keepdims=True)).V
    torch.manual_seed(1)
    n_ep = 300
    for k, s0 in enumerate(mdp.start_states):
        p_best = cp.pi[0, int(s0), best[0, int(s0)]]
        assert 0.2 < p_best < 0.99, p_best  # neither random nor deterministic
        returns = np.zeros(n_ep)
        envs_ = [copy.copy(env) for _ in range(n_ep)]  # one world, built once; each copy resets its own state
        state = [int(e.reset(seed=10_000 * k + i, options={"task_index": k})[1]["state_key"])
                 for i, e in enumerate(envs_)]
        live = list(range(n_ep))
        for t in range(mdp.horizon):
            if not live:
                break
            ids = [cp.prompt_ids[(t, state[i])] + th for i in live]
            width = max(map(len, ids))
            batch = torch.tensor([[pad] * (width - len(x)) + x for x in ids])
            mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
            with torch.no_grad():
                out = model.generate(batch, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                                     top_p=1.0, max_new_tokens=24, pad_token_id=pad, eos_token_id=tok.eos_token_id)
            still = []
            for i, row in zip(live, out[:, width:]):
                text = thought + tok.decode(row, skip_special_tokens=True)
                _, r, term, trunc, info = envs_[i].step(project(text).action)
                state[i] = int(info["state_key"])
                returns[i] += mdp.gamma ** t * r
                if not (term or trunc):
                    still.append(i)
            live = still
        se = returns.std(ddof=1) / np.sqrt(n_ep)
        print(f"start {k}: Monte Carlo {returns.mean():.3f} ± {se:.3f}, truth {V[0, int(s0)]:.3f}, "
              f"without the malformed mass {V_named[0, int(s0)]:.3f}")
        assert abs(returns.mean() - V[0, int(s0)]) < 4 * se + 0.05, (k, returns.mean(), V[0, int(s0)], se)
        if V[0, int(s0)] > 0.5:  # the test has power: dropping the no-action mass (renormalising) is caught
            assert abs(returns.mean() - V_named[0, int(s0)]) > 4 * se + 0.05
