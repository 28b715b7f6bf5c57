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
from dspy_hero.refine.trace import ERROR, EXECUTE, INVALID, PROBE, RETRIEVE, REVISE
from dspy_hero.tasks.programs import GenerateProgram

pytest.importorskip("dspy_hero.execution.sqlite_probes")

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
        refiner=[{"action": "probe", "argument": "schema: singer"}, {"action": "revise", "argument": "use the real column"}],
        reviser={"reason": "[1] no such column nam; [2] the schema lists `name`", "revised_program": f"```sql\n{FIXED}\n```"},
        judge={"reason": "the schema probe shows the column is name", "supported": True},
    )
    pred = run(script, make(script, judge_when_failing=judge_when_failing), db_path)
    assert pred.sql == FIXED and pred.changed and pred.initial_program == WRONG
    trace = pred.refinement
    assert [s.action for s in trace.steps] == [EXECUTE, PROBE, REVISE]
    assert "no such column" in trace.steps[0].evidence.lower()
    assert "CREATE TABLE singer" in trace.steps[1].evidence and "name TEXT" in trace.steps[1].evidence
    verdict = trace.steps[2].verdict
    assert "3 row(s)" in verdict.execution
    assert "name TEXT" in script.seen["reviser"][0].inputs["evidence"]  # the reviser saw the probe's evidence
    # accepted clean revision ends the episode: 2 of 3 actions used
    assert trace.actions_used == 2 and trace.stop_reason.startswith("accepted")
    assert trace.env_actions == 3  # initial run, schema probe, revision run
    if judge_when_failing:  # the paper's gate: the judge decides, having seen the probe's evidence
        assert verdict.accepted and verdict.stage == "judge" and verdict.judge_called
        assert "name TEXT" in script.seen["judge"][0].inputs["evidence"]
        assert trace.lm_calls == 5 == pred.lm_calls  # generator + 2 refiner + reviser + judge
        assert trace.lm_calls_by_role == {"generator": 1, "refiner": 2, "reviser": 1, "judge": 1}
    else:  # the query failed to run; the revision passes every check: no judge needed
        assert verdict.accepted and verdict.stage == "checks" and not verdict.judge_called
        assert "fails its checks" in verdict.reason and "judge" not in script.seen
        assert trace.lm_calls_by_role == {"generator": 1, "refiner": 2, "reviser": 1}


def test_judge_still_decides_when_the_current_program_runs(db_path):
    # The current query runs cleanly (wrong or not, nothing questions it): a revision needs the judge.
    script = RoleScript(
        generator={"sql": "SELECT name FROM singer WHERE age > 100"},
        refiner=[{"action": "revise", "argument": "maybe fewer rows"}, {"action": "stop", "argument": ""}],
        reviser={"reason": "a guess", "revised_program": FIXED},
        judge={"reason": "nothing in the evidence asks for this", "supported": False},
    )
    pred = run(script, make(script), db_path)
    verdict = pred.refinement.steps[1].verdict
    assert not verdict.accepted and verdict.stage == "judge" and verdict.judge_called and not pred.changed


def test_unsupported_revision_is_rejected_by_the_judge(db_path):
    script = RoleScript(
        generator={"sql": FIXED},
        refiner=[{"action": "revise", "argument": "maybe Germany"}, {"action": "stop", "argument": ""}],
        reviser={"reason": "I think Germany", "revised_program": FIXED.replace("France", "Germany")},
        judge={"reason": "nothing in the evidence mentions Germany", "supported": False},
    )
    pred = run(script, make(script), db_path)
    assert pred.sql == FIXED and not pred.changed
    step = pred.refinement.steps[1]
    assert step.action == REVISE and step.proposal.endswith("'Germany'")
    assert not step.verdict.accepted and step.verdict.stage == "judge" and step.verdict.judge_called
    assert script.count("judge") == 1
    assert pred.refinement.stop_reason == "refiner stopped"


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
    from dspy_hero.execution.sqlite_probes import SQLiteEnvironment

    task_script = RoleScript(generator={"sql": WRONG})
    refine_script = RoleScript(
        refiner=[{"action": "revise", "argument": "column is name"}],
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
    assert (refine_script.count("refiner"), refine_script.count("reviser"), refine_script.count("judge")) == (1, 1, 1)
    assert pred.refinement.lm_calls_by_role == {"generator": 1, "refiner": 1, "reviser": 1, "judge": 1}


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
        refiner=[{"action": "probe", "argument": "schema"}, {"action": "probe", "argument": "schema"}],
        reviser={"reason": "[1] schema lists name", "revised_program": FIXED},
    )
    pred = run(script, make(script, budget=5), db_path)
    trace = pred.refinement
    assert [s.action for s in trace.steps] == [EXECUTE, PROBE, REVISE]  # the probe is not run again
    assert trace.steps[2].argument == "use what probe step [1] showed" and trace.env_actions == 3
    assert pred.sql == FIXED
    script = RoleScript(
        generator={"sql": WRONG},
        refiner=[{"action": "diagnose", "argument": "column nam does not exist; it is name"},
                 {"action": "diagnose", "argument": "Column nam does not exist;  it is name"}],
        reviser={"reason": "[1] schema lists name", "revised_program": FIXED},
    )
    pred = run(script, make(script, budget=5), db_path)
    trace = pred.refinement
    assert [s.action for s in trace.steps] == [EXECUTE, "diagnose", REVISE]
    assert trace.steps[2].argument.startswith("Column nam") and pred.sql == FIXED


def test_only_failing_skips_clean_initial_programs_and_still_refines_failing_ones(db_path):
    clean = RoleScript(generator={"sql": FIXED}, refiner={"action": "diagnose", "argument": "looks fine"})
    pred = run(clean, make(clean, only_failing=True), db_path)
    assert pred.sql == FIXED and not pred.changed
    assert pred.lm_calls == 1 and "refiner" not in clean.seen  # the generator only
    assert pred.refinement.stop_reason.startswith("initial program executes cleanly")

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
