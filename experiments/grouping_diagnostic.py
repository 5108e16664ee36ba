"""The paper's grouping diagnostic on our environments, from runs with ``logging.grouping_scan``.

    python -m experiments.study grouping-textcraft && python -m experiments.study grouping-alfworld   # the runs
    python -m experiments.grouping_diagnostic results/grouping/textcraft results/grouping/alfworld \\
        --out results/grouping/diagnostic.md
    python -m experiments.grouping_diagnostic state-facts [--games 6 --episodes 8 --steps 20 --seed 0]
    python -m experiments.grouping_diagnostic state-distances --model DIR [--tasks 3,23 --layer -2]

The paper reads GiGPO's anchor singleton rate on ALFWorld (34.2% at iteration 10, 27.3% over training) as anchors
that split equal states, which BiGPO's clusters lower. Here every batch of the first ``--iterations`` (10) of each run
was scanned (``grouping_scan.jsonl``: the anchors and the clusters at every epsilon of ``AUTO_GRID``, each with its
singleton rate and its pair precision / recall against the true state ``state_key``). For each run the table gives,
as the mean over those iterations and at the last one:

* the anchors' singleton rate, and their pair precision and recall against the true state;
* the clusters at the epsilon ``return_loo`` picks on the run's first batch (frozen, as ``epsilon: auto`` would),
  at the epsilon ``anchor_f1`` picks there, and at the paper's 0.05: singleton rate, precision, recall, F1;
* the F1 of each batch's best epsilon (an oracle: it reads the true state), what any epsilon could reach.

A setting is in the paper's regime when its anchors split equal states: pair recall against the true state below
0.5 (most pairs of rows in one state get different anchors) while their precision stays above 0.9 (the split is
over-splitting, not aliasing). The verdict column says which.

Two checks of what the table measures against, each a subcommand:

``state-facts``: how fine is ALFWorld's ``state_key``? ``ALFWorldEnv.state_key`` hashes every dynamic PDDL fact of the
engine. Some of those facts are bookkeeping that the path leaves behind: negated literals that the route leaves behind
(``not_atlocation(agent1, loc)``, ``not_holds``, ...) and ``checked(receptacle)``. Two rows in the same room, holding
the same thing, with the same receptacles open, can then get different keys because they got there by different
routes; this measures how much of the anchors' low precision there comes from those facts. Rows come from uniformly
random admissible actions (not a trained policy: it wanders more), ``--episodes`` per game from the same start, as a
prompt group's rollouts share one game. For each state definition it prints the anchors' pair precision and recall
(pairs of rows of one game: same observation vs same state), and for pairs that share the physical state but not the
full key, the share whose admissible commands are identical (a check that the dropped facts do not change what the
agent can do next).

``state-distances``: what moves a TextCraft state's hidden state: padding, the prompt's step counter, or the
observation. Scripted episodes on training goals (``--tasks``): the same failed command repeated (the observation
stays the same while the prompt's "steps taken" line moves), then the expert's first actions (the observation
changes). Prompts are encoded as a rollout encodes them (``--history-length``, the inventory shown as in the CPU
presets), and the hidden state at each row's last prompt token (``--layer``, as BiPACE reads it) comes from one packed
forward, with every prompt also run beside a longer one (other padding). The table gives the cosine distances of
three kinds of pairs within a goal: one prompt padded two ways, one observation at two step counts, two different
observations; the clustering joins two rows at distance <= epsilon + 1e-6 (``estimators.cluster.JOIN_TOL``).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from itertools import combinations
from pathlib import Path

from envs.alfworld.env import is_bookkeeping, predicate

PROG = "python -m experiments.grouping_diagnostic"
SUBCOMMANDS = ("state-facts", "state-distances")
PAPER_EPS = 0.05


def _lines(text: str) -> dict[int, dict]:
    """iteration -> its scan record (the last line of an iteration wins: a resumed run appends it again)."""
    out: dict[int, dict] = {}
    for ln in text.splitlines():
        if ln.strip():
            rec = json.loads(ln)
            out[int(rec["iteration"])] = rec
    return out


def _at(scan: list[dict], eps: float) -> dict:
    return min(scan[1:], key=lambda r: abs(r["epsilon"] - eps))


def _best_f1(scan: list[dict]) -> dict:
    """The scan row of the epsilon with the best F1 against the true state ({} when no row has a finite F1)."""
    rows = [r for r in scan[1:] if r.get("f1", float("nan")) == r.get("f1", float("nan"))]
    return max(rows, key=lambda r: r["f1"]) if rows else {}


def run_summary(scans: dict[int, dict], iterations: int = 10) -> dict:
    """Means over the first ``iterations`` scans and the values at the last of them, for the anchors and for the
    clusters at each rule's epsilon (frozen on the first scan)."""
    from estimators.calibrate import pick_from_scan

    its = sorted(i for i in scans if i <= iterations)
    if not its:
        raise ValueError("no scanned iteration")
    first = scans[its[0]]["scan"]
    eps = {"return_loo": pick_from_scan(first, "return_loo").epsilon,
           "anchor_f1": pick_from_scan(first, "anchor_f1").epsilon, "paper 0.05": PAPER_EPS}
    out: dict = {"iterations": its, "rows": sum(scans[i]["rows"] for i in its) / len(its), "epsilon": eps}
    keys = ("singleton_rate", "precision", "recall", "f1")

    def stats(pick) -> dict:
        rows = [pick(scans[i]["scan"]) for i in its]
        mean = {k: sum(r.get(k, float("nan")) for r in rows) / len(rows) for k in keys}
        return {"mean": mean, "last": {k: rows[-1].get(k, float("nan")) for k in keys}}

    out["anchors"] = stats(lambda s: s[0])
    out["oracle"] = stats(_best_f1)  # reads the true state
    for name, e in eps.items():
        out[name] = stats(lambda s, e=e: _at(s, e))
    return out


