"""benchmarks/hero_o_replay.py: the rounds of a HERO-O run rebuilt from its journal, with no LM call.

A real --simulate comparison (scripted LMs, real SQLite) writes the journal; the replay of the full
journal must give the live run's round records exactly, and the replay of a cut journal (a run killed
mid-way) must stop at the cut and give a prefix of them.
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import sys
import zlib
from pathlib import Path

import pytest

from dspy_hero.optimizer.checkpoint import FORMAT_VERSION

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, file: str):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses need the module registered
    spec.loader.exec_module(module)
    return module


compare = _load("hero_benchmarks_compare", "compare.py")
replay_tool = _load("hero_benchmarks_hero_o_replay", "hero_o_replay.py")

QUESTIONS = [
    ("How many rows are in table stock of {db}?", "SELECT count(*) FROM stock"),
    ("Names in stock of {db}, cheapest first.", "SELECT name FROM stock ORDER BY cost"),
    ("For {db}, how many stock rows per kind?", "SELECT kind, count(*) FROM stock GROUP BY kind"),
    ("Each stock name of {db} with its kind title.",
     "SELECT stock.name, kinds.title FROM stock JOIN kinds ON stock.kind = kinds.id"),
    ("Distinct costs in {db}?", "SELECT DISTINCT cost FROM stock"),
    ("Stock of {db} above the average cost.", "SELECT name FROM stock WHERE cost > (SELECT avg(cost) FROM stock)"),
    ("All stock names of {db}.", "SELECT name FROM stock"),
    ("The dearest stock row of {db}?", "SELECT name FROM stock ORDER BY cost DESC LIMIT 1"),
]


@pytest.fixture(scope="module", autouse=True)
def reflector_answers_by_request():
    """The simulated reflector numbers its proposals with a counter; a deterministic model server answers
    by the request alone. A continuation answers the recorded calls from the journal, so under a counter
    its later calls would get other rules than the live run's: here the rule is picked by the request."""
    from dspy_hero.bench.simulate import SimulatedWorld

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SimulatedWorld, "next_rule", lambda self, present: self.rule_for(zlib.crc32(present.encode()), present))
        yield


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("spider_replay")
    rows = []
    for k, db in enumerate(["ash", "birch", "cedar", "dogwood", "elm", "fir"]):
        path = root / "database" / db / f"{db}.sqlite"
        path.parent.mkdir(parents=True)
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE kinds (id INTEGER PRIMARY KEY, title TEXT)")
        conn.execute("CREATE TABLE stock (id INTEGER PRIMARY KEY, name TEXT, cost REAL, kind INTEGER)")
        conn.executemany("INSERT INTO kinds VALUES (?, ?)", [(1, "a"), (2, "b"), (3, "c")])
        conn.executemany("INSERT INTO stock VALUES (?, ?, ?, ?)", [(i, f"{db}{i}", 2.5 * i + k, 1 + i % 3) for i in range(1, 9)])
        conn.commit()
        conn.close()
        rows += [{"db_id": db, "question": q.format(db=db), "query": sql} for q, sql in QUESTIONS]
    (root / "dev.json").write_text(json.dumps(rows))
    out = tmp_path_factory.mktemp("sim_replay")
    config = compare.CompareConfig(task="spider", data=str(root), train_size=24, test_size=8, val_fraction=0.3,
                                   max_metric_calls=90, auto=None, threads=1, seed=0, out=str(out), simulate=True,
                                   ves_repetitions=0, methods=["seed", "hero_o"])
    compare.run_comparison(config)
    live = json.loads((out / "logs" / "hero_o" / "detailed_results.json").read_text())
    return config, live


def test_replay_of_the_full_journal_rebuilds_every_round(finished_run):
    config, live = finished_run
    data = replay_tool.replay(config)
    assert data["complete"] and data["stopped_at"] is None
    assert len(live["rounds"]) >= 2
    assert json.loads(json.dumps(data["rounds"], default=str)) == live["rounds"]
    assert data["final"]["final_instructions"] == live["final_instructions"]


