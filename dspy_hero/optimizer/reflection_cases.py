"""Reflection that a small model can do: one failing case, one short rule.

Why this exists: with a 1.5B model as reflection LM, the evidence-wide prompts of `RuleProposer`
(several thousand tokens of cases, two structured output fields) came back empty or as SQL, so no
candidate survived (measured on Spider with Qwen2.5-Coder-1.5B). A small model can still answer a
narrow question about one failure: "this program failed like this; state a general rule that avoids
it". So `CaseRuleProposer`:

1. builds the textual gradient *by code* from the cases: which behaviours pass (to preserve) and
   which failure categories occur (to revise), each with the case ids it rests on. The categories are
   the counted categories of the programmatic diagnosis (`dspy_hero.diagnosis`) when the cases carry
   one, else a coarse label read from the metric's feedback;
2. picks up to K failing cases from different categories (most frequent first), and asks the
   reflection LM for one rule per case *against the stated pattern* ("3 of 9 failing cases: a column
   is taken from a table that does not have it; in this case: column `name` is not in ..."): shown
   only the case, the 1.5B model wrote "The correct query should be SELECT ..." instead of a rule;
3. keeps a rule only if it reads like an instruction (words, not code) and cites its case, so the
   usual guard and paired acceptance see well-formed, evidence-tied candidates.

`FallbackProposer` runs the evidence-wide proposer first and falls back to this one only when it
produced no usable edit, so strong reflection models keep the richer prompt and pay nothing extra.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any

import dspy

from dspy_hero.diagnosis import Category
from dspy_hero.fields import is_locator
from dspy_hero.optimizer.evidence import shared_context_names
from dspy_hero.optimizer.instructions import apply_edit
from dspy_hero.optimizer.reflection import (
    EXAMPLE_WORDS,
    Proposal,
    ProposedEdit,
    Proposer,
    ReflectionContext,
    _call,
    copies_an_example,
)

_CODE = re.compile(
    r"```|\bselect\b[^.]*\bfrom\b|\bmatch\s*\(|\breturn\s+\w+\s*\.|\bdef\s+\w+\s*\(|\bimport\s+\w+|[{};]\s*$",
    re.IGNORECASE,
)
# A placeholder that names a column by its role inside a backticked condition (`<that column> IS NULL`): the
# wording the 1.5B task model followed most (17 vs 9 fixes of 56, RESULTS.md session 9), not markup.
_ROLE_PLACEHOLDER = re.compile(r"(?<=`)<[a-z][a-z ]{2,30}>(?=[^`]*`)")
# How instructions start; the prompt asks for Always / Never / When, small models also write these.
_INSTRUCTION_START = re.compile(
    r"^(?:always|never|when|whenever|if|for|use|do|don't|do not|avoid|prefer|make|ensure|return|include|"
    r"select|write|check|only|keep|count|join|group|order|sort|filter|handle|qualify|treat|match|"
    r"remember|before|after|to|in|each|every|read|map|compute|exclude|convert|compare|look|divide|multiply|"
    r"ignore|cast|parse|trim|normalize|normalise|skip|drop|apply|assume|verify|inspect)\b",
    re.IGNORECASE,
)
# Where a declarative rule's imperative clause starts: "Amounts may be stored in minor units: check
# sample values and convert ...", "Rows with a deletion timestamp are gone; exclude them ...".
_CLAUSE_BREAK = re.compile(r"\s*(?::|;|\s[-\u2013\u2014]\s|,\s*so\s)\s*")


# A conditional opening: its main clause, not the opening word, says whether there is anything to do.
_CONDITIONAL = re.compile(r"^(?:when|whenever|if)\b", re.IGNORECASE)
_MODAL = re.compile(r"\b(?:should|must|needs? to|has to|have to)\b", re.IGNORECASE)
# A clause that opens with a subject states something ("the query will fail", "but the generated program
# does not"); one that opens with a verb outside _INSTRUCTION_START ("take it from ...") may still instruct.
_STATEMENT = re.compile(r"^(?:(?:but|and|or|so|then|yet|while|whereas)\s+)?(?:the|a|an|this|that|these|those|"
                        r"it|its|they|their|there|such|both|no)\b", re.IGNORECASE)


def _top_level_clauses(sentence: str) -> list[str]:
    """The sentence cut at commas outside parentheses and backticks (a list in "(such as a, b)" stays whole)."""
    parts, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(sentence):
        if ch == "`":
            quoted = not quoted
        elif not quoted and ch in "([":
            depth += 1
        elif not quoted and ch in ")]":
            depth = max(0, depth - 1)
        elif ch == "," and not quoted and depth == 0:
            parts.append(sentence[start:i].strip())
            start = i + 1
    return parts + [sentence[start:].strip()]


def _instructs(clause: str) -> bool:
    return bool(_INSTRUCTION_START.match(clause)) or any(
        _INSTRUCTION_START.match(part) for part in _CLAUSE_BREAK.split(clause)[1:] if part)


def reads_as_instruction(sentence: str) -> bool:
    """Does the sentence start with an instruction, or state a fact and then say what to do about it
    in a clause of its own (after ':', ';', a dash or ', so')? A declarative sentence with no such
    clause ("The query failed because ...", "Amounts are stored in cents.") is not a rule, and neither
    is a conditional whose main clause only describes: the 1.5B reflector wrote "When a table has a
    column such as `deleted_at`, the reference program filters on that column, but the generated
    program does not." and put what to do in a second sentence (RESULTS.md session 22)."""
    if _CONDITIONAL.match(sentence):
        main = _top_level_clauses(sentence)[1:]  # what follows the condition (a list's items included)
        if any(_instructs(c) or _MODAL.search(c) for c in main):
            return True
        return not any(_STATEMENT.match(c) for c in main)
    return _instructs(sentence)
