"""The filters a candidate rule passes before any acceptance test: the not-a-rule filter of small-model
reflection (`clean_rule`) and the memorization guard. Both ways each: a general rule passes, an
observation, an error message or one instance's value does not.

Why these tests: on the conventions task both filters refused the very rules the task needs --
"Amounts may be stored as integers in minor units: check sample values ..." (a declarative rule
with an imperative clause) did "not read as an instruction", and "compare by year, month and day"
was blocked because one case's parameters label, ``{'year': 2023, 'month': 3}``, has a key 'month'.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dspy_hero.optimizer.guard import MemorizationGuard
from dspy_hero.optimizer.reflection_cases import clean_rule, reads_as_instruction

RULES = [
    ("Amounts may be stored as integers in minor units (cents, fils): check sample values and convert to the "
     "currency unit the question asks for."),
    ("Rows whose deletion timestamp (deleted_at, removed_at, ...) is set no longer exist: exclude them wherever "
     "the table is read."),
    "Yes/no columns may hold text such as 'Y'/'N' or 'true'/'false'; check sample values before filtering on them.",
    "Dates may be stored as text in a local format - compare them by year, month and day with substr.",
    "Status columns hold codes, so match the stored code of the word in the question.",
    "Always qualify column names with their table alias.",
    ("When a table has a column that flags sample or demo rows (such as is_sample or demo_row), those rows do "
     "not count: always add the condition `<that column> = 0` to the WHERE clause."),
    ("When a table has a column such as archived_at, category or deleted_at, the generated program should "
     "filter on this column whenever it meets that kind of column, on any database."),
    "When counting rows of a table, use COUNT(*) on that table only.",
    "Whenever a table has a deleted_at column exclude the rows where it is set.",  # no comma to cut at
]

NOT_RULES = [
    "Amounts may be stored as integers in minor units.",  # a fact with nothing to do
    "The query failed because the column price does not exist.",
    "Error: no such column: price",
    "Note: the database is SQLite and the query returned 3 rows.",
    "This case returned the wrong number of rows, so the answer was wrong.",
    # conditionals whose main clause only describes (the 1.5B reflector, RESULTS.md session 22)
    ("When a table has a column such as `archived_at` or `deleted_at`, the reference program filters on that "
     "column, but the generated program does not."),
    "When a table does not have a column that is referenced in a query, the query will fail.",
    "When a table has a deletion column such as deleted_at, but the generated program does not filter on it.",
    # a list's comma is not a clause break: "count)" and "count`" do not start a main clause
    "When a table has columns (such as status, count), the reference program groups by them.",
    "When the reference compares `status, count` values, the reference program uses equality.",
]


@pytest.mark.parametrize("rule", RULES)
def test_a_rule_with_an_imperative_clause_is_a_rule(rule):
    assert reads_as_instruction(rule)
    kept, problem = clean_rule(rule)
    assert problem is None and kept == rule


@pytest.mark.parametrize("text", NOT_RULES)
def test_observations_and_messages_are_not_rules(text):
    assert not reads_as_instruction(text)
    assert clean_rule(text)[1] is not None


def case(params: str, gold: str = "SELECT COUNT(*) FROM orders o WHERE substr(o.ordered, 7, 4) = '2023'"):
    return SimpleNamespace(case_id="F12", inputs={"question": "How many orders were placed in March 2023?"},
                           labels={"gold_sql": gold, "params": params, "conventions": "('date_format',)"})


DATE_RULE = ("Dates may be stored as text in a local format (DD/MM/YYYY, YYYYMMDD): check sample values and "
             "compare or sort by year, month and day with substr.")


def test_the_field_names_of_a_structured_label_do_not_block_a_general_rule():
    verdict = MemorizationGuard().check(DATE_RULE, "Write SQL.", [case("{'year': 2023, 'month': 3}")])
    assert verdict.allowed, verdict.reason


def test_the_values_of_a_structured_label_still_block():
    guard = MemorizationGuard()
    # a value of the parameters that is nowhere else (not in the gold, not in the question)
    country = guard.check("Only count customers from Portugal.", "Write SQL.",
                          [case("{'country': 'Portugal', 'x': 42}", gold="SELECT COUNT(*) FROM customers")])
    assert not country.allowed and "'Portugal'" in country.reason and "params" in country.reason
    number = guard.check("Count only amounts above 42.", "Write SQL.",
                         [case("{'country': 'Portugal', 'x': 42}", gold="SELECT COUNT(*) FROM customers")])
    assert not number.allowed and "'42'" in number.reason
    # and the gold's own literal, as before
    year = guard.check("Only count orders from 2023.", "Write SQL.", [case("{'year': 2023, 'month': 3}")])
    assert not year.allowed


TEST_CODE = """class TestCases(unittest.TestCase):
    def test_compress(self):
        result = task_func(self.src, self.dst)
        self.assertEqual(result['message'], 'All files compressed and moved successfully.')
        self.assertEqual(result['failed_files'], [])
        self.assertEqual(result['status'], 'packed')
        self.assertIn('status', {'status': 'Fresno'})
