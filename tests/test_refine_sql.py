"""HeroRefine on a real SQLite database, with scripted LMs (no mocks of the executor or database)."""

from __future__ import annotations

import sqlite3
from concurrent.futures import ThreadPoolExecutor

import dspy
import pytest
from refine_scripts import RoleScript

from dspy_hero.execution.environments import environment_for
from dspy_hero.refine.demos import DemoBank
from dspy_hero.refine.module import HeroRefine
from dspy_hero.refine.trace import ERROR, EXECUTE, INVALID, PROBE, RETRIEVE, REVISE, STOP
from dspy_hero.tasks.programs import GenerateProgram

pytest.importorskip("dspy_hero.execution.sqlite_environment")

WRONG = "SELECT nam FROM singer WHERE country = 'France'"
FIXED = "SELECT name FROM singer WHERE country = 'France'"
QUESTION = "What are the names of singers from France?"


@pytest.fixture(scope="module")
def db_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("refine") / "concert.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);
        INSERT INTO singer VALUES (1, 'Joe Sharp', 'Netherlands', 52), (2, 'Timbaland', 'United States', 32),
            (3, 'Justin Brown', 'France', 29), (4, 'Rose White', 'France', 41), (5, 'John Nizinik', 'France', 43);
        CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, concert_name TEXT, singer_id INTEGER, year INTEGER);
        INSERT INTO concert VALUES (1, 'Auditions', 3, 2014), (2, 'Super bootcamp', 4, 2015), (3, 'Home Visits', 1, 2014);
        """
    )
    conn.commit()
    conn.close()
    return str(path)


def make(script: RoleScript, db_path: str | None = None, **kwargs) -> HeroRefine:
    gen = GenerateProgram("sql", ["question", "db_schema"])
    return HeroRefine(gen, **kwargs)


def run(script: RoleScript, refiner: HeroRefine, db_path: str, **extra):
    with dspy.context(lm=script.lm()):
        return refiner(question=QUESTION, db_schema="singer(singer_id, name, country, age)", db_path=db_path, **extra)


@pytest.mark.parametrize("judge_when_failing", [False, True])
def test_wrong_column_is_fixed_from_the_schema_probe(db_path, judge_when_failing):
    script = RoleScript(
        generator={"sql": WRONG},
        refiner=[{"action": "probe", "argument": "schema: singer"}, {"action": "revise", "argument": "use the real column"},
                 {"action": "stop", "argument": ""}],
        reviser={"reason": "[1] no such column nam; [2] the schema lists `name`", "revised_program": f"```sql\n{FIXED}\n```"},
        judge={"reason": "the schema probe shows the column is name", "supported": True},
    )
    pred = run(script, make(script, judge_when_failing=judge_when_failing), db_path)
    assert pred.sql == FIXED and pred.changed and pred.initial_program == WRONG
    trace = pred.refinement
    assert [s.action for s in trace.steps] == [EXECUTE, PROBE, REVISE, STOP]
    assert "no such column" in trace.steps[0].evidence.lower()
    assert "CREATE TABLE singer" in trace.steps[1].evidence and "name TEXT" in trace.steps[1].evidence
    verdict = trace.steps[2].verdict
    assert "3 row(s)" in verdict.execution
    reviser_saw = script.seen["reviser"][0].inputs
    assert "name TEXT" in reviser_saw["evidence"]  # the reviser saw the probe's evidence ...
    # ... and the programmatic diagnosis: the column does not exist, the table has `name`
    assert "SUSPECT" in reviser_saw["diagnosis"] and "similar columns in `singer`: `name`" in reviser_saw["diagnosis"]
    # the accepted revision seeds the next step: the refiner is asked again, about the new program
    assert script.seen["refiner"][2].inputs["program"] == FIXED and "ACCEPTED" in script.seen["refiner"][2].inputs["evidence"]
    assert trace.actions_used == 2 and trace.stop_reason == "refiner stopped"
    assert trace.env_actions == 3  # initial run, schema probe, revision run
    assert trace.initial_suspicions and "no such column" in trace.initial_suspicions[0]
    if judge_when_failing:  # the paper's gate: the judge decides, having seen the probe's evidence
        assert verdict.accepted and verdict.stage == "judge" and verdict.judge_called
        assert "name TEXT" in script.seen["judge"][0].inputs["evidence"]
        assert trace.lm_calls == 6 == pred.lm_calls  # generator + 3 refiner + reviser + judge
        assert trace.lm_calls_by_role == {"generator": 1, "refiner": 3, "reviser": 1, "judge": 1}
    else:  # the query failed to run; the revision passes every check with a plausible result: no judge
        assert verdict.accepted and verdict.stage == "checks" and not verdict.judge_called
        assert "fails its checks" in verdict.reason and "judge" not in script.seen
        assert trace.lm_calls_by_role == {"generator": 1, "refiner": 3, "reviser": 1}
    summary = trace.summary()
    assert summary["accepted_revisions"] == [{"step": 2, "before": WRONG, "after": FIXED, "stage": verdict.stage,
                                              "after_ran": summary["accepted_revisions"][0]["after_ran"]}]
    assert summary["actions_used"] == 2 and summary["lm_calls"] == trace.lm_calls and summary["proposals"] == 1


@pytest.mark.parametrize("current", ["SELECT name FROM singer WHERE age > 40", "SELECT name FROM singer WHERE age > 100"])
def test_judge_still_decides_when_the_current_program_runs(db_path, current):
    # The current query passes its checks (a plausible result, or an empty one: suspect, yet an empty
    # answer can be right): a revision needs the judge.
    script = RoleScript(
        generator={"sql": current},
        refiner=[{"action": "revise", "argument": "maybe fewer rows"}, {"action": "stop", "argument": ""}],
        reviser={"reason": "a guess", "revised_program": FIXED},
        judge={"reason": "nothing in the evidence asks for this", "supported": False},
    )
    pred = run(script, make(script), db_path)
    verdict = pred.refinement.steps[1].verdict
    assert not verdict.accepted and verdict.stage == "judge" and verdict.judge_called and not pred.changed
    assert bool(pred.refinement.initial_suspicions) == current.endswith("100")


def test_unsupported_revision_is_rejected_by_the_judge(db_path):
    script = RoleScript(
        generator={"sql": FIXED},
        refiner=[{"action": "revise", "argument": "maybe the Netherlands"}, {"action": "stop", "argument": ""}],
        reviser={"reason": "I think the Netherlands", "revised_program": FIXED.replace("France", "Netherlands")},
        judge={"reason": "nothing in the evidence mentions the Netherlands", "supported": False},
    )
    pred = run(script, make(script), db_path)
    assert pred.sql == FIXED and not pred.changed
    step = pred.refinement.steps[1]
    assert step.action == REVISE and step.proposal.endswith("'Netherlands'")
    assert not step.verdict.accepted and step.verdict.stage == "judge" and step.verdict.judge_called
    assert script.count("judge") == 1
    assert pred.refinement.stop_reason == "refiner stopped"


@pytest.mark.parametrize("judge_when_failing", [False, True])
def test_a_revision_that_makes_a_plausible_result_suspect(db_path, judge_when_failing):
    # FIXED returns three rows; the revision returns none. The shape rules reject it without the judge;
    # the paper's gate leaves it to the judge (here a credulous one).
    script = RoleScript(
        generator={"sql": FIXED},
        refiner=[{"action": "revise", "argument": "maybe Germany"}, {"action": "stop", "argument": ""}],
        reviser={"reason": "I think Germany", "revised_program": FIXED.replace("France", "Germany")},
        judge={"reason": "looks fine", "supported": True},
    )
    pred = run(script, make(script, judge_when_failing=judge_when_failing), db_path)
    verdict = pred.refinement.steps[1].verdict
    assert "SUSPECT: the query returned no rows" in verdict.execution
    if judge_when_failing:
        assert verdict.accepted and verdict.judge_called and pred.changed
    else:
        assert not verdict.accepted and verdict.stage == "checks" and "judge" not in script.seen
        assert "no rows" in verdict.reason and not pred.changed


@pytest.mark.parametrize("judge_when_failing", [False, True])
def test_a_revision_that_stays_suspect_needs_the_judge(db_path, judge_when_failing):
    # The current query fails; the revision runs but returns nothing: the checks cannot decide.
    script = RoleScript(
        generator={"sql": WRONG},
        refiner=[{"action": "revise", "argument": "fix the column"}, {"action": "stop", "argument": ""}],
        reviser={"reason": "[0] no such column", "revised_program": FIXED.replace("France", "france")},
        judge={"reason": "the value is spelled France in the data", "supported": False},
    )
    pred = run(script, make(script, judge_when_failing=judge_when_failing), db_path)
    verdict = pred.refinement.steps[1].verdict
    assert not verdict.accepted and verdict.stage == "judge" and verdict.judge_called and pred.sql == WRONG
    # the judge is told the revision's result is suspect, and sees the current program's diagnosis
    judge_saw = script.seen["judge"][0].inputs
    assert "SUSPECT: the query returned no rows" in judge_saw["new_execution"]
    assert "Diagnosis of the current program" in judge_saw["evidence"] and "no such column" in judge_saw["evidence"]


def test_revision_that_fails_to_execute_is_rejected_without_the_judge(db_path):
    script = RoleScript(
        generator={"sql": FIXED},
        refiner=[{"action": "revise", "argument": "x"}, {"action": "stop", "argument": ""}],
        reviser={"reason": "r", "revised_program": "SELECT singer_name FROM singer"},
        judge={"reason": "should never be asked", "supported": True},
    )
    pred = run(script, make(script), db_path)
    assert script.count("judge") == 0
    verdict = pred.refinement.steps[1].verdict
    assert not verdict.accepted and verdict.stage == "checks" and not verdict.judge_called
    assert "no such column" in verdict.reason.lower()
    assert pred.sql == FIXED and not pred.changed
    summary = pred.refinement.summary()
    assert [s["action"] for s in summary["steps"]][:2] == ["execute", "revise"]
    assert summary["steps"][1]["verdict"]["accepted"] is False and summary["steps"][1]["verdict"]["stage"] == "checks"
    assert summary["stop_reason"] == pred.refinement.stop_reason and summary["changed"] is False


@pytest.mark.parametrize("budget", [0, 2, 5])
def test_budget_is_respected(db_path, budget):
    columns = ["singer.country", "singer.name", "singer.age", "concert.year", "concert.concert_name"]
    script = RoleScript(generator={"sql": WRONG},
                        refiner=[{"action": "probe", "argument": f"sample_values {c}"} for c in columns])
    pred = run(script, make(script, budget=budget, revise_on_error=False), db_path)
    trace = pred.refinement
    assert script.count("refiner") == budget == trace.actions_used
    assert [s.action for s in trace.steps] == [EXECUTE] + [PROBE] * budget
    assert trace.env_actions == 1 + budget
    if budget:
        assert "'France'" in trace.steps[1].evidence
        assert trace.stop_reason == "budget exhausted"
    assert pred.sql == WRONG


def _bank_examples(db_path):
    rows = [
        ("How many singers are there?", "SELECT count(*) FROM singer"),
        ("List singer names ordered by age.", "SELECT name FROM singer ORDER BY age"),
        ("Which singers are older than 40?", "SELECT name FROM singer WHERE age > 40"),
        ("Names of singers from the Netherlands?", "SELECT name FROM singer WHERE country = 'Netherlands'"),
        ("Average age of singers from France?", "SELECT avg(age) FROM singer WHERE country = 'France'"),
        ("Countries of singers?", "SELECT DISTINCT country FROM singer"),
        ("Youngest singer name?", "SELECT name FROM singer ORDER BY age LIMIT 1"),
        ("Singers with concerts in 2014?", "SELECT s.name FROM singer s JOIN concert c USING (singer_id) WHERE year = 2014"),
        ("Oldest singer country?", "SELECT country FROM singer ORDER BY age DESC LIMIT 1"),
        ("Singer names and ages?", "SELECT name, age FROM singer"),
        ("Broken gold for singers?", "SELECT name FROM singers_table"),  # does not execute: left out
    ]
    return [dspy.Example(question=q, db_path=db_path, gold_sql=g).with_inputs("question", "db_path") for q, g in rows]


def test_demo_bank_keeps_only_executing_gold(db_path):
    bank = DemoBank.from_examples(_bank_examples(db_path))
    assert len(bank) == 10 and bank.stats["failed_execution"] == 1 and bank.stats["considered"] == 11


def test_at_most_three_demos_reach_the_refiner_and_reviser(db_path):
    bank = DemoBank.from_examples(_bank_examples(db_path))
    script = RoleScript(
        generator={"sql": WRONG},
        refiner=[{"action": "retrieve", "argument": "singer names country"}, {"action": "revise", "argument": "fix"},
                 {"action": "stop", "argument": ""}],
        selector={"chosen": "1, 2, 3, 4, 5, 6"},
        reviser={"reason": "example 1 selects name", "revised_program": FIXED},
        judge={"reason": "ok", "supported": True},
    )
    pred = run(script, make(script, demos=bank, retrieve_k=8), db_path)
    selector_req = script.seen["selector"][0]
    listed = [line for line in selector_req.inputs["candidates"].splitlines() if line[:1].isdigit()]
    assert len(listed) == 8  # the selector chose among k=8 ...
    assert "SELECT" not in selector_req.inputs["candidates"]  # ... seeing task texts, not programs
    for req in script.seen["refiner"][1:] + script.seen["reviser"]:
        assert req.inputs["examples"].count("verified sql program") == 3
    assert len(pred.refinement.demos_shown) == 3
    assert [s.action for s in pred.refinement.steps][:3] == [EXECUTE, RETRIEVE, REVISE]
    assert pred.sql == FIXED


class LabelTrap:
    """An example whose labels raise when touched: HERO-T must never read them."""

    question = QUESTION
    db_schema = "singer(singer_id, name, country, age)"

    def __init__(self, db_path):
        self.db_path = db_path

    def __getattr__(self, name):
        if name in ("gold_sql", "gold_cypher", "test_code", "ground_truth_code", "test_script", "answer", "label"):
            raise AssertionError(f"label {name!r} was read")
        raise AttributeError(name)

    def __getitem__(self, key):
        raise AssertionError("item access is not label-safe")

    def __iter__(self):
        raise AssertionError("iteration is not label-safe")

    def keys(self):
        raise AssertionError("keys() is not label-safe")


def test_labels_of_the_test_instance_are_never_read(db_path):
    script = RoleScript(
        generator={"sql": WRONG},
        refiner=[{"action": "probe", "argument": "schema"}, {"action": "revise", "argument": "fix"}],
        reviser={"reason": "schema shows name", "revised_program": FIXED},
        judge={"reason": "ok", "supported": True},
    )
    refiner = make(script)
    with dspy.context(lm=script.lm()):
        pred = refiner(LabelTrap(db_path))
    assert pred.sql == FIXED
    # environment_for reads only environment references, too
    assert environment_for(LabelTrap(db_path)).language == "sql"
    # labels passed as keywords are dropped unread: the gold never reaches any prompt
    script2 = RoleScript(generator={"sql": WRONG}, refiner={"action": "diagnose", "argument": "unsure"})
    run(script2, make(script2, budget=2, revise_on_error=False), db_path, gold_sql="SELECT 'GOLD-SECRET'")
    assert script2.count("refiner") == 2
    assert not any("GOLD-SECRET" in r.user or "GOLD-SECRET" in r.system for reqs in script2.seen.values() for r in reqs)


def test_malformed_refiner_output_uses_budget_and_never_crashes(db_path):
    script = RoleScript(
        generator={"sql": WRONG},
        # DSPy retries an unparseable answer once with the JSON adapter: both attempts are garbage
        refiner=["this is not in any format", "still no format", {"action": "dance", "argument": "?"},
                 {"action": "probe", "argument": "no_such_probe: x"}],
    )
    pred = run(script, make(script, budget=3, revise_on_error=False), db_path)
    trace = pred.refinement
    assert [s.action for s in trace.steps] == [EXECUTE, INVALID, INVALID, INVALID]
    assert "unparseable" in trace.steps[1].evidence and trace.steps[1].lm_calls == 2
    assert "unknown action" in trace.steps[2].evidence and "unknown probe" in trace.steps[3].evidence
    assert trace.actions_used == 3 and pred.sql == WRONG


def test_lm_failure_is_recorded_and_the_current_program_returned(db_path):
    script = RoleScript(
        generator={"sql": WRONG},
        refiner=[{"action": "revise", "argument": "fix"}, RuntimeError("LM endpoint down")],
        reviser={"reason": "schema", "revised_program": "SELECT singer_id FROM singer WHERE country = 'France'"},
        judge={"reason": "fine", "supported": True},
    )
    # accepted revision returns 3 rows, so stop_on_accept ends it; force a second step with stop_on_accept=False
    pred = run(script, make(script, stop_on_accept=False), db_path)
    trace = pred.refinement
    assert trace.steps[-1].action == ERROR and "LM endpoint down" in trace.steps[-1].evidence
    assert pred.sql == "SELECT singer_id FROM singer WHERE country = 'France'"  # the accepted one is kept
    assert trace.stop_reason.startswith("error")


def test_named_predictors_and_save_load_round_trip(db_path, tmp_path):
    bank = DemoBank.from_examples(_bank_examples(db_path))
    refiner = make(RoleScript(), demos=bank)
    names = [n for n, _ in refiner.named_predictors()]
    assert names == ["generator.generate", "refiner", "select_demos", "reviser", "judge"]
    assert all(p.signature.instructions for _, p in refiner.named_predictors())
    refiner.judge.signature = refiner.judge.signature.with_instructions("Be strict about evidence.")
    refiner.refiner.demos = [dspy.Example(task="t", program="p", evidence="e", examples="", actions="a",
                                          action="stop", argument="")]
    path = tmp_path / "refine.json"
    refiner.save(str(path))
    fresh = make(RoleScript())
    assert fresh.demo_bank is None
    fresh.load(str(path))
    assert fresh.judge.signature.instructions == "Be strict about evidence."
    assert len(fresh.refiner.demos) == 1
    assert fresh.demo_bank.to_dict() == bank.to_dict()
    assert [d.text for d, _ in fresh.demo_bank.retrieve("singers France", 3)] == [
        d.text for d, _ in bank.retrieve("singers France", 3)]
    copied = refiner.deepcopy()
    assert copied.demo_bank is refiner.demo_bank and copied.judge is not refiner.judge


def test_usage_totals_are_thread_safe(db_path):
    script = RoleScript(generator={"sql": WRONG}, refiner={"action": "diagnose", "argument": "column name looks wrong"})
    refiner = make(script, budget=2)
    lm = script.lm()

    def one(_):
        with dspy.context(lm=lm):
            return refiner(question=QUESTION, db_schema="s", db_path=db_path)

    with ThreadPoolExecutor(4) as pool:
        preds = list(pool.map(one, range(8)))
    assert all(p.lm_calls == 3 for p in preds)  # each call counts only its own LM calls
    snap = refiner.usage.snapshot()
    assert snap["queries"] == 8 and snap["lm_calls"] == 24 and snap["actions_per_query"] == 2.0
    assert snap["env_actions_per_query"] == 1.0
    assert len(refiner._environments) == 1  # one SQLite environment served all eight calls


def test_refiner_lm_serves_the_refinement_calls_and_environment_may_be_given(db_path):
    from dspy_hero.execution.sqlite_environment import SQLiteEnvironment

    task_script = RoleScript(generator={"sql": WRONG})
    refine_script = RoleScript(
        refiner=[{"action": "revise", "argument": "column is name"}, {"action": "stop", "argument": ""}],
        reviser={"reason": "error says nam does not exist", "revised_program": FIXED},
        judge={"reason": "ok", "supported": True},
    )
    env = SQLiteEnvironment(db_path)
    refiner = HeroRefine(GenerateProgram("sql", ["question"]), environment=env, refiner_lm=refine_script.lm(),
                         judge_when_failing=True)
    with dspy.context(lm=task_script.lm()):
        pred = refiner(question=QUESTION)  # no db_path needed: the environment was given
    assert pred.sql == FIXED
    assert task_script.count("generator") == 1 and set(task_script.seen) == {"generator"}
    assert (refine_script.count("refiner"), refine_script.count("reviser"), refine_script.count("judge")) == (2, 1, 1)
    assert pred.refinement.lm_calls_by_role == {"generator": 1, "refiner": 2, "reviser": 1, "judge": 1}


def test_bad_configuration_fails_clearly(db_path):
    gen = GenerateProgram("sql", ["question"])
    with pytest.raises(ValueError, match="budget"):
        HeroRefine(gen, budget=-1)
    with pytest.raises(TypeError, match="predictors"):
        HeroRefine(object())
    script = RoleScript(generator={"sql": WRONG})
    with dspy.context(lm=script.lm()), pytest.raises(ValueError, match="db_path"):
        HeroRefine(gen)(question=QUESTION)  # no environment reference at all


def test_demo_bank_from_metric_and_from_program(db_path):
    from dspy_hero.metrics.sql import sql_execution_metric

    metric = sql_execution_metric()
    examples = _bank_examples(db_path)
    by_metric = DemoBank.from_examples(examples, metric=metric)
    assert len(by_metric) == 10 and by_metric.stats["kept"] == 10

    answers = {ex.question: ex.gold_sql for ex in examples[:4]}  # the script knows 4 of the answers

    def generate(req):
        return {"sql": answers.get(req.inputs["question"], "SELECT 1")}

    program = GenerateProgram("sql", ["question"])
    with dspy.context(lm=RoleScript(generator=generate).lm()):
        bank = DemoBank.from_program(program, examples, metric)
    assert len(bank) == 4 and {d.source for d in bank.demos} == {"generated"}
    assert bank.stats["failed_metric"] == 7
    assert {d.program for d in bank.demos} == set(answers.values())


def test_a_second_retrieve_spends_budget_but_no_lm_call(db_path):
    bank = DemoBank.from_examples(_bank_examples(db_path))
    script = RoleScript(generator={"sql": WRONG}, refiner={"action": "retrieve", "argument": ""},
                        selector={"chosen": "1"})
    pred = run(script, make(script, demos=bank, budget=3, revise_on_error=False), db_path)
    trace = pred.refinement
    assert [s.action for s in trace.steps] == [EXECUTE, RETRIEVE, RETRIEVE, RETRIEVE]
    assert script.count("selector") == 1 and "already retrieved" in trace.steps[2].evidence
    assert "- retrieve" not in script.seen["refiner"][1].inputs["actions"]  # no longer offered
    assert len(trace.demos_shown) == 1


def test_the_last_action_revises_a_program_that_still_fails(db_path):
    script = RoleScript(
        generator={"sql": WRONG + "[[ ## completed ## ]]"},  # a marker a small model left inline
        refiner=[{"action": "diagnose", "argument": "the column name looks wrong"},
                 {"action": "diagnose", "argument": "maybe the table is wrong too"}],
        reviser={"reason": "[0] no such column nam", "revised_program": FIXED},
        judge={"reason": "the error names the column", "supported": True},
    )
    pred = run(script, make(script, budget=3), db_path)
    trace = pred.refinement
    assert trace.initial_program == WRONG  # the marker was stripped
    assert [s.action for s in trace.steps] == [EXECUTE, "diagnose", "diagnose", REVISE]
    assert script.count("refiner") == 2 and trace.actions_used == 3  # the forced revision asked no refiner
    assert pred.sql == FIXED


def test_repeated_probe_or_diagnosis_becomes_a_revision(db_path):
    script = RoleScript(
        generator={"sql": WRONG},
        refiner=[{"action": "probe", "argument": "schema"}, {"action": "probe", "argument": "schema"},
                 {"action": "stop", "argument": ""}],
        reviser={"reason": "[1] schema lists name", "revised_program": FIXED},
    )
    pred = run(script, make(script, budget=5), db_path)
    trace = pred.refinement
    assert [s.action for s in trace.steps] == [EXECUTE, PROBE, REVISE, STOP]  # the probe is not run again
    assert trace.steps[2].argument == "use what probe step [1] showed" and trace.env_actions == 3
    assert pred.sql == FIXED
    script = RoleScript(
        generator={"sql": WRONG},
        refiner=[{"action": "diagnose", "argument": "column nam does not exist; it is name"},
                 {"action": "diagnose", "argument": "Column nam does not exist;  it is name"},
                 {"action": "stop", "argument": ""}],
        reviser={"reason": "[1] schema lists name", "revised_program": FIXED},
    )
    pred = run(script, make(script, budget=5), db_path)
    trace = pred.refinement
    assert [s.action for s in trace.steps] == [EXECUTE, "diagnose", REVISE, STOP]
    assert trace.steps[2].argument.startswith("Column nam") and pred.sql == FIXED


def test_only_failing_skips_clean_initial_programs_and_still_refines_failing_ones(db_path):
    clean = RoleScript(generator={"sql": FIXED}, refiner={"action": "diagnose", "argument": "looks fine"})
    pred = run(clean, make(clean, only_failing=True), db_path)
    assert pred.sql == FIXED and not pred.changed
    assert pred.lm_calls == 1 and "refiner" not in clean.seen  # the generator only
    assert pred.refinement.stop_reason.startswith("initial program is not suspect")

    failing = RoleScript(
        generator={"sql": WRONG},
        refiner=[{"action": "probe", "argument": "schema: singer"}, {"action": "revise", "argument": "use the real column"}],
        reviser={"reason": "[1] no such column nam; [2] the schema lists `name`", "revised_program": FIXED},
        judge={"reason": "the schema probe shows the column is name", "supported": True},
    )
    pred = run(failing, make(failing, only_failing=True), db_path)
    assert pred.sql == FIXED and pred.changed


def test_demos_given_as_examples_are_verified_in_the_given_environments(db_path):
    # e.g. the task's environments on its own engine: a demo that runs only there must be kept
    asked = []

    def environments(refs):
        asked.append(refs)
        return environment_for(refs)

    refiner = make(RoleScript(), environment=environments, demos=_bank_examples(db_path))
    assert len(refiner.demo_bank) == 10 and len(asked) == 11  # every example was verified there


# --- issue 14: the judge sees the demos, no-revisions are re-asked once, accepted revisions seed more ---

ORDERED = "SELECT name FROM singer ORDER BY age"


def test_a_revision_supported_only_by_a_demo_is_accepted_because_the_judge_sees_it(db_path):
    bank = DemoBank.from_examples(_bank_examples(db_path))

    def judge(req):  # supports the change only if a verified example shows the pattern it adds
        shown = "ORDER BY age" in req.inputs["examples"]
        return {"reason": "example uses ORDER BY age" if shown else "no evidence for ORDER BY", "supported": shown}

    script = RoleScript(
        generator={"sql": "SELECT name FROM singer"},
        refiner=[{"action": "retrieve", "argument": "names ordered by age"}, {"action": "revise", "argument": "order"},
                 {"action": "stop", "argument": ""}],
        selector={"chosen": "1"},
        reviser={"reason": "example 1 orders by age", "revised_program": ORDERED},
        judge=judge,
    )
    refiner = make(script, demos=bank)
    with dspy.context(lm=script.lm()):
        pred = refiner(question="Show the names of singers sorted by their age.", db_schema="singer(...)",
                       db_path=db_path)
    verdict = pred.refinement.steps[2].verdict
    assert pred.refinement.initial_suspicions == []  # the current program is plausible: only the judge can decide
    assert verdict.accepted and verdict.stage == "judge" and pred.sql == ORDERED
    judge_saw = script.seen["judge"][0].inputs
    assert "Its verified sql program:\n" + ORDERED in judge_saw["examples"]
    assert "ORDER BY" not in judge_saw["evidence"]  # the support is in the demo, nowhere else


def test_a_revision_equal_to_the_current_program_is_never_accepted(db_path):
    script = RoleScript(
        generator={"sql": FIXED},
        refiner={"action": "revise", "argument": "improve it"},
        reviser=[{"reason": "same", "revised_program": f"```sql\n{FIXED}\n```"},
                 {"reason": "same again", "revised_program": FIXED.replace(" ", "  ") + "\n"}],
        judge={"reason": "would accept anything", "supported": True},
    )
    pred = run(script, make(script, budget=3), db_path)
    trace = pred.refinement
    assert [s.action for s in trace.steps] == [EXECUTE, REVISE]
    step = trace.steps[1]
    assert not step.verdict.accepted and step.reasked and "not a revision" in step.verdict.reason
    assert script.count("reviser") == 2 and script.count("judge") == 0  # re-asked once, never judged
    assert "no revision" in script.seen["reviser"][1].inputs["request"]
    assert trace.stop_reason == "the reviser proposed no new revision" and trace.actions_used == 1
    assert not pred.changed and trace.summary()["reasks"] == 1 and trace.accepted == []


def test_without_reask_a_repeated_program_ends_the_episode_after_one_reviser_call(db_path):
    """`reask=False` (the demo's setting): the first no-revision answer ends the episode; the reviser is
    not asked again (its second, new answer is never seen) and nothing is judged."""
    script = RoleScript(
        generator={"sql": FIXED},
        refiner={"action": "revise", "argument": "improve it"},
        reviser=[{"reason": "same", "revised_program": FIXED},
                 {"reason": "a new idea", "revised_program": "SELECT name FROM singer WHERE age > 40"}],
        judge={"reason": "would accept anything", "supported": True},
    )
    pred = run(script, make(script, budget=3, reask=False), db_path)
    trace = pred.refinement
    assert [s.action for s in trace.steps] == [EXECUTE, REVISE]
    step = trace.steps[1]
    assert not step.verdict.accepted and not step.reasked and "(asked once)" in step.verdict.reason
    assert script.count("reviser") == 1 and script.count("judge") == 0
    assert trace.stop_reason == "the reviser proposed no new revision" and trace.summary()["reasks"] == 0
    assert not pred.changed and pred.sql == FIXED


def test_a_repeated_rejected_revision_is_re_asked_and_the_rejections_are_shown(db_path):
    other = FIXED.replace("France", "Netherlands")
    script = RoleScript(
        generator={"sql": FIXED},
        refiner={"action": "revise", "argument": "try another country"},
        reviser=[{"reason": "guess", "revised_program": other}, {"reason": "guess", "revised_program": other},
                 {"reason": "a new idea", "revised_program": "SELECT name FROM singer WHERE age > 40"}],
        judge={"reason": "nothing supports another country", "supported": False},
    )
    pred = run(script, make(script, budget=2), db_path)
    trace = pred.refinement
    assert [s.action for s in trace.steps] == [EXECUTE, REVISE, REVISE]
    assert script.count("reviser") == 3 and script.count("judge") == 2
    second = trace.steps[2]
    assert second.reasked and second.proposal == "SELECT name FROM singer WHERE age > 40"  # the re-ask was gated
    rejected_shown = script.seen["reviser"][1].inputs["rejected"]
    assert other in rejected_shown and "nothing supports another country" in rejected_shown
    assert script.seen["reviser"][0].inputs["rejected"] == "(none)"
    assert trace.stop_reason == "budget exhausted" and not pred.changed


@pytest.mark.parametrize("stop_on_accept", [False, True])
def test_an_accepted_revision_seeds_a_second_one(db_path, stop_on_accept):
    two_columns = "SELECT name, country FROM singer WHERE country = 'France'"
    script = RoleScript(
        generator={"sql": WRONG},
        refiner=[{"action": "revise", "argument": "fix the column"}, {"action": "revise", "argument": "one column"},
                 {"action": "stop", "argument": ""}],
        reviser=[{"reason": "[0] no such column nam", "revised_program": two_columns},
                 {"reason": "the question asks only for names", "revised_program": FIXED}],
        judge={"reason": "the error and the diagnosis support it", "supported": True},
    )
    pred = run(script, make(script, stop_on_accept=stop_on_accept), db_path)
    trace = pred.refinement
    # stop_on_accept ends the episode only once an accepted revision is not suspect
    assert [s.action for s in trace.steps] == [EXECUTE, REVISE, REVISE] + ([] if stop_on_accept else [STOP])
    assert trace.stop_reason == ("accepted a revision that is not suspect (stop_on_accept)" if stop_on_accept
                                 else "refiner stopped")
    first, second = trace.steps[1], trace.steps[2]
    # the first revision runs but is still suspect (two columns for "the names"): the judge decides it
    assert first.verdict.accepted and first.verdict.stage == "judge" and "at most 1" in first.verdict.execution
    second_request = script.seen["reviser"][1].inputs
    assert second_request["program"] == two_columns and "at most 1" in second_request["diagnosis"]
    assert "result: 3 row(s) x 2 column(s) ['name', 'country']" in second_request["diagnosis"]
    # the second turns it into a plausible one (one column): the checks accept it, no judge call
    assert second.verdict.accepted and second.verdict.stage == "checks" and script.count("judge") == 1
    if not stop_on_accept:  # the refiner reads that the program it now holds raises no suspicion
        assert "it is now the current program; its diagnosis:\nno suspect signal" in \
            script.seen["refiner"][2].inputs["evidence"]
    assert pred.sql == FIXED and [(r["before"], r["after"]) for r in trace.summary()["accepted_revisions"]] == [
        (WRONG, two_columns), (two_columns, FIXED)]
    snap = make(script).usage.of([trace])
    assert snap["accepted_per_query"] == 2.0 and snap["actions_per_query"] == 2.0


class CheckRaises:
    """A real SQLite environment whose own check raises (e.g. a broken plug-in check)."""

    def __init__(self, db_path):
        from dspy_hero.execution.sqlite_environment import SQLiteEnvironment

        self.inner = SQLiteEnvironment(db_path)
        self.language = "sql"

    def execute(self, program):
        return self.inner.execute(program)

    def probes(self):
        return self.inner.probes()

    def probe(self, name, argument=""):
        return self.inner.probe(name, argument)

    def check(self, program, execution):
        raise RuntimeError("check plug-in crashed")


def test_a_check_that_raises_does_not_make_a_program_that_ran_fail(db_path):
    # budget 1: were the current program counted as failing, its one action would be a forced revision
    script = RoleScript(generator={"sql": FIXED}, refiner={"action": "stop", "argument": ""},
                        reviser={"reason": "r", "revised_program": "SELECT 1"})
    refiner = HeroRefine(GenerateProgram("sql", ["question"]), environment=CheckRaises(db_path), budget=1)
    with dspy.context(lm=script.lm()):
        pred = refiner(question=QUESTION)
    assert "check could not run" in pred.refinement.steps[0].evidence
    assert script.count("refiner") == 1 and script.count("reviser") == 0 and pred.refinement.initial_suspicions == []
    # and a revision is gated on its run and the judge, not failed by the crashing check
    script = RoleScript(generator={"sql": WRONG}, refiner=[{"action": "revise", "argument": "fix"}, {"action": "stop"}],
                        reviser={"reason": "[0] no such column", "revised_program": FIXED},
                        judge={"reason": "ok", "supported": True})
    refiner = HeroRefine(GenerateProgram("sql", ["question"]), environment=CheckRaises(db_path))
    with dspy.context(lm=script.lm()):
        pred = refiner(question=QUESTION)
    assert pred.sql == FIXED and pred.refinement.steps[1].verdict.accepted


def test_only_failing_refines_a_result_wider_than_the_question_asks(db_path):
    two_columns = "SELECT name, country FROM singer WHERE country = 'France'"
    script = RoleScript(generator={"sql": two_columns}, refiner={"action": "stop", "argument": ""})
    pred = run(script, make(script, only_failing=True), db_path)
    assert script.count("refiner") == 1 and "at most 1" in pred.refinement.initial_suspicions[0]