_LEAD = re.compile(r"^(?:rule|new rule|general rule|answer)\s*[:\-]\s*", re.IGNORECASE)


# The per-pattern prompt's worked examples, one per kind of reference difference, each with the names
# EXAMPLE_WORDS lists. The asked pattern's own kind goes first (`rule_instructions`): the 1.5B reflector
# writes in the first example's mould, and shown the missing-filter example first it answered an
# extra-condition pattern (conventions demo) with "... (such as subscribed or status), always leave
# those rows out".
WORKED_EXAMPLES: dict[Category, str] = {  # wrapped as the prompt shows them (a reflow changes a 1.5B answer)
    Category.REF_FILTER: (
        '"(1) the reference adds the condition `is_sample = 0`. (2) the reference adds the condition\n'
        '  `demo_row = 0`." -> "When a table has a column that flags sample or demo rows (such as is_sample\n'
        '  or demo_row), those rows do not count: always add the condition `<that column> = 0` to the WHERE\n'
        '  clause."'),
    Category.REF_COLUMN_FORM: (
        '"(1) the reference reads `temp_f` as `(temp_f - 32) * 5 / 9`. (2) the reference reads `high_f`\n'
        '  as `(high_f - 32) * 5 / 9`." -> "When a temperature column is stored in Fahrenheit (its name ends\n'
        '  in _f), convert it with (x - 32) * 5 / 9 before comparing or averaging."'),
    Category.REF_EXTRA_FILTER: (
        '"(1) the prediction adds the condition `sales_channel = \'web\'`; the reference has no condition on\n'
        '  `sales_channel`. (2) the prediction adds the condition `promo_tier = \'gold\'`; the reference has no\n'
        '  condition on `promo_tier`." -> "Filter only on what the question asks for: never add a condition on\n'
        '  a column (such as sales_channel or promo_tier) that the question does not ask about."'),
}

_RULE_TASK = """A program generator keeps making the mistake described in failure_pattern; failing_case is one
example of it. Write ONE short, general rule to add to its instructions so that it avoids this
kind of mistake on other questions too. When the instances show what the correct (reference)
programs do, find what they have in common (the kind of column, the kind of condition or
conversion) and tell the generator to do the same whenever it meets that kind of column, on any
database. Say what such columns record (their names show it) and what the correct programs do
with them. {count} examples of instances and a good rule for them:"""

_RULE_END = """Do not correct this program and do not write a query: write an instruction. Do not mention this
question's specific values or answer. Answer with one sentence."""


# Shown only when its own kind is asked: with it in every prompt, an idle `hero demo` (d25f2f5) answered the
# soft-deletion pattern with "When a query asks for a count of rows, always filter on the columns that the
# question asks about." where earlier demos wrote the right rule; every other pattern keeps session 7's prompt.
_OWN_KIND_ONLY = frozenset({Category.REF_EXTRA_FILTER})


