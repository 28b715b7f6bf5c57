"""ProgramAdapter: a program answered without DSPy's field markers is still parsed (scripted LMs,
real Python sandbox for the end-to-end check)."""

from __future__ import annotations

import dspy
import pytest
from dspy.utils.exceptions import AdapterParseError

from dspy_hero.lm.adapter import ProgramAdapter, program_adapter
from dspy_hero.lm.scripted import scripted_lm

BARE = "Here is the function:\n```python\ndef task_func(x):\n    return x + 1\n```\nIt adds one."


def test_marked_responses_parse_exactly_like_chat_adapter():
    sig = dspy.Signature("prompt -> code")
    marked = "[[ ## code ## ]]\nprint(1)\n\n[[ ## completed ## ]]"
    assert ProgramAdapter().parse(sig, marked) == dspy.ChatAdapter().parse(sig, marked)


def test_single_output_takes_the_unmarked_response():
    sig = dspy.Signature("prompt -> code")
    with pytest.raises(AdapterParseError):
        dspy.ChatAdapter().parse(sig, BARE)
    assert ProgramAdapter().parse(sig, BARE) == {"code": BARE}
    with pytest.raises(AdapterParseError):  # nothing to take
        ProgramAdapter().parse(sig, "  \n[[ ## completed ## ]]\n")


def test_program_field_among_several_outputs_needs_a_fenced_block():
    sig = dspy.Signature("task -> reason, revised_program")
    fields = ProgramAdapter("revised_program").parse(sig, BARE)
    assert fields == {"revised_program": "def task_func(x):\n    return x + 1",
                      "reason": "Here is the function:\n\nIt adds one."}
    with pytest.raises(AdapterParseError):
        ProgramAdapter("revised_program").parse(sig, "def task_func(x): return x")  # no fence: no guess
    with pytest.raises(AdapterParseError):
        ProgramAdapter().parse(sig, BARE)  # which field is the program is not known
    with pytest.raises(AdapterParseError):  # a typed (non-string) output is never filled from prose
        ProgramAdapter("code").parse(dspy.Signature("prompt -> code, ok: bool"), BARE)


def test_a_configured_adapter_wins():
    with dspy.context(adapter=dspy.JSONAdapter()):
        with program_adapter():
            assert isinstance(dspy.settings.adapter, dspy.JSONAdapter)
    with program_adapter("code"):
        assert isinstance(dspy.settings.adapter, ProgramAdapter)
    assert dspy.settings.adapter is None


def test_bare_python_answer_is_scored_on_its_tests_not_lost_to_format():
    from dspy_hero.tasks.builtin.python_reference import reference_solution
    from dspy_hero.tasks.registry import load_task

    task = load_task("builtin-python")
    example = task.test[0]
    solution = reference_solution(example.entry_point)
    calls = []

    def bare(req):  # a small model's typical answer: prose and a fenced block, no field markers
        calls.append(1)
        return f"Sure! Here is the code:\n```python\n{solution}\n```\nThis solves the task."

    with dspy.context(lm=scripted_lm(bare)):
        pred = task.make_program()(**example.inputs())
    assert len(calls) == 1  # parsed on the first response: no JSON-adapter retry
    result = task.metric(example, pred)
    assert result.score == 1.0, result.feedback
    with dspy.context(lm=scripted_lm(bare), adapter=dspy.ChatAdapter()):  # what plain ChatAdapter did
        with pytest.raises(AdapterParseError):
            task.make_program()(**example.inputs())


