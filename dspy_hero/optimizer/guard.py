"""The memorization guard: a candidate may teach general rules, never answers.

It checks only the text a candidate adds to the current instruction (the seed is frozen and earlier
rules already passed), against the diagnosis cases the reflector saw. A literal or span is
*instance-specific*, and blocks the candidate, only when it comes from ONE training instance (that
case's question and other inputs, its gold program or expected output) and is not general language:

- the whole label of a case (a gold program or expected output of at least `min_label_chars`);
- a literal of one case's label -- a quoted string (``'dog'``, ``"Fresno"``) or a number (``1532``,
  ``30``) -- that the seed does not contain, or a quoted string of the added text found in one case's
  question;
- a span of `max_copied_tokens` or more consecutive tokens from one case's inputs or label.

General language never blocks: program keywords and functions (``COUNT(DISTINCT ...)``, ``strftime``,
``ORDER BY ... LIMIT``), format strings (``'%Y'``), numbers up to `max_general_number` (``LIMIT 10``
for top-10 questions), and spans made only of keywords, punctuation and common words. A literal that
several shown instances share (a value the task keeps using) is a pattern, not one instance's answer.
A label stringified from a mapping or list (a case's parameters, ``{'year': 2023, 'month': 3}``)
contributes its values, never its keys: a field name such as 'month' is not one instance's value, and
treating it as one blocked "compare by year, month and day" on the conventions task.
Likewise a string that a Python label (test code) uses only as a subscript or dict key
(``result['message']``) is a field name, not a value.
Why: the old guard blocked any quoted literal or two-digit number of a gold query, which refused the
rules a SQL task needs ("use strftime('%Y', ...)") while a rule naming an entity value passed only if
it was unquoted.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from typing import Any, Protocol

_TOKEN = re.compile(r"\w+|[^\w\s]")
_QUOTED = re.compile(r"'([^'\n]{1,80})'|\"([^\"\n]{1,80})\"|`([^`\n]{1,80})`")
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w.])")
_FORMAT = re.compile(r"^[%\W\d]*(?:%[a-zA-Z][%\W\d]*)+$")  # '%Y', '%Y-%m', '%d/%m/%Y'
GENERAL_WORDS = frozenset("""
select from where group by order having limit offset join inner left right outer cross natural on using as and
or not in is null like glob between distinct all any exists union intersect except case when then else end cast
count sum avg min max total strftime date datetime time julianday substr substring instr lower upper length trim
round abs coalesce ifnull nullif iif replace asc desc values insert update delete create table view index with
recursive over partition window rank row_number dense_rank integer text real numeric primary key foreign
match optional return unwind collect size labels type keys nodes relationships exists skip merge
def return if elif else for while in import from try except raise yield lambda none true false len sorted sort
list dict set tuple str int float range enumerate zip map filter sum min max any all isinstance append
the a an of to is are be for each every any all this that these those it its with without by per than then
when whenever always never use using only one two first last top most least highest lowest number numbers
column columns row rows table tables value values name names query queries question questions answer result
results same different
""".split())


@dataclass(frozen=True)
class GuardVerdict:
    allowed: bool
    reason: str


class Guard(Protocol):
    def check(self, added_text: str, seed: str, cases: list[Any]) -> GuardVerdict: ...


def _norm(text: str) -> str:
    return " ".join(str(text).lower().split())


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(str(text).lower())


def _general(literal: str, max_number: float) -> bool:
    low = literal.strip().lower()
    if not low or _FORMAT.match(low):
        return True
    try:
        return float(low) <= max_number
    except ValueError:
        pass
    words = re.findall(r"[a-z_]+", low)
    return bool(words) and all(w in GENERAL_WORDS for w in words) and not re.search(r"\d", low)


def _contains(text_norm: str, literal: str) -> bool:
    return bool(re.search(rf"(?<!\w){re.escape(literal.lower())}(?!\w)", text_norm))


class MemorizationGuard:
    """See the module docstring. `min_label_chars`: shorter labels ("3", "yes") are too common to
    match whole and are checked as literals. `max_copied_tokens`: the longest allowed run of tokens
    shared with one case. `max_general_number`: numbers up to this are general language."""

    def __init__(self, max_copied_tokens: int = 8, min_label_chars: int = 12, max_general_number: float = 10):
        self.max_copied_tokens = int(max_copied_tokens)
        self.min_label_chars = int(min_label_chars)
        self.max_general_number = max_general_number

    def check(self, added_text: str, seed: str, cases: list[Any]) -> GuardVerdict:
        text = _norm(added_text)
        if not text:
            return GuardVerdict(True, "nothing added")
        seed_norm = _norm(seed)
        sources = [(c, _norm(" ".join(map(str, [*getattr(c, "inputs", {}).values(), *getattr(c, "labels", {}).values()]))))
                   for c in cases]

        def owners(literal: str) -> list[Any]:
            return [c for c, src in sources if _contains(src, literal)]

        for case in cases:
            for name, value in getattr(case, "labels", {}).items():
                v = _norm(value)
                if len(v) >= self.min_label_chars and v in text:
                    return GuardVerdict(False, f"contains the label {name!r} of case {case.case_id}")
                for lit in _literals(value):
                    if _general(lit, self.max_general_number) or _contains(seed_norm, lit) or not _contains(text, lit):
                        continue
                    if len(owners(lit)) <= 1:
                        return GuardVerdict(False, f"contains the literal {lit!r} from the label {name!r} of case "
                                                   f"{case.case_id} (one instance's value, not a general rule)")
        for lit in _literals(added_text, numbers=False):
            if _general(lit, self.max_general_number) or _contains(seed_norm, lit) or self._condition(lit, added_text):
                continue
            found = owners(lit)
            if len(found) == 1:
                return GuardVerdict(False, f"quotes {lit!r} from case {found[0].case_id} (one instance's value)")
        added = _ngrams(_tokens(added_text), self.max_copied_tokens)
        added = {g for g in added if not all(t in GENERAL_WORDS or not t.isalnum() for t in g)}
        if added:
            counts: dict[tuple[str, ...], list[Any]] = {}
            for case, src in sources:
                for g in added & _ngrams(_tokens(src), self.max_copied_tokens):
                    counts.setdefault(g, []).append(case)
            single = sorted(g for g, cs in counts.items() if len(cs) == 1)
            if single:
                case = counts[single[0]][0]
                return GuardVerdict(False, f"copies {self.max_copied_tokens}+ tokens from case {case.case_id}: "
                                           f"{' '.join(single[0])!r}")
        return GuardVerdict(True, "no label, one-instance literal or copied span")

    def _condition(self, literal: str, added_text: str) -> bool:
        """Is a quoted span of the added text a condition or expression over names, in backticks (a
        column `deleted_at IS NULL`, `is_sample = 0`), rather than a value? Such a span is general in
        form; the values inside it are checked as literals like any other (a quoted string or a number
        above `max_general_number` in it keeps it a value). Why: on the soft-deletion demo (session 9)
        the reflector's rule "... always add the condition `archived_at IS NULL` (or `deleted_at IS
        NULL`) to the WHERE clause." was blocked because one shown case's reference had `deleted_at`."""
        if f"`{literal}`" not in added_text or re.search(r"['\"]", literal) or not _OPERATOR.search(literal):
            return False
        return all(float(n) <= self.max_general_number for n in _NUMBER.findall(literal))


_OPERATOR = re.compile(r"\bis\s+(?:not\s+)?null\b|[=<>/*+]", re.IGNORECASE)


def _structured(text: str) -> Any:
    """The dict / list / tuple a label was stringified from (evidence stores labels as str), else None."""
    t = text.strip()
    if len(t) < 2 or (t[0], t[-1]) not in (("{", "}"), ("[", "]"), ("(", ")")):
        return None
    try:
        data = ast.literal_eval(t)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return data if isinstance(data, (dict, list, tuple)) else None


def _leaves(data: Any) -> list[str]:
    """The values of a structured label, never its keys: in ``{'year': 2023, 'month': 3}`` the
    instance's values are 2023 and 3; 'month' names a field, as general as the word itself."""
    if isinstance(data, dict):
        return [x for v in data.values() for x in _leaves(v)]
    if isinstance(data, (list, tuple, set)):
        return [x for v in data for x in _leaves(v)]
    return [] if data is None or isinstance(data, bool) else [str(data)]


@functools.lru_cache(maxsize=512)  # the same labels are checked against every candidate of a run
def _code_field_names(text: str) -> frozenset[str]:
    """The strings a Python label (a task's test code, a gold program) uses only as field names: a
    subscript key (``result['message']``) or a dict key, never as a value anywhere in it. Like the keys
    of a structured label they name a field; the test of BigCodeBench/350 reads ``result['message']``,
    which blocked "raise an exception with a descriptive message". Text that is not Python has none."""
    if "[" not in text and "{" not in text:
        return frozenset()
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return frozenset()
    keys: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            keys.add(id(node.slice))
        elif isinstance(node, ast.Dict):
            keys.update(id(k) for k in node.keys if k is not None)
    strings = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    values = {n.value for n in strings if id(n) not in keys}
    return frozenset(n.value for n in strings if id(n) in keys) - values


def _literals(value: str, numbers: bool = True) -> list[str]:
    text = str(value)
    data = _structured(text) if numbers else None
    if data is not None:  # a label's parameters: each value is a literal, quoted inside or not
        return [x for leaf in _leaves(data) for x in (_literals(leaf) if _QUOTED.search(leaf) else [leaf.strip()]) if x]
    fields = _code_field_names(text) if numbers else frozenset()
    out = [q for a, b, c in _QUOTED.findall(text) if (q := (a or b or c).strip()) not in fields]
    if numbers:
        out += _NUMBER.findall(text)
        if not out and 2 <= len(text.strip()) < 40 and re.search(r"\d", text):
            out.append(text.strip())  # a short expected output such as "1532"
    return [x for x in out if x]


def _ngrams(tokens: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)} if n > 0 else set()