def rule_instructions(first: Category | None = None) -> str:
    """The per-pattern prompt's instructions: the worked example of `first`'s kind first, then the
    usual ones (an example in `_OWN_KIND_ONLY` appears only for its own kind)."""
    kinds = [k for k in sorted(WORKED_EXAMPLES, key=lambda k: k is not first) if k is first or k not in _OWN_KIND_ONLY]
    task = _RULE_TASK.format(count=("Two", "Three")[len(kinds) - 2])
    return "\n".join([task, *(f"- {WORKED_EXAMPLES[k]}" for k in kinds), _RULE_END])


class RuleFromFailure(dspy.Signature):
    __doc__ = rule_instructions()

    task_instructions: str = dspy.InputField(desc="what the generator is asked to do")
    failure_pattern: str = dspy.InputField(desc="the mistake, found by program analysis, and how often it occurs")
    failing_case: str = dspy.InputField(desc="one example: the inputs, the generated program, its feedback and diagnosis")
    rule: str = dspy.OutputField(desc="one general rule, one sentence, no code")


def failure_category(feedback: str) -> str:
    """A coarse label of how a case failed, for spreading proposals over different failure kinds."""
    text = (feedback or "").strip()
    m = re.search(r"\b([A-Z][A-Za-z]*(?:Error|Exception|Timeout|Rejected|Limit|Failure))\b", text)
    if m:
        return m.group(1)
    low = text.lower()
    for key in ("row count", "column count", "order", "values", "empty", "no output", "timeout"):
        if key in low:
            return f"wrong result ({key})"
    return "wrong result"


def case_categories(case: Any) -> list[str]:
    """The categories a failing case is counted under: its diagnosis's categories (most specific
    first), else the coarse label of its feedback."""
    diag = getattr(case, "diagnosis", None)
    if diag is not None:
        cats = [c.value for c in diag.categories]  # REF_* only exist when training references were asked for
        if cats:
            return cats
    return [failure_category(case.feedback)]


def category_groups(cases: list[Any]) -> list[tuple[str, list[Any]]]:
    """(category, failing cases counted under it), most frequent first; ties: diagnosis categories in
    the enum's order (specific before generic, as `count_categories` ranks them), then first seen."""
    groups: OrderedDict[str, list[Any]] = OrderedDict()
    for c in cases:
        for cat in case_categories(c):
            groups.setdefault(cat, []).append(c)
    rank = {c.value: i for i, c in enumerate(Category)}
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), rank.get(kv[0], len(rank))))


def causes_first(groups: list[tuple[str, list[Any]]]) -> list[tuple[str, list[Any]]]:
    """`groups` with the symptom categories (`Category.symptom`: wrong values, wrong row count, ...)
    after every other one, each part in its order: the reflector is asked about what the programs did
    wrong before what their results show. Why: in a probe on the conventions demo's single-table
    questions "wrong values" was the largest category (4 of 6 failing cases) and its instances name only
    the columns the predictions filtered on, from which the 1.5B reflector copied the prompt's example
    three times, while the same cases' "filter differs from the reference" names the deletion columns;
    on Spider the symptom rules it wrote ("check if the filter is correctly applied") changed nothing."""
    known = {c.value: c for c in Category}
    return sorted(groups, key=lambda kv: kv[0] in known and known[kv[0]].symptom)


def evidence_gradient(cases: list[Any], shown: set[str]) -> str:
    """The textual gradient, built by code: failure categories to revise, passing cases to preserve."""
    failing = [c for c in cases if not c.passed and c.case_id in shown]
    passing = [c for c in cases if c.passed and c.case_id in shown]
    revise = [f"- {cat}: {len(group)} case(s) ({', '.join(c.case_id for c in group[:8])})"
              for cat, group in category_groups(failing)]
    preserve = (f"- {len(passing)} program(s) executed and matched the expected result "
                f"({', '.join(c.case_id for c in passing[:8])})") if passing else "- (no passing case shown)"
    return "Preserve:\n" + preserve + "\n\nRevise:\n" + ("\n".join(revise) or "- (no failing case shown)")