"""


def code_case(test_code: str = TEST_CODE):
    return SimpleNamespace(case_id="F4", inputs={"prompt": "Compress all files in a folder."},
                           labels={"test_code": test_code})


def test_the_field_names_of_a_code_label_do_not_block_a_general_rule():
    """BigCodeBench/350's test reads result['message']: a field name, as general as the word, blocked
    "raise an exception with a descriptive message" (session 20). Its values still block."""
    guard = MemorizationGuard()
    rule = "When a program encounters an error, it should raise an exception with a descriptive message."
    verdict = guard.check(rule, "Write Python.", [code_case()])
    assert verdict.allowed, verdict.reason
    for value in ("packed", "Fresno"):  # a compared value; a dict value
        blocked = guard.check(f"Return the word {value} when nothing is left to do.", "Write Python.",
                              [code_case()])
        assert not blocked.allowed and repr(value) in blocked.reason
    # 'status' is a key, but also a value (assertIn's first argument): a value, so it blocks
    status = guard.check("Always report the status of the copy.", "Write Python.", [code_case()])
    assert not status.allowed and "'status'" in status.reason
    # a label that is not Python (a gold query) is read as before
    sql = SimpleNamespace(case_id="F5", inputs={"question": "q"},
                          labels={"gold_sql": "SELECT x FROM t WHERE t.kind = 'message'"})
    assert not guard.check(rule, "Write SQL.", [sql]).allowed


def test_a_plain_text_label_is_read_as_before():
    # not a structured label: a quoted string in it is a literal, whatever precedes a colon
    plain = SimpleNamespace(case_id="F3", inputs={"question": "q"},
                            labels={"answer": "status 'month': closed"})
    assert not MemorizationGuard().check("Use the value month for closed ones.", "Write SQL.", [plain]).allowed


def test_a_rejected_rule_re_proposed_with_other_punctuation_is_not_tested_again():
    """The 1.5B reflector re-proposed a rejected rule with one comma more (Spider split seed 3) and the
    re-test spent 32 pairs; the same words are the same candidate, other words are a new one."""
    from dspy_hero.optimizer.guard import MemorizationGuard
    from dspy_hero.optimizer.instructions import PromptState
    from dspy_hero.optimizer.reflection import Proposal, ProposedEdit
    from dspy_hero.optimizer.result import CandidateStatus
    from dspy_hero.optimizer.strategies.builder import GuardedBuilder

    state = PromptState("Write one SQLite query.", ())
    tested = "When a table has a column such as `directed_by`, `tv_channel` or `cartoon`, always leave those rows out."
    rejected = {PromptState(state.seed, (tested,)).render(): f"ADD: {tested}"}
    again = "When a table has a column such as directed_by, tv_channel, or cartoon, always leave those rows out"
    other = "When a table has a column such as directed_by, always select it when the question names a director."
    proposal = Proposal(edits=[ProposedEdit("add", r, None, ["F1"], f"ADD: {r} (F1)") for r in (again, other)])
    records, queued = GuardedBuilder(MemorizationGuard(), max_rules=12, max_rule_chars=300, limit=4).build(
        1, state, proposal, [], rejected, set())
    assert [r.status for r in records] == [CandidateStatus.DUPLICATE, CandidateStatus.QUEUED]
    assert [c.state.rules for c in queued] == [(other,)]


def test_a_finding_then_what_to_do_is_kept_whole():
    """The instruction in the second sentence needs the first one's antecedent ("these columns")."""
    finding = ("When a table has a column such as `archived_at` or `deleted_at`, the reference program filters on "
               "that column, but the generated program does not.")
    todo = "If the generated program does not filter on these columns, it should always filter them."
    assert clean_rule(f"{finding} {todo}") == (f"{finding} {todo}", None)
    # an instruction first: only it is kept, as before
    assert clean_rule(f"{todo} {finding}") == (todo, None)
    # a finding followed by another finding is still not a rule
    assert clean_rule(f"{finding} The query will fail.")[1] is not None
