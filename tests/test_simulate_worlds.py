"""The scripted simulation worlds for SQL, Cypher and Python, checked against real execution.

The simulation is only useful if its programs mean what it says: gold programs pass the real metric,
"broken" ones fail to execute, "wrong" ones run and fail, and the harmful rule really breaks some
instances. These tests run the real SQLite, FalkorDB and sandbox metrics on them.
"""

from __future__ import annotations

import dspy
import pytest

from dspy_hero.bench.simulate import SimulatedWorld, shows_error, simulated_lms
from dspy_hero.bench.simulate_worlds import CYPHER_WORLD, PYTHON_WORLD, SQL_WORLD, world_spec
from dspy_hero.lm.scripted import engine_of
from dspy_hero.tasks.builtin import builtin_cypher_task, builtin_python_task, builtin_sql_task
from dspy_hero.tasks.programs import GenerateProgram


@pytest.fixture(scope="module")
def sql_task():
    return builtin_sql_task()


@pytest.fixture(scope="module")
def cypher_task():
    task = builtin_cypher_task()
    yield task
    task.metric.close()


@pytest.fixture(scope="module")
def python_task():
    return builtin_python_task()


def score(task, example, field, program):
    return task.metric(example, dspy.Prediction(**{field: program})).score


def check_programs(task, language, examples):
    world = SimulatedWorld.from_examples(task.train + task.test, language=language)
    field = world.spec.program_field
    harmful_breaks = 0
    for ex in examples:
        key = ex[world.spec.key_field]
        gold = world._gold(key)
        assert score(task, ex, field, gold) == 1.0, key
        broken = world.spec.broken(key, gold)
        assert world.spec.is_broken(broken) and not world.spec.is_broken(gold)
        assert score(task, ex, field, broken) == 0.0, key
        wrong = world.spec.wrong_result(key, gold)
        assert not world.spec.is_broken(wrong)
        assert score(task, ex, field, wrong) == 0.0, key
        harmful = world.spec.apply_harmful(gold)
        harmful_breaks += harmful != gold and score(task, ex, field, harmful) == 0.0
    return harmful_breaks


def test_sql_world_programs_mean_what_they_say(sql_task):
    assert check_programs(sql_task, "sql", sql_task.train + sql_task.test) > 10


def test_cypher_world_programs_mean_what_they_say(cypher_task):
    assert check_programs(cypher_task, "cypher", cypher_task.train + cypher_task.test) > 5


def test_python_world_programs_mean_what_they_say(python_task):
    # 4 sandbox runs per task, ~5 s for all 30; parse_duration, compound_interest, ... raise ValueError
    assert check_programs(python_task, "python", python_task.train + python_task.test) >= 5


def test_python_skills_come_from_reference_and_tests(python_task):
    world = SimulatedWorld.from_examples(python_task.train + python_task.test, language="python")
    assert {"validation"} <= world.needs["parse_duration"]  # raises ValueError
    assert "dates" in world.needs["business_days_between"]
    assert "empty" in world.needs["dedupe"]  # its tests call dedupe([])
    assert "sorting" in world.needs["word_frequencies"]


def test_answer_follows_rules_in_each_language():
    for spec, gold in ((SQL_WORLD, "SELECT count(*) FROM t"),
                       (CYPHER_WORLD, "MATCH (p:Person) RETURN DISTINCT p.name"),
                       (PYTHON_WORLD, "def f(xs):\n    return sorted(xs)\n")):
        key = "f" if spec is PYTHON_WORLD else "q"
        world = SimulatedWorld({key: gold}, hard_fraction=0.0, spec=spec)
        needed = world.needs[key]
        assert needed, spec.language
        rules = " ".join(spec.skill(name).rule for name in needed)
        assert world.answer(key, "") != gold
        assert world.answer(key, rules).strip() == gold.strip()
        assert world.answer(key, rules + " " + spec.harmful_rule) == spec.apply_harmful(gold.strip() if spec is not PYTHON_WORLD else gold)


def test_harmful_python_rule_turns_raise_into_return_none():
    gold = "def f(x):\n    if x < 0:\n        raise ValueError('neg')\n    return x\n"
    assert "return None" in PYTHON_WORLD.apply_harmful(gold) and "raise" not in PYTHON_WORLD.apply_harmful(gold)


def test_revise_fixes_only_execution_errors_shown_in_evidence():
    world = SimulatedWorld({"q": "MATCH (n) RETURN count(n)"}, hard_fraction=0.0, spec=CYPHER_WORLD)
    broken = CYPHER_WORLD.broken("q", world.gold["q"])
    assert world.revise("q", broken, "SyntaxError: Invalid input") == world.gold["q"]
    assert world.revise("q", broken, "ran without error") == broken
    wrong = CYPHER_WORLD.wrong_result("q", world.gold["q"])
    assert world.revise("q", wrong, "SyntaxError: whatever") == wrong


def test_shows_error():
    assert shows_error("RuntimeError: example 1 raised NameError")
    assert not shows_error("executed without error; 2 visible example(s) ran without an exception")
    assert not shows_error("returned 3 row(s)")


def test_reflection_proposes_language_rules_and_the_harmful_one():
    world = SimulatedWorld({"f": "def f():\n    return 1\n"}, spec=PYTHON_WORLD)
    proposals = [world.next_rule("") for _ in range(6)]
    assert PYTHON_WORLD.harmful_rule in proposals
    assert {p for p in proposals if p != PYTHON_WORLD.harmful_rule} <= {s.rule for s in PYTHON_WORLD.skills}


def test_simulated_python_lm_drives_a_real_program(python_task):
    examples = python_task.train + python_task.test
    task_lm, _reflection_lm, world = simulated_lms(examples, language="python", hard_fraction=0.0)
    ex = next(e for e in examples if e.entry_point == "dedupe")
    program = GenerateProgram("python", ("prompt",))
    with dspy.context(lm=task_lm):
        seed_code = program(prompt=ex.prompt).code
    instructions = "\n".join(PYTHON_WORLD.skill(name).rule for name in world.needs["dedupe"])
    with dspy.context(lm=task_lm):
        taught = GenerateProgram("python", ("prompt",), instructions=instructions)(prompt=ex.prompt).code
    assert score(python_task, ex, "code", seed_code) == 0.0
    assert score(python_task, ex, "code", taught) == 1.0
    calls = engine_of(task_lm).calls
    assert len(calls) == 2 and "def dedupe(" in calls[0].inputs["prompt"]


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="no simulation for language"):
        world_spec("haskell")
    with pytest.raises(ValueError, match="entry_point"):
        SimulatedWorld.from_examples([dspy.Example(prompt="x").with_inputs("prompt")], language="python")
    with pytest.raises(ValueError, match="hard_fraction"):
        SimulatedWorld({"q": "SELECT 1"}, hard_fraction=2.0)


def test_one_rule_fixes_an_instance_whose_main_skill_it_teaches():
    """A single rule has an effect of its own (a paired test can see it): the instance's main skill is
    the first it needs in the world's order, and that rule alone solves it."""
    gold = "SELECT country, COUNT(*) FROM singer JOIN concert ON singer.id = concert.singer GROUP BY country"
    world = SimulatedWorld({"q": gold}, hard_fraction=0.0, spec=SQL_WORLD)
    assert world.needs["q"] == {"count", "join", "group"} and world.main_skill("q") == "count"
    rule = SQL_WORLD.skill("count").rule
    assert world.answer("q", rule) == gold
    others = " ".join(SQL_WORLD.skill(s).rule for s in ("join", "group"))
    assert world.answer("q", others) != gold