def _render_case(case: Any, max_chars: int, omit: set[str] = frozenset()) -> str:
    def cut(text: Any) -> str:
        text = " ".join(str(text).split())
        return text if len(text) <= max_chars else text[:max_chars] + " ..."

    lines = [f"{k}: {cut(v) if k not in omit else '(shared by several cases; omitted)'}"
             for k, v in case.inputs.items() if not is_locator(k)]
    lines += [f"generated {k}: {cut(v)}" for k, v in case.program.items() if k != "raw_output"]
    lines.append(f"execution feedback: {cut(case.feedback)}")
    diag = getattr(case, "diagnosis", None)
    if diag is not None and diag.facts:
        lines.append(f"diagnosis: {cut(diag.line())}")
    if getattr(case, "reference", None):  # set only with training_references=True
        lines.append(f"reference program (training case): {cut(case.reference)}")
    return "\n".join(lines)


def _instance(case: Any, category: str) -> str | None:
    """The case's own finding of `category` (its first), or None."""
    diag = getattr(case, "diagnosis", None)
    own = [f.text for f in diag.facts if f.category.value == category] if diag is not None else []
    return own[0] if own else None


def instance_kind(text: str) -> str:
    """An instance with the names and values it quotes blanked: "the reference adds the condition
    `archived_at IS NULL`; ... on `archived_at`" and the same with `deleted_at` are one kind, "...
    `category = 'Tools'` ..." another. What instances of one convention share across databases."""
    def blank(m: re.Match) -> str:
        inner = re.sub(r"'[^']*'", "'v'", m.group(1))
        inner = re.sub(r"\b\d+(?:\.\d+)?\b", "n", inner)
        return "`" + _IDENTIFIER.sub(lambda w: w.group(0) if w.group(0).lower() in _SQL_WORDS else "C", inner) + "`"
    return re.sub(r"`([^`]*)`", blank, text)


def same_kind(category: str, group: list[Any]) -> list[Any]:
    """The group's cases whose instance is of the group's most frequent kind (`instance_kind`), when
    one kind recurs more often than any other; else [] (every instance its own kind: nothing to prefer).

    Why: a category such as "filter differs from the reference" mixes kinds: on the soft-deletion
    task (sessions 9-10) its instances were `deleted_at IS NULL`, `archived_at IS NULL` and one
    `category = ...` from an unrelated question, and the rule the 1.5B reflector wrote from the mix
    named `category` beside the deletion columns ("... such as archived_at, category or deleted_at,
    the generated program should filter on this column ...", 3 fixes : 3 breaks on 32 pairs)."""
    kinds: dict[str, list[Any]] = {}
    for c in group:
        if (text := _instance(c, category)) is not None:
            kinds.setdefault(instance_kind(text), []).append(c)
    sizes = sorted((len(v) for v in kinds.values()), reverse=True)
    if not sizes or sizes[0] < 2 or (len(sizes) > 1 and sizes[1] == sizes[0]):
        return []
    return next(v for v in kinds.values() if len(v) == sizes[0])


def failure_pattern(category: str, group: list[Any], total: int, case: Any, kind: list[Any],
                    max_instances: int = 4) -> str:
    """The pattern the reflector is asked to write a rule for: the counted category in words and its
    instances in several cases (the chosen case's first, then those of the group's recurring `kind`,
    `same_kind`, alone when there is one). Several instances, often from different databases, are what
    lets a small model see the general kind ("a deletion timestamp column") rather than one database's
    name for it."""
    known = {c.value: c for c in Category}
    words = known[category].describe() if category in known else f"the program failed with {category}"
    text = f"{len(group)} of {total} failing case(s): {words}."
    instances: list[str] = []
    for c in [case] + [g for g in (kind or group) if g is not case]:
        own = _instance(c, category)
        if own and own not in instances:
            instances.append(own)
        if len(instances) >= max_instances:
            break
    if len(instances) == 1:
        text += f" In this case: {instances[0]}."
    elif instances:
        text += " Instances: " + " ".join(f"({i}) {t}." for i, t in enumerate(instances, 1))
    return text


def instance_names(pattern: str, limit: int = 6) -> list[str]:
    """The identifiers a failure pattern quotes (`archived_at`, `singer`), first seen first."""
    names: list[str] = []
    for name in re.findall(r"`([A-Za-z_]\w*)`", pattern):
        if name not in names and name.lower() not in EXAMPLE_WORDS:
            names.append(name)
    return names[:limit]


# What the names a pattern quotes are, and how a rule about them opens, per program language (else None's).
_OPENINGS = {"sql": ("columns", "When a table has a column such as {}"),
             "cypher": ("properties", "When a node or relationship has a property such as {}"),
             None: ("names", "When the program meets {}")}