def verdict(anchors: dict) -> str:
    p, r = anchors["mean"]["precision"], anchors["mean"]["recall"]
    if r != r or p != p:
        return "no same-state pairs"
    if r < 0.5 and p > 0.9:
        return "yes: anchors over-split equal states"
    if p <= 0.9:
        return "no: anchors alias states" + (" and split them" if r < 0.5 else "")
    return "no: anchors keep most equal states together"


def table(entries: list[tuple[str, dict]]) -> str:
    def f(x: float) -> str:
        return "–" if x != x else f"{x:.2f}"

    lines = [
        "Mean over the first iterations (the value at the last of them in brackets). Singleton rate: rows alone in "
        "their group; P / R / F1: pair precision / recall / F1 against the true state. Cluster epsilons are frozen "
        "on the run's first batch.", "",
        "| run | rows per batch | anchors: singleton | anchors: P / R / F1 | return_loo: eps, singleton, F1 | "
        "anchor_f1: eps, singleton, F1 | paper 0.05: singleton, F1 | best ε of each batch (oracle): F1 | "
        "paper's regime? |",
        "|---|---|---|---|---|---|---|---|---|"]
    for label, s in entries:
        a = s["anchors"]

        def cl(name: str, with_eps: bool = True, s: dict = s) -> str:
            m, last = s[name]["mean"], s[name]["last"]
            head = f"{s['epsilon'][name]:.3g}, " if with_eps else ""
            return (f"{head}{f(m['singleton_rate'])} ({f(last['singleton_rate'])}), "
                    f"{f(m['f1'])} ({f(last['f1'])})")

        lines.append(
            f"| {label} | {s['rows']:.0f} | {f(a['mean']['singleton_rate'])} ({f(a['last']['singleton_rate'])}) | "
            f"{f(a['mean']['precision'])} / {f(a['mean']['recall'])} / {f(a['mean']['f1'])} | "
            f"{cl('return_loo')} | {cl('anchor_f1')} | "
            f"{cl('paper 0.05', False)} | {f(s['oracle']['mean']['f1'])} ({f(s['oracle']['last']['f1'])}) | "
            f"{verdict(a)} |")
    return "\n".join(lines) + "\n"


def run_label(study: str, env: str, method: str, seed: int) -> str:
    """A run's row label: its env, method and seed, with the study folder's name where that is not the env's (two
    studies of one environment, e.g. ``alfworld`` and ``alfworld-physical``, stay apart)."""
    name = Path(study).name
    where = env if name == env else f"{env} [{name}]"
    return f"{where} {method}, seed {seed}"


# ------------------------------------------------------------------------------------------------ state-facts
DEFINITIONS = {
    "every dynamic fact (`state_key`)": lambda facts: frozenset(facts),
    "without negated literals (`not_*`)":
        lambda facts: frozenset(f for f in facts if not predicate(f).startswith("not_")),
    "without `not_*` and `checked` (physical)": lambda facts: frozenset(f for f in facts if not is_bookkeeping(f)),
}


def anchor_purity(rows: list[tuple], key) -> tuple[float, float]:
    """(precision, recall) of the anchors (same game and observation) against ``key(facts)``, over pairs of rows of
    one game (the pair counts of ``estimators.diagnostics.pair_purity``); NaN where the pair count it divides by is
    0. rows: (game, observation, facts, admissible)."""
    from estimators.diagnostics import pair_count
    from estimators.ops import dense_ids, factorize

    nan = float("nan")
    if not rows:
        return nan, nan
    anchor = factorize([(g, o) for g, o, _, _ in rows])
    state = factorize([(g, key(f)) for g, _, f, _ in rows])
    same_obs, same_state, both = pair_count(anchor), pair_count(state), pair_count(dense_ids(anchor, state))
    return (both / same_obs if same_obs else nan), (both / same_state if same_state else nan)