def test_task_programs_give_the_instructions_and_the_format_reminder_before_the_question():
    """The generator's user message gives the schema, the (possibly learned) instructions, DSPy's format
    reminder and then the question; its system message is the same for every instruction variant, so the
    seed and a candidate share the schema's prefix. Other predictors keep ChatAdapter's messages."""
    from dspy_hero.lm.adapter import INSTRUCTIONS_HEADER, OBJECTIVE_AFTER_INPUTS
    from dspy_hero.optimizer.instructions import build_variant
    from dspy_hero.tasks.registry import load_task

    task = load_task("builtin-sql")
    example = task.test[0]
    seen = []

    def capture(req):
        seen.append(req)
        return {"sql": "SELECT 1"}

    program = task.make_program()
    name, predictor = program.named_predictors()[0]
    ruled = build_variant(program, {name: predictor.signature.instructions + "\n\nRules:\n- Use aliases."})
    with dspy.context(lm=scripted_lm(capture)):
        program(**example.inputs())
        ruled(**example.inputs())
    (seed_user, seed_system), (user, system) = [(r.user, r.system) for r in seen[-2:]]
    schema_end = user.index(example.db_schema) + len(example.db_schema)
    header = user.index(INSTRUCTIONS_HEADER)
    reminder = user.index("Respond with the corresponding output fields")
    assert schema_end < header < reminder < user.index("[[ ## question ## ]]")
    assert user[header:reminder].strip() == f"{INSTRUCTIONS_HEADER}\n{ruled.generate.signature.instructions}"
    assert user.endswith(f"[[ ## question ## ]]\n{example.question}")
    assert system == seed_system and OBJECTIVE_AFTER_INPUTS in system and "- Use aliases." not in system
    assert seed_user[: seed_user.index(INSTRUCTIONS_HEADER)] == user[:header]  # the schema's prefix, shared
    assert seen[-1].inputs == {"db_schema": example.db_schema, "question": example.question}
    assert seen[-1].instructions == ruled.generate.signature.instructions
    with dspy.context(lm=scripted_lm(capture)):
        dspy.Predict("question -> answer")(question="Why?")
    assert INSTRUCTIONS_HEADER not in seen[-1].user


def test_each_placement_puts_the_instructions_where_it_says_and_after_inputs_keeps_one_system_message():
    """SYSTEM is ChatAdapter's prompt; SYSTEM_AND_RESTATED adds them after the inputs; AFTER_INPUTS moves
    them there, so two variants that differ only in instructions share the system message (and the
    schema after it): the prefix the local server reuses."""
    from dspy_hero.lm.adapter import (
        INSTRUCTIONS_HEADER,
        OBJECTIVE_AFTER_INPUTS,
        RESTATED_HEADER,
        InstructionPlacement,
    )

    seed = dspy.Signature("db_schema, question -> sql", "Write one SQLite query.")
    ruled = seed.with_instructions("Write one SQLite query.\n\nRules:\n- Leave deleted rows out.")
    inputs = {"db_schema": "CREATE TABLE t(a)", "question": "How many?"}

    def messages(placement, signature):
        adapter = ProgramAdapter(placement=placement)
        msgs = adapter.format(signature, demos=[], inputs=inputs)
        return msgs[0]["content"], msgs[-1]["content"]

    plain = dspy.ChatAdapter().format(ruled, demos=[], inputs=inputs)
    assert [m["content"] for m in plain] == list(messages(InstructionPlacement.SYSTEM, ruled))

    system, user = messages(InstructionPlacement.SYSTEM_AND_RESTATED, ruled)
    assert "Leave deleted rows out" in system
    assert user.index("How many?") < user.index(RESTATED_HEADER) < user.index("Respond with")

    system, user = messages(InstructionPlacement.AFTER_INPUTS, ruled)
    assert "Leave deleted rows out" not in system and OBJECTIVE_AFTER_INPUTS in system
    assert user.index("How many?") < user.index(INSTRUCTIONS_HEADER) < user.index("Leave deleted") < user.index("Respond with")
    seed_system, seed_user = messages(InstructionPlacement.AFTER_INPUTS, seed)
    assert seed_system == system
    assert seed_user[: seed_user.index(INSTRUCTIONS_HEADER)] == user[: user.index(INSTRUCTIONS_HEADER)]