_IDENTIFIER = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")


# Reference-diff patterns about a kind of column (what the correct programs do with it): a rule for one
# must name the columns its instances quote, else it is about something else.
_ABOUT_COLUMNS = frozenset({Category.REF_FILTER.value, Category.REF_COLUMN_FORM.value, Category.REF_COMPARED_VALUE.value})


def off_pattern(rule: str, pattern_names: list[str], case: Any, category: str) -> list[str] | None:
    """Why a usable-looking rule is not about the pattern it was asked for (None: it is): the names of
    the case's own program it is about instead (`case_only_names`), or, for a pattern about a kind of
    column (`_ABOUT_COLUMNS`), [] when it names none of the pattern's columns. Seen on the soft-deletion
    demo (session 9), asked about "the reference adds the condition `archived_at IS NULL` ...
    `deleted_at IS NULL`": "When a table has a column that flags members from a specific country (such
    as country), always leave those members out of the query." (the case filtered on `country`) and, on
    the next run, "When a query filters on a column that is not present in the database schema, the
    result will be incorrect." """
    if not pattern_names or any(n.lower() in rule.lower() for n in pattern_names):
        return None
    strays = case_only_names(rule, case)
    return strays if strays or category in _ABOUT_COLUMNS else None


def case_only_names(rule: str, case: Any) -> list[str]:
    """The identifiers of the case's generated program that the rule names (SQL keywords aside): for a
    rule that names none of its pattern's own names (`off_pattern` checks that first), a rule about the
    case at hand, not about the pattern it was asked for."""
    program = " ".join(str(v) for k, v in getattr(case, "program", {}).items() if k != "raw_output")
    own = {w.lower() for w in _IDENTIFIER.findall(program) if "_" in w or w.lower() not in _SQL_WORDS}
    named = [w for w in dict.fromkeys(_IDENTIFIER.findall(rule)) if w.lower() in own and len(w) > 2]
    return named


_SQL_WORDS = frozenset("""select from where and or not in is null as on join inner left right outer group by order
having limit distinct count sum avg min max case when then else end like between exists union all asc desc
match return with optional create delete set def import true false none""".split())


def _opening(names: list[str], language: str | None) -> tuple[str, list[str], str]:
    """(what the names are called, the first three names, the sentence start a re-ask hands over)."""
    some = names[:3]
    listed = ", ".join(some[:-1]) + " or " + some[-1] if len(some) > 1 else some[0]
    kind, opening = _OPENINGS.get(language, _OPENINGS[None])
    return kind, some, opening.format(listed)


def copy_problem(rule: str, names: list[str], language: str | None = None) -> str:
    """What the re-ask says about an answer that copied a worked example: which of the example's names
    it used and, when the pattern quotes names of its own, the opening the rule must have (worded for
    the program's language: columns, properties, or the names alone).

    Why the opening: told only to name the evidence's columns instead, the 1.5B reflector repeated the
    copy (conventions demo, soft-deletion pattern, at temperature 0 and 1); the copy is of the
    example's whole sentence, so the re-ask hands it a sentence start about this evidence's names."""
    used = ", ".join(w for w in EXAMPLE_WORDS if w in rule.lower())
    why = f"it copies a worked example instead of describing this evidence: {used} are not in it"
    if not names:
        return why
    kind, _, start = _opening(names, language)
    return f'{why}. Write the rule about the {kind} above; start it with "{start},"'


def off_pattern_problem(strays: list[str], names: list[str], language: str | None = None) -> str:
    """What the re-ask says about a rule that is not about its pattern (`off_pattern`): the opening of a
    rule about the pattern's names, as for a copied example (`copy_problem`)."""
    kind, some, start = _opening(names, language)
    why = (f"it is about {', '.join(strays)}, which this one case uses, not about the pattern" if strays else
           f"it names none of the {kind} the instances name ({', '.join(some)})")
    return f'{why}. Write the rule about the {kind} the instances name; start it with "{start},"'


_ADDED_CONDITION = re.compile(r"adds the condition `([^`]+)`")
_COMPARISON = re.compile(r"(?:[=<>]|\b(?:is|like|in|between)\b)", re.IGNORECASE)