def test_replay_of_a_cut_journal_stops_there_with_the_rounds_before(finished_run, tmp_path):
    config, live = finished_run
    out = Path(config.out)
    cut = tmp_path / "cut"
    (cut / "logs").mkdir(parents=True)
    (cut / "meta.json").write_text((out / "meta.json").read_text())
    (cut / "logs" / "hero_o").mkdir()
    src = out / "logs" / "hero_o"
    (cut / "logs" / "hero_o" / "state.json").write_text((src / "state.json").read_text())
    lines = (src / "journal.jsonl").read_text().splitlines(keepends=True)
    (cut / "logs" / "hero_o" / "journal.jsonl").write_text("".join(lines[: int(len(lines) * 0.7)]))
    before = (cut / "logs" / "hero_o" / "journal.jsonl").read_bytes()
    data = replay_tool.replay(compare.CompareConfig(**{**config.__dict__, "out": str(cut)}))
    assert not data["complete"] and data["stopped_at"]
    assert len(data["rounds"]) < len(live["rounds"])
    assert json.loads(json.dumps(data["rounds"], default=str)) == live["rounds"][: len(data["rounds"])]
    assert (cut / "logs" / "hero_o" / "journal.jsonl").read_bytes() == before  # the run dir is not touched
    assert not (cut / "logs" / "hero_o" / "result.json").exists()


def test_replay_refuses_arguments_of_another_run(finished_run):
    config, _ = finished_run
    with pytest.raises(ValueError, match="other pools"):
        replay_tool.replay(compare.CompareConfig(**{**config.__dict__, "train_size": 18}))


def test_replay_in_the_recorded_style_named_explicitly_rebuilds_every_round(finished_run):
    """--proposal-style: whole-proposal records are neither read nor written and the fingerprint is the
    recorded one; naming the style the run resolved to (a scripted reflector: evidence-wide) must give
    the live rounds, every proposal rebuilt from its recorded LM calls."""
    config, live = finished_run
    data = replay_tool.replay(config, "evidence_wide")
    assert data["complete"], data["stopped_at"]
    assert data["proposal_style"] == "evidence_wide"
    assert json.loads(json.dumps(data["rounds"], default=str)) == live["rounds"]
    assert data["reflection_usage"]["calls"] > 0


def test_a_style_whose_calls_were_never_made_stops_at_the_first_one(finished_run):
    config, live = finished_run
    before = (Path(config.out) / "logs" / "hero_o" / "journal.jsonl").read_bytes()
    data = replay_tool.replay(config, "per_pattern_only")
    assert not data["complete"] and "reflection LM call" in data["stopped_at"]
    assert len(data["rounds"]) < len(live["rounds"])
    assert (Path(config.out) / "logs" / "hero_o" / "journal.jsonl").read_bytes() == before


def _journal(cls, tmp_path, records):
    log = tmp_path / "log"
    log.mkdir()
    state = {"format_version": FORMAT_VERSION, "fingerprint": "f", "status": "running"}
    (log / "state.json").write_text(json.dumps(state))
    (log / "journal.jsonl").write_text("".join(json.dumps({"kind": "reflection", "key": k, "output": o}) + "\n"
                                               for k, o in records))
    return cls(log, "f")


def test_restyled_journal_answers_a_request_recorded_under_another_proposal(tmp_path):
    same = {"outputs": ["[[ ## rule ## ]]\nWhen x, do y."], "usage": [1, 10, 5]}
    journal = _journal(replay_tool.RestyledJournal, tmp_path,
                       [("r2:generate:aaaa:call1", same), ("r2:generate:aaaa", {"gradient": "g"})])
    assert journal.replay_reflection("r2:generate:aaaa") is None  # the recorded style's proposal: not read
    assert journal.replay_reflection("r2:generate:bbbb:call1") == same
    assert journal.answered_from_other_proposal == 1
    journal.record_reflection("r2:generate:bbbb", {"gradient": "new"})  # nothing paid: no error
    with pytest.raises(replay_tool.JournalEnd):
        journal.replay_reflection("r2:generate:bbbb:call2")
    with pytest.raises(replay_tool.JournalEnd):
        journal.record_reflection("r2:generate:bbbb:call2", same)  # an LM call would be paid


def test_restyled_journal_refuses_a_request_recorded_with_different_outputs(tmp_path):
    journal = _journal(replay_tool.RestyledJournal, tmp_path,
                       [("r1:generate:aaaa:call1", {"outputs": ["one"], "usage": [1, 1, 1]}),
                        ("r3:generate:cccc:call1", {"outputs": ["two"], "usage": [1, 1, 1]})])
    with pytest.raises(replay_tool.JournalEnd, match="different outputs"):
        journal.replay_reflection("r2:generate:bbbb:call1")


