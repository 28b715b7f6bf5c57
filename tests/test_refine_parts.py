"""The pieces of HeroRefine that need no environment: action parsing, BM25 retrieval, demo choice,
the gate's static checks, trace rendering and field routing."""

from __future__ import annotations

import dspy
import pytest

from dspy_hero.execution.base import Execution
from dspy_hero.fields import read_unlabeled
from dspy_hero.refine.actions import choose_demos, parse_action
from dspy_hero.refine.demos import BM25, Demo, DemoBank, _task_fields, tokenize
from dspy_hero.refine.fields import gather_inputs, generator_io
from dspy_hero.refine.gate import EvidenceGate, static_problem
from dspy_hero.refine.trace import RefinementTotals, RefinementTrace
from dspy_hero.tasks.programs import GenerateProgram

PROBES = ["schema", "sample_values", "run_subquery"]


@pytest.mark.parametrize(
    "action, argument, kind, probe, probe_arg",
    [
        ("probe", "schema", "probe", "schema", ""),
        ("probe", "sample_values: singer.country", "probe", "sample_values", "singer.country"),
        ("Probe", "run_subquery(SELECT 1)", "probe", "run_subquery", "SELECT 1"),
        ("probe: schema", "", "probe", "schema", ""),
        ("sample_values", "singer.name", "probe", "sample_values", "singer.name"),
        ("**Revise**", "use name", "revise", "", ""),
        ("done", "", "stop", "", ""),
        ("diagnose", "column is wrong", "diagnose", "", ""),
        ("retrieve", "", "retrieve", "", ""),
        ("dance", "x", "invalid", "", ""),
        ("probe", "tables", "invalid", "", ""),
        ("", "", "invalid", "", ""),
        (None, None, "invalid", "", ""),
        ("probe schema — argument: no argument (or a table name)", "", "probe", "schema", ""),
        ("revise - argument: the change", "use name", "revise", "", ""),
    ],
)
def test_parse_action(action, argument, kind, probe, probe_arg):
    parsed = parse_action(action, argument, PROBES)
    assert parsed.kind == kind
    assert parsed.probe == probe and parsed.probe_argument == probe_arg
    if kind == "invalid":
        assert parsed.problem


def test_tokenize_splits_identifiers_and_keeps_them():
    toks = tokenize("What is the playerName of singer_id 42?")
    assert {"playername", "player", "name", "singer_id", "singer", "id", "42"} <= set(toks)
    assert "the" not in toks and "what" not in toks


def test_bm25_ranks_the_matching_document_first():
    index = BM25([tokenize("singer age country"), tokenize("concert year stadium"), tokenize("singer name")])
    scores = index.scores(tokenize("stadium of the concert"))
    assert scores[1] > 0 and scores[0] == scores[2] == 0


def _bank(n=6):
    demos = [Demo({"question": f"How many singers in country {i} sing jazz?"}, f"SELECT {i}", "sql") for i in range(n)]
    demos.append(Demo({"question": "Stadium capacity by year"}, "SELECT capacity FROM stadium", "sql"))
    return DemoBank(demos)


def test_retrieve_excludes_the_instance_itself_and_round_trips():
    bank = _bank()
    hits = bank.retrieve("How many singers in country 3 sing jazz?", k=10)
    assert "How many singers in country 3 sing jazz?" not in [d.text for d, _ in hits]
    assert len(hits) == 5 and all(s > 0 for _, s in hits)
    again = DemoBank.from_dict(bank.to_dict())
    assert [d for d, _ in again.retrieve("stadium capacity", 2)] == [d for d, _ in bank.retrieve("stadium capacity", 2)]
    with pytest.raises(ValueError):
        DemoBank.from_dict({"nope": 1})


@pytest.mark.parametrize("answer, expected", [("2, 9, 2, 4, 5", [1, 3, 4]), ("none", []), ("??", [0, 1, 2])])
def test_choose_demos_caps_and_falls_back(answer, expected):
    bank = _bank()
    found = [d for d, _ in bank.retrieve("singers country jazz", k=8)]
    seen = []

    def select(task, candidates):
        seen.append(candidates)
        return answer

    demos, note = choose_demos(bank, "singers country jazz", "task", k=8, max_demos=3, select=select)
    assert demos == [found[i] for i in expected] and note
    assert "SELECT" not in seen[0]


def test_choose_demos_skips_the_selector_when_few_are_found():
    demos, _ = choose_demos(_bank(), "stadium capacity", "t", k=8, max_demos=3,
                               select=lambda *a: pytest.fail("selector called"))
    assert [d.program for d in demos] == ["SELECT capacity FROM stadium"]


def test_static_gate_problems():
    assert "empty" in static_problem("SELECT 1", "  ", "sql")
    assert "does not change" in static_problem("SELECT  1", "SELECT 1\n", "sql")
    assert "parse" in static_problem("x = 1", "def f(:\n  pass", "python")
    assert static_problem("SELECT 1", "SELECT 2", "sql") is None


def test_gate_runs_checks_in_order_and_skips_the_judge_on_failure():
    calls = []

    class Env:
        language = "sql"

        def check(self, program, execution):
            return False, "no columns"

    def judge(*args):
        calls.append(args)
        return True, "ok"

    ran = Execution(ok=True, rows=((1,),), columns=("x",))
    gate = EvidenceGate(judge=judge)
    verdict, execution, _ = gate.review("SELECT 1", "SELECT 2", "r", "e", Env(), "sql", lambda p: ran)
    assert not verdict.accepted and verdict.reason == "no columns" and not calls and execution is ran
    gate = EvidenceGate(checks=(), judge=judge)
    verdict, _, _ = gate.review("SELECT 1", "SELECT 2", "r", "e", Env(), "sql", lambda p: ran)
    assert verdict.accepted and verdict.judge_called and len(calls) == 1