def test_before_last_input_puts_the_question_last_so_one_database_shares_the_instructions_prefix():
    """SYSTEM_AND_BEFORE_LAST_INPUT: the same words as SYSTEM_AND_RESTATED, but the per-example input comes
    after the restated instructions and the format reminder, so two questions of one database share
    everything up to the question (what the local server reuses, and the pinned engine pins); a
    single-input signature is laid out as SYSTEM_AND_RESTATED. BEFORE_LAST_INPUT: the same user message
    under the after-inputs header, and no instructions in the system message."""
    from dspy_hero.lm.adapter import INSTRUCTIONS_HEADER, RESTATED_HEADER, InstructionPlacement
    from dspy_hero.lm.local import shared_prefix_end

    ruled = dspy.Signature("db_schema, question -> sql", "Write one SQLite query.\n\nRules:\n- Leave deleted rows out.")
    adapter = ProgramAdapter(placement=InstructionPlacement.SYSTEM_AND_BEFORE_LAST_INPUT)

    def messages(signature, **inputs):
        return [m["content"] for m in adapter.format(signature, demos=[], inputs=inputs)]

    system, user = messages(ruled, db_schema="CREATE TABLE t(a)", question="How many?")
    _, other = messages(ruled, db_schema="CREATE TABLE t(a)", question="Which one?")
    restated_system, restated_user = [m["content"] for m in ProgramAdapter(
        placement=InstructionPlacement.SYSTEM_AND_RESTATED).format(ruled, demos=[],
                                                                   inputs={"db_schema": "CREATE TABLE t(a)",
                                                                           "question": "How many?"})]
    assert system == restated_system and "Leave deleted rows out" in system
    assert (user.index("CREATE TABLE t(a)") < user.index(RESTATED_HEADER) < user.index("Leave deleted")
            < user.index("Respond with") < user.index("[[ ## question ## ]]"))
    assert user.endswith("[[ ## question ## ]]\nHow many?")
    assert sorted(user.split("\n\n")) == sorted(restated_user.split("\n\n"))  # the same parts, reordered
    prefix = user[: shared_prefix_end(user)]
    assert prefix == other[: shared_prefix_end(other)]
    assert "Leave deleted rows out" in prefix and "Respond with" in prefix and "How many?" not in prefix
    one = dspy.Signature("prompt -> code", "Write a function.")
    restated_one = [m["content"] for m in ProgramAdapter(placement=InstructionPlacement.SYSTEM_AND_RESTATED).format(
        one, demos=[], inputs={"prompt": "Add one."})]
    assert messages(one, prompt="Add one.") == restated_one
    only = ProgramAdapter(placement=InstructionPlacement.BEFORE_LAST_INPUT)  # the same, minus the system's copy
    only_system, only_user = [m["content"] for m in only.format(ruled, demos=[], inputs={
        "db_schema": "CREATE TABLE t(a)", "question": "How many?"})]
    assert "Leave deleted rows out" not in only_system
    assert only_user == user.replace(RESTATED_HEADER, INSTRUCTIONS_HEADER)
    assert [m["content"] for m in only.format(one, demos=[], inputs={"prompt": "Add one."})] == restated_one


def test_the_scripted_reader_finds_instructions_given_after_the_inputs():
    from dspy_hero.lm.adapter import InstructionPlacement

    seen = []

    def capture(req):
        seen.append(req)
        return {"answer": "ok"}

    sig = dspy.Signature("question -> answer", "Answer briefly.\n\nRules:\n- Say ok.")
    two = dspy.Signature("db_schema, question -> answer", sig.instructions)
    for placement in InstructionPlacement:
        with dspy.context(lm=scripted_lm(capture), adapter=ProgramAdapter(placement=placement)):
            dspy.Predict(sig)(question="Why?")
            assert seen[-1].instructions == sig.instructions, placement
            assert seen[-1].inputs == {"question": "Why?"}, placement
            dspy.Predict(two)(db_schema="CREATE TABLE t(a)", question="Why?")
        assert seen[-1].instructions == sig.instructions, placement
        assert seen[-1].inputs == {"db_schema": "CREATE TABLE t(a)", "question": "Why?"}, placement