def same_commands_share(rows: list[tuple]) -> tuple[int, float]:
    """Pairs of rows of one game with equal physical state but different full keys, and the share of them whose
    admissible commands are the same."""
    phys = DEFINITIONS["without `not_*` and `checked` (physical)"]
    by = defaultdict(list)
    for game, _, facts, adm in rows:
        by[(game, phys(facts))].append((frozenset(facts), tuple(adm)))
    n = same = 0
    for items in by.values():
        for (f1, a1), (f2, a2) in combinations(items, 2):
            if f1 != f2:
                n += 1
                same += a1 == a2
    return n, (same / n if n else float("nan"))


def collect_walks(games: int, episodes: int, steps: int, seed: int, data_path: str | None = None) -> list[tuple]:
    from envs.alfworld.env import ALFWorldEnv
    from envs.alfworld.walks import random_walk_rows

    return random_walk_rows(ALFWorldEnv(data_path=data_path, expert=False), games, episodes, steps, seed)


def facts_report(rows: list[tuple], argv: list[str]) -> str:
    games = len({r[0] for r in rows})
    md = [f"Made by `{PROG} state-facts{' ' + ' '.join(argv) if argv else ''}`: {len(rows)} rows, {games} training "
          "games, random admissible actions.", "",
          "| true state | anchors' pair precision | anchors' pair recall |", "|---|---|---|"]
    for name, key in DEFINITIONS.items():
        p, r = anchor_purity(rows, key)
        md.append(f"| {name} | {p:.3f} | {r:.3f} |")
    n, share = same_commands_share(rows)
    md += ["", f"Pairs with the same physical state but different full keys: {n}; with identical admissible commands: "
               f"{share:.3f}."]
    return "\n".join(md) + "\n"


def state_facts_main(argv: list[str]) -> int:
    """``state-facts``: the anchors against three definitions of ALFWorld's true state (module docstring)."""
    ap = argparse.ArgumentParser(prog=f"{PROG} state-facts", description="How fine is ALFWorld's state_key? GiGPO's "
                                 "anchors against three definitions of the true state.")
    ap.add_argument("--games", type=int, default=6)
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-path", default=None, help="ALFWorld data folder (default: the generated games)")
    a = ap.parse_args(argv)
    print(facts_report(collect_walks(a.games, a.episodes, a.steps, a.seed, a.data_path), argv), end="")
    return 0


# ------------------------------------------------------------------------------------------------ state-distances
FAILED = "get 1 nothing"


def _prompts(env, tok, task: int, repeats: int, expert_steps: int, history_length: int):
    """[(observation key, ids)] of one goal's scripted states."""
    from agents.prompts import Transcript, get_prompt_builder
    from agents.rollout import encode_transcript, prompt_config_for
    from envs.base import replay

    builder = get_prompt_builder("textcraft")
    cfg = prompt_config_for(tok, 2048, history_length=history_length)
    reset = {"seed": task, "options": {"split": "train", "task_index": task}}
    rows = []
    env.reset(**reset)
    scripts = ([FAILED] * repeats, env.expert_plan()[:expert_steps])
    for k, actions in enumerate(scripts):
        states = replay(env, actions, **reset)
        t = Transcript.start(*states[0])
        if k == 0:
            rows.append((states[0][1]["anchor_obs"], encode_transcript(tok, builder, t, cfg, 2048)[0]))
        for action, (obs, info) in zip(actions, states[1:]):
            t.record(action, obs, info)
            rows.append((info["anchor_obs"], encode_transcript(tok, builder, t, cfg, 2048)[0]))
    return rows