def other_condition(rule: str, pattern: str, category: str) -> tuple[list[str], list[str]] | None:
    """For a pattern of conditions the reference adds (`Category.REF_FILTER`): (the rule's conditions,
    the instances' conditions) when the rule quotes conditions and none has the form of any instance's
    (`instance_kind`, a role placeholder read as a name), or quotes none where two or more instances
    add conditions of one form; else None.

    Why: asked about `archived_at IS NULL` and `deleted_at IS NULL` (soft-deletion task, session 11),
    the 1.5B reflector put those names into the worked example's sentence and kept its condition:
    "... (such as archived_at or deleted_at), those rows do not count: always add the condition
    `<that column> = 0` ...", a rule that would empty every answer it is followed in."""
    if category != Category.REF_FILTER.value:
        return None
    theirs = _ADDED_CONDITION.findall(pattern)
    ours = [c for c in re.findall(r"`([^`]+)`", rule) if _COMPARISON.search(c)]
    if not theirs:
        return None
    kinds, distinct = {instance_kind(f"`{c}`") for c in theirs}, list(dict.fromkeys(theirs))
    if not ours:
        # No condition at all, where the instances add one of one form: "... it should always filter
        # them" (session 22) fixed 5 of 30 pairs, the same rule with `<that column> IS NULL` 29 of 76.
        return ([], distinct) if len(theirs) >= 2 and len(kinds) == 1 else None
    if any(instance_kind("`" + re.sub(r"<[^<>`]+>", "x", c) + "`") in kinds for c in ours):
        return None
    return ours, distinct


def other_condition_problem(ours: list[str], theirs: list[str]) -> str:
    """What the re-ask says about a rule whose condition is not the references' (`other_condition`), or
    that names none."""
    added = ', '.join(f'`{c}`' for c in theirs[:3])
    if not ours:
        return f"it does not say which condition to add; the reference programs add {added}; say what they add"
    return (f"its condition {', '.join(f'`{c}`' for c in ours)} is not the one the reference programs add "
            f"({added}); say what they add")


def clean_rule(text: str) -> tuple[str, str | None]:
    """(rule, problem): the first sentence of a free-text answer (with the next one when only that one
    says what to do), or why it is not a usable rule."""
    raw = str(text or "").strip()
    if not raw:
        return "", "empty answer"
    line = next((ln.strip() for ln in raw.splitlines() if ln.strip() and not ln.strip().startswith("[[")), "")
    line = _LEAD.sub("", line.lstrip("-*•0123456789.) ").strip().strip('"').strip())
    sentences = [t.strip() for t in re.split(r"(?<=[.!?])\s+", line) if t.strip()] or [""]
    sentence, instructive = sentences[0], reads_as_instruction(sentences[0])
    if not instructive and len(sentences) > 1 and reads_as_instruction(sentences[1]):
        # a finding, then what to do about it ("... the generated program does not. If it does not
        # filter on these columns, it should ..."): the second sentence alone would lose its antecedent
        sentence, instructive = f"{sentence} {sentences[1]}", True
    if _CODE.search(sentence):
        return sentence, "looks like code, not an instruction"
    if re.search(r"[{}\[\]#<>|\\]", _ROLE_PLACEHOLDER.sub("", sentence)):
        return sentence, "contains markup or code symbols"
    if not instructive:
        return sentence, "does not read as an instruction (Always / Never / When / Use ..., or a fact then what to do)"
    words = re.findall(r"[A-Za-z]+", sentence)
    if len(words) < 4:
        return sentence, "too short to be a general instruction"
    if len(sentence.split()) > 60:
        return sentence, "too long for one rule"
    if len(words) < 0.6 * len(sentence.split()):
        return sentence, "mostly symbols, not words"
    return sentence.rstrip(), None


def _purest(group: list[Any], depth: int, used: set[str]) -> Any:
    """The group's unused case with the fewest other findings (ties: first seen), at the `depth`-th
    choice of this category: a case that shows the pattern alone keeps a small model on it (shown a
    case with an unrelated error as well, the 1.5B model wrote a rule about that error)."""
    if depth >= len(group):
        return None
    free = [c for c in group if c.case_id not in used]
    def others(c: Any) -> int:
        diag = getattr(c, "diagnosis", None)
        return len(diag.categories) if diag is not None else 0
    return min(free, key=others) if free else None