@pytest.mark.parametrize(
    "question, bound",
    [
        ("How many singers do we have?", 1),
        ("Which stadium has the largest capacity?", 1),
        ("Show the name and the release year of the song by the youngest singer.", 3),
        ("What are the names, countries, and ages for every singer?", 5),
        ("For each stadium, how many concerts are there?", 3),
        ("Show all information about the singers from France.", None),
        ("", None),
    ],
)
def test_column_bound_of_a_question(question, bound):
    from dspy_hero.refine.suspect import columns_asked_at_most

    assert columns_asked_at_most(question or None) == bound


def test_evidence_text_keeps_the_anchor_and_elides_old_steps():
    trace = RefinementTrace("sql", 3, "SELECT 1")
    trace.add("execute", evidence="initial ran")
    for i in range(20):
        trace.add("diagnose", argument=f"d{i}", evidence="x" * 100 + f" step{i}")
    text = trace.evidence_text(max_chars=600)
    assert text.startswith("[0] execute") and "step19" in text and "step0 " not in text and "omitted" in text


def test_usage_totals_copy_fresh():
    import copy

    totals = RefinementTotals()
    trace = RefinementTrace("sql", 3, "a", final_program="b", actions_used=2, lm_calls=4, env_actions=3)
    totals.record(trace)
    assert totals.snapshot()["changed"] == 1 and totals.snapshot()["lm_calls_per_query"] == 4.0
    assert copy.deepcopy(totals).snapshot()["queries"] == 0


def test_call_counter_times_each_call_for_the_role_that_started_it():
    import time

    from dspy_hero.refine.trace import CallCounter

    counter = CallCounter()
    counter.role = "reviser"
    counter.on_lm_start("a", None, {})
    counter.role = "judge"  # the next step begins before the call returns
    time.sleep(0.02)
    counter.on_lm_end("a", None)
    counter.on_lm_start("b", None, {})
    counter.on_lm_end("b", None)
    assert counter.by_role == {"reviser": 1, "judge": 1}
    assert counter.seconds_by_role["reviser"] >= 0.02 > counter.seconds_by_role["judge"] >= 0
    totals = RefinementTotals()
    trace = RefinementTrace("sql", 3, "a", lm_calls=2, lm_calls_by_role=dict(counter.by_role))
    totals.record(trace, counter.seconds_by_role)
    totals.record(trace, counter.seconds_by_role)
    snap = totals.snapshot()
    assert snap["lm_calls_by_role"] == {"reviser": 2, "judge": 2}
    assert snap["lm_seconds_by_role"]["reviser"] >= 0.04
    import pickle

    assert pickle.loads(pickle.dumps(totals)).snapshot()["lm_calls_by_role"] == {"reviser": 2, "judge": 2}


def test_field_routing_never_reads_labels():
    gen = GenerateProgram("sql", ["question", "db_schema"])
    io = generator_io(gen)
    assert io.input_fields == ("question", "db_schema") and io.output_field == "sql" and io.language == "sql"
    ex = dspy.Example(question="q", db_schema="s", db_path="/x.sqlite", gold_sql="SECRET").with_inputs("question")
    gen_inputs, env = gather_inputs(io, ex, db_schema="override", gold_sql="SECRET")
    assert gen_inputs == {"question": "q", "db_schema": "override"}
    assert env == {"db_path": "/x.sqlite"} and "SECRET" not in repr(env) + repr(gen_inputs)
    with pytest.raises(ValueError):
        read_unlabeled(ex, "gold_sql", "HERO-T")
    with pytest.raises(TypeError):
        generator_io(object())
    # BigCodeBench's reference program is a label too: it never reaches the environment references.
    py = GenerateProgram("python", ["prompt"])
    bcb = dspy.Example(prompt="p", code_prompt="def f():", entry_point="f", canonical_solution="REFERENCE",
                       test_code="TESTS").with_inputs("prompt", "code_prompt", "entry_point", "canonical_solution")
    gen_inputs, env = gather_inputs(generator_io(py), bcb)
    assert "REFERENCE" not in repr(env) + repr(gen_inputs) and "TESTS" not in repr(env) + repr(gen_inputs)


def test_tasks_without_question_fields_are_searched_by_their_other_text_inputs():
    ex = dspy.Example(nl_question="Which actors were born in Paris?", graph_schema="(:Person)", graph="g",
                      gold_cypher="MATCH (p) RETURN p").with_inputs("nl_question", "graph_schema", "graph")
    demo_fields = _task_fields(ex)
    assert demo_fields == {"nl_question": "Which actors were born in Paris?"}
    bank = DemoBank([Demo(demo_fields, "MATCH (p) RETURN p", "cypher")])
    hits = bank.retrieve("actors born in Lyon", 3)
    assert [d.program for d, _ in hits] == ["MATCH (p) RETURN p"]


def test_retrieval_prefers_demos_from_the_same_database_and_keeps_the_group():
    bank = DemoBank([
        Demo({"question": "How many singers are from France?"}, "SELECT 1", "sql", group="concert"),
        Demo({"question": "How many patients are older than 40?"}, "SELECT 2", "sql", group="hospital"),
        Demo({"question": "How many patients are from France?"}, "SELECT 3", "sql", group="hospital"),
    ])
    query = "How many singers are from France?!"
    assert bank.retrieve(query, 3)[0][0].program == "SELECT 1"
    assert [d.program for d, _ in bank.retrieve(query, 3, group="hospital")] == ["SELECT 3", "SELECT 2", "SELECT 1"]
    assert DemoBank.from_dict(bank.to_dict()).demos[2].group == "hospital"