def _cut_copy(config, dest, fraction):
    """A copy of the run's directory as a run killed at `fraction` of its journal would leave it."""
    out = Path(config.out)
    (dest / "logs" / "hero_o").mkdir(parents=True)
    (dest / "methods").mkdir()
    (dest / "meta.json").write_text((out / "meta.json").read_text())
    (dest / "methods" / "seed.json").write_text((out / "methods" / "seed.json").read_text())
    src = out / "logs" / "hero_o"
    (dest / "logs" / "hero_o" / "state.json").write_text((src / "state.json").read_text())
    lines = (src / "journal.jsonl").read_text().splitlines(keepends=True)
    (dest / "logs" / "hero_o" / "journal.jsonl").write_text("".join(lines[: int(len(lines) * fraction)]))
    return compare.CompareConfig(**{**config.__dict__, "out": str(dest)})


def _kinds(path):
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sum(r["kind"] == "rollout" for r in recs), sum(r["kind"] == "reflection" for r in recs)


def test_continue_live_pays_only_what_the_cut_journal_lacks_and_ends_as_the_live_run(finished_run, tmp_path):
    """--continue-live: a run killed at 60% and continued under the same settings must make the live run's
    rounds and return its prompt, buying only the rollouts the cut journal lacks; the source is untouched."""
    config, live = finished_run
    cut = _cut_copy(config, tmp_path / "cut", 0.6)
    before = (Path(cut.out) / "logs" / "hero_o" / "journal.jsonl").read_bytes()
    cut_rollouts, _ = _kinds(Path(cut.out) / "logs" / "hero_o" / "journal.jsonl")
    full_rollouts, _ = _kinds(Path(config.out) / "logs" / "hero_o" / "journal.jsonl")
    into = tmp_path / "continued"
    results = replay_tool.continue_live(cut, into)
    detailed = json.loads((into / "logs" / "hero_o" / "detailed_results.json").read_text())
    assert detailed["rounds"] == live["rounds"]
    assert detailed["final_instructions"] == live["final_instructions"]
    paid_rollouts, _ = _kinds(into / "logs" / "hero_o" / "journal.jsonl")
    assert cut_rollouts < paid_rollouts == full_rollouts  # the journal's rollouts were not bought again
    assert (Path(cut.out) / "logs" / "hero_o" / "journal.jsonl").read_bytes() == before
    assert set(results["methods"]) == {"seed", "hero_o"}
    assert json.loads((into / "logs" / "hero_o" / "state.json").read_text())["continued_from"] == cut.out
    paid = json.loads((into / "continuation.json").read_text())
    assert paid["source_journal"]["rollouts"] == cut_rollouts and paid["journal"]["rollouts"] == full_rollouts
    # A second call resumes the continuation (its journal is not copied again): nothing is paid again.
    journal = into / "logs" / "hero_o" / "journal.jsonl"
    with journal.open("a") as f:  # a record only the continuation's own journal holds
        f.write(json.dumps({"kind": "rollout", "key": "marker", "example_id": "none", "result": {}}) + "\n")
    again = journal.read_bytes()
    (into / "methods" / "hero_o.json").unlink()
    replay_tool.continue_live(cut, into)
    assert journal.read_bytes() == again


def test_continued_journal_answers_recorded_requests_pays_the_rest_and_never_reads_whole_proposals(tmp_path):
    same = {"outputs": ["[[ ## rule ## ]]\nWhen x, do y."], "usage": [1, 10, 5]}
    journal = _journal(replay_tool.ContinuedJournal, tmp_path,
                       [("r2:generate:aaaa:call1", same), ("r2:generate:aaaa", {"gradient": "g"}),
                        ("r1:generate:cccc:call9", {"outputs": ["one"], "usage": [1, 1, 1]}),
                        ("r3:generate:dddd:call9", {"outputs": ["two"], "usage": [1, 1, 1]})])
    assert journal.replay_reflection("r2:generate:aaaa") is None  # another style's proposal: rebuilt, not read
    assert journal.replay_reflection("r2:generate:bbbb:call1") == same
    assert journal.answered_from_other_proposal == 1
    assert journal.replay_reflection("r2:generate:bbbb:call2") is None  # never made: the live LM pays
    assert journal.replay_reflection("r2:generate:bbbb:call9") is None  # ambiguous: asked again
    assert journal.paid_after_ambiguous == 1
    paid = {"outputs": ["new"], "usage": [1, 2, 3]}
    journal.record_reflection("r2:generate:bbbb:call2", paid)
    assert journal.replay_reflection("r4:generate:eeee:call2") == paid  # what it paid answers a later same request
    journal.close()
    assert "r2:generate:bbbb:call2" in (tmp_path / "log" / "journal.jsonl").read_text()