class CaseRuleProposer:
    """One reflection-LM call per chosen failing case, each returning one rule (see module docstring)."""

    def __init__(self, max_case_chars: int = 400) -> None:
        self.write_rule = dspy.Predict(RuleFromFailure)
        self._writers: dict[Category, dspy.Predict] = {}
        self.max_case_chars = max_case_chars

    def choose_cases(self, ctx: ReflectionContext) -> list[Any]:
        """Up to K failing cases shown in the evidence, one per category first (largest first)."""
        return [case for case, _ in self.choose(ctx)]

    def choose(self, ctx: ReflectionContext) -> list[tuple[Any, str]]:
        """(case, failure pattern text) for up to K failing shown cases: categories round-robin, most
        frequent first, a case used once."""
        return [(case, pattern) for case, pattern, _, _ in self._choose(ctx)]

    def _choose(self, ctx: ReflectionContext) -> list[tuple[Any, str, Any, str]]:
        """`choose`, each with a spare: the same pattern shown through another unused case of its
        category (None if there is none), for when the first case yields no usable rule; and the
        category."""
        shown = set(ctx.shown_case_ids)
        failing = [c for c in ctx.cases if not c.passed and c.case_id in shown]
        ordered = [(cat, group, same_kind(cat, group)) for cat, group in causes_first(category_groups(failing))]
        picks: list[tuple[Any, str, str, list[Any], list[Any]]] = []
        used: set[str] = set()
        depth = 0
        while len(picks) < ctx.num_candidates and any(depth < len(g) for _, g, _ in ordered):
            for cat, group, kind in ordered:
                if len(picks) >= ctx.num_candidates:
                    break
                pick = _purest(kind, depth, used) or _purest(group, depth, used)  # the recurring kind first
                if pick is not None:
                    used.add(pick.case_id)
                    picks.append((pick, failure_pattern(cat, group, len(failing), pick, kind), cat, group, kind))
            depth += 1
        out = []
        for pick, pattern, cat, group, kind in picks:
            spare_case = _purest(kind, 0, used) or _purest(group, 0, used)
            spare = (spare_case, failure_pattern(cat, group, len(failing), spare_case, kind)) if spare_case else None
            out.append((pick, pattern, spare, cat))
        return out

    def _writer(self, category: str) -> dspy.Predict:
        """The rule writer for a pattern of `category`: its own kind's worked example first, where
        there is one (else `write_rule`, the usual order)."""
        kind = next((k for k in WORKED_EXAMPLES if k.value == category), None)
        if kind is None:
            return self.write_rule
        if kind not in self._writers:
            self._writers[kind] = dspy.Predict(RuleFromFailure.with_instructions(rule_instructions(kind)))
        return self._writers[kind]

    @staticmethod
    def _retry_config(ctx: ReflectionContext, attempt: int) -> dict[str, Any] | None:
        """The first answer at the LM's own setting; each retry sampled at the round's reflection
        temperature with its own rollout id. Why: at temperature 0 the 1.5B reflector answered the
        re-ask with the same copy of the prompt's example as before (probes on the conventions demo):
        a greedy retry of a near-identical prompt mostly buys the same answer. (Sampled, it wrote
        another rule there, not a better one: the acceptance test is what keeps such rules out.) A
        repeated question samples its first answer too: greedy, it would be the earlier round's."""
        if (attempt == 0 and not ctx.repeat) or ctx.temperature <= 0:
            return None
        return ctx.lm_config(attempt)

    def propose(self, ctx: ReflectionContext) -> Proposal:
        gradient = evidence_gradient(ctx.cases, set(ctx.shown_case_ids))
        edits: list[ProposedEdit] = []
        raws: list[str] = []
        errors: list[str] = []
        instructions = ctx.seed + (("\n\nRules already tried and rejected (write a different one):\n"
                                    + "\n".join(f"- {r}" for r in ctx.rejected)) if ctx.rejected else "")
        shared = set(shared_context_names(ctx.cases))
        for first, pattern, spare, category in self._choose(ctx):
            writer = self._writer(category)
            # One re-ask, told why the first answer was not usable; then, once, the same pattern through
            # its spare case: at temperature 0 the 1.5B model repeated its unusable answer when re-asked
            # (a copy of the prompt's example, twice), and another case is another prompt.
            attempts = [(first, pattern, False), (first, pattern, True)] + ([(*spare, False)] if spare else [])
            rule, problem, case, copied = "", None, first, False  # copied: an answer not to show again
            for n, (case, pattern, reask) in enumerate(attempts):
                # the shared context (a schema) is omitted: shown it, the 1.5B model wrote rules about its columns
                shown = _render_case(case, self.max_case_chars, shared)
                asked = pattern if not reask else f"{pattern}\nYour previous answer was not usable ({problem})" + (
                    "" if copied else f": {rule or '(empty)'}")  # a copy shown again is copied again
                try:
                    out = _call(writer, ("rule",), "rule", self._retry_config(ctx, n),
                                task_instructions=instructions, failure_pattern=asked, failing_case=shown)
                except Exception as exc:  # one failed call costs one candidate, not the round
                    errors.append(f"{type(exc).__name__}: {str(exc).strip()[:200]}")
                    raws.append(f"{case.case_id}: {errors[-1]}")
                    break
                raw = out.get("rule", "")
                raws.append(f"{case.case_id}{' (re-asked)' if reask else ''}: {raw}")
                rule, problem = clean_rule(raw)
                copied = bool(rule) and not problem and copies_an_example(rule, pattern + shown)
                names = instance_names(pattern)
                if copied:
                    problem = copy_problem(rule, names, case.language)
                elif rule and not problem and (strays := off_pattern(rule, names, case, category)) is not None:
                    problem = off_pattern_problem(strays, names, case.language)
                    copied = True  # not shown again either: the opening replaces it
                elif rule and not problem and (conditions := other_condition(rule, pattern, category)) is not None:
                    problem = other_condition_problem(*conditions)  # shown again: only its condition is wrong
                if rule and not problem and any(rule.lower() == e.rule.lower() for e in edits):
                    problem = "duplicate of another proposed rule"
                if not problem:
                    break
            if rule or problem:
                edits.append(ProposedEdit("add", rule, None, [case.case_id], f"ADD: {rule} ({case.case_id})", problem))
        error = errors[0] if errors and not edits else None  # every call failed: the LM is down
        return Proposal(gradient=gradient, raw="\n".join(raws), edits=edits, error=error)