def pair_distances(model, tok, tasks, *, layer: int = -2, repeats: int = 4, expert_steps: int = 3,
                   history_length: int = 0) -> dict[str, list[float]]:
    """{pair kind: cosine distances} (see module docstring)."""
    import torch

    from envs.textcraft import TextCraftEnv
    from trainer.forward import pack_rows, policy_forward

    env = TextCraftEnv(show_inventory=True, max_steps=15)
    rows = []  # (task, observation, ids)
    for task in tasks:
        rows += [(task, o, ids) for o, ids in _prompts(env, tok, task, repeats, expert_steps, history_length)]
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    longest = max(len(r[2]) for r in rows)
    filler = torch.full((longest + 7,), int(tok.eos_token_id or 1))
    one = [torch.tensor([int(tok.eos_token_id or 1)])]

    def states(prompts):
        packed = pack_rows(prompts, one * len(prompts), pad_id=pad)
        with torch.no_grad():
            return policy_forward(model, packed, hidden_layer=layer, compute_entropy=False).hidden.double()

    h = states([torch.tensor(r[2]) for r in rows])
    h_padded = torch.stack([states([filler, torch.tensor(r[2])])[1] for r in rows])
    unit = lambda x: x / x.norm(dim=1, keepdim=True)  # noqa: E731
    phi, phi_p = unit(h), unit(h_padded)
    d = 1 - phi @ phi.T
    out = {"one prompt, two paddings": [float(x) for x in (1 - (phi * phi_p).sum(1))],
           "one observation, other step count": [], "other observations": []}
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            if rows[i][0] != rows[j][0]:
                continue
            same_obs = rows[i][1] == rows[j][1]
            if same_obs and rows[i][2] == rows[j][2]:
                continue  # the very same prompt (no step counter moved): not a pair of two states
            out["one observation, other step count" if same_obs else "other observations"].append(float(d[i, j]))
    return out


def state_distances_main(argv: list[str]) -> int:
    """``state-distances``: cosine distances of TextCraft hidden states, by kind of pair (module docstring)."""
    ap = argparse.ArgumentParser(prog=f"{PROG} state-distances", description="What moves a TextCraft state's hidden "
                                 "state: padding, the prompt's step counter, or the observation.")
    ap.add_argument("--model", required=True, help="a model folder (e.g. the cached TextCraft warm start)")
    ap.add_argument("--tasks", default="3,23", help="comma-separated train task indices (default: 3,23)")
    ap.add_argument("--layer", type=int, default=-2, help="hidden layer (default -2, as the CPU presets)")
    ap.add_argument("--repeats", type=int, default=4, help="failed commands per goal (default 4)")
    ap.add_argument("--history-length", type=int, default=0, help="past turns in the prompt (CPU presets: 0)")
    args = ap.parse_args(argv)
    import torch

    from agents.models.loading import load_model_and_tokenizer
    from estimators.cluster import JOIN_TOL

    torch.manual_seed(0)
    model, tok = load_model_and_tokenizer(args.model)
    model.eval()
    tasks = [int(x) for x in args.tasks.split(",") if x.strip()]
    dist = pair_distances(model, tok, tasks, layer=args.layer, repeats=args.repeats,
                          history_length=args.history_length)
    print(f"Cosine distances of layer {args.layer} states at the last prompt token, TextCraft train tasks {tasks} "
          f"(join tolerance {JOIN_TOL:g}):\n")
    print("| pairs | n | min | median | max |")
    print("|---|---|---|---|---|")
    for kind, xs in dist.items():
        if xs:
            print(f"| {kind} | {len(xs)} | {min(xs):.2e} | {statistics.median(xs):.2e} | {max(xs):.2e} |")
        else:
            print(f"| {kind} | 0 | – | – | – |")
    return 0


# ------------------------------------------------------------------------------------------------ the command
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "state-facts":
        return state_facts_main(argv[1:])
    if argv and argv[0] == "state-distances":
        return state_distances_main(argv[1:])
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                 epilog=f"Subcommands (first argument): {', '.join(SUBCOMMANDS)}; "
                                        f"`{PROG} <subcommand> --help` says more.")
    ap.add_argument("studies", nargs="+", help="study folders whose runs logged grouping_scan.jsonl")
    ap.add_argument("--iterations", type=int, default=10, help="the first iterations to read (default 10)")
    ap.add_argument("--out", help="write the table here (markdown)")
    args = ap.parse_args(argv)
    from analysis.runs import find_runs
    from envs.paths import portable_path

    entries = []
    for study in args.studies:
        try:
            runs = find_runs(Path(study))
        except FileNotFoundError as e:
            print(f"{PROG}: error: {e}", file=sys.stderr)
            return 2
        for r in sorted(runs, key=lambda r: r.path.parts):
            text = r.read_text("grouping_scan.jsonl")
            if not text:
                continue
            label = run_label(study, r.env, r.method, r.seed)
            try:
                summary = run_summary(_lines(text), args.iterations)
                read = summary["iterations"]
                if len(read) < args.iterations:  # a run stopped early: say what its means cover
                    label += f" (iterations {read[0]}–{read[-1]} only)"
                entries.append((label, summary))
            except ValueError as e:
                print(f"{PROG}: {portable_path(r.path)}: {e}; left out", file=sys.stderr)
    if not entries:
        print(f"{PROG}: error: no run under {args.studies} has grouping_scan.jsonl (train with "
              f"logging.grouping_scan=true)", file=sys.stderr)
        return 2
    text = table(entries)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