class FallbackProposer:
    """`primary` first; `fallback` only when none of the primary's edits is usable.

    Usable means parsed without a problem, not an edit already rejected against this prompt,
    applicable to the current rules (not a rule already
    present, not a REPLACE/DELETE of a rule number that does not exist: small models often re-propose
    a rule adopted in an earlier round) and, when a `guard` is given, allowed by it against the cases
    the reflector was shown (as the optimizer checks it): a small model's evidence-wide answer is
    often one instance-specific rule ("when pettype = 'dog' ...") that the memorization guard would
    block, which must not stop the per-case proposer from running. A strong reflection model whose
    edits are usable pays nothing extra. (Length and count limits are left to the optimizer: the
    per-case rules would meet the same ones.)
    """

    def __init__(self, primary: Proposer, fallback: Proposer, guard: Any = None) -> None:
        self.primary = primary
        self.fallback = fallback
        self.guard = guard

    def usable(self, edit: ProposedEdit, ctx: ReflectionContext) -> bool:
        if edit.problem is not None:
            return False
        if edit.to_edit().describe() in ctx.rejected:  # small models repeat a rejected rule despite being told
            return False
        if isinstance(apply_edit(tuple(ctx.rules), edit.to_edit(), max_rules=10**9, max_rule_chars=10**9), str):
            return False
        shown = set(ctx.shown_case_ids)
        return self.guard is None or self.guard.check(edit.rule, ctx.seed, [c for c in ctx.cases if c.case_id in shown]).allowed

    def propose(self, ctx: ReflectionContext) -> Proposal:
        first = self.primary.propose(ctx)
        if first.texts or any(self.usable(e, ctx) for e in first.edits):
            return first
        second = self.fallback.propose(ctx)
        why = first.error or ("no usable edit" if first.edits else "no edit parsed")
        names = type(self.primary).__name__, type(self.fallback).__name__
        second.gradient = second.gradient + f"\n\n(fallback {names[1]}: {names[0]} gave {why})"
        second.raw = f"[{names[0]}]\n{first.raw}\n[{names[1]}]\n{second.raw}"
        second.edits = first.edits + second.edits  # keep the unusable ones on record with their problems
        if not any(e.problem is None for e in second.edits):
            second.error = first.error or second.error
        return second
