"""A bank of execution-verified training examples, searched lexically (BM25) at test time.

HERO-T's second evidence source: worked examples of similar tasks whose program is known to run
(or to pass the metric). Only verified programs enter the bank, so a retrieved pattern never teaches
a broken idiom. Retrieval is lexical because task texts share table, column and library names that
an embedding model may blur, and because it needs no model and no network.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import dspy

from dspy_hero.fields import (
    LABEL_FIELDS,
    LANGUAGE_OF_OUTPUT,
    LOCATOR_FIELDS,
    PREDICTION_FIELDS,
    REFERENCE_PROGRAM_FIELDS,
    environment_kind,
    get_field,
    group_of,
)

logger = logging.getLogger(__name__)

# Task-text fields a demo keeps and is searched by (schemas are shared by many tasks and would drown
# the signal, so they are left out).
QUERY_FIELDS = ("question", "evidence", "prompt", "instruct_prompt", "code_prompt")

_STOP = frozenset(
    ["a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "how", "in", "is", "it", "its", "of", "on", "or", "that", "the", "this", "to", "was", "what", "which", "who", "with", "list", "show", "give", "find", "return", "all", "each"]
)
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def tokenize(text: str) -> list[str]:
    """Lower-cased words, with identifiers split on case and underscores (``playerName`` -> player, name).

    The whole identifier is kept too, so an exact column or function name still matches strongly.
    """
    tokens: list[str] = []
    for ident in re.findall(r"[A-Za-z_][A-Za-z0-9_]*|\d+", text or ""):
        parts = [p.lower() for p in _WORD.findall(ident)]
        whole = ident.lower()
        if len(parts) > 1 and whole not in _STOP:
            tokens.append(whole)
        tokens.extend(p for p in parts if p not in _STOP)
    return tokens


# Never searched: labels, environment references and schemas (long, and shared by many tasks).
_NOT_SEARCHED = frozenset((*LABEL_FIELDS, *LOCATOR_FIELDS, "entry_point"))


def searchable(fields: dict[str, Any]) -> dict[str, str]:
    """The fields a task is searched by: the known question/prompt fields when present, else every
    other non-empty text field that is not a label, an environment reference or a schema."""
    known = {name: str(fields[name]) for name in QUERY_FIELDS if fields.get(name)}
    if known:
        return known
    return {k: str(v) for k, v in fields.items()
            if v and isinstance(v, str) and k not in _NOT_SEARCHED and "schema" not in k.lower()}


def query_text(fields: dict[str, Any]) -> str:
    """The searchable text of a task, in a fixed order."""
    return "\n".join(searchable(fields).values())


@dataclass(frozen=True)
class Demo:
    """One verified example: its task text fields and a program known to work."""

    inputs: dict[str, str]
    program: str
    language: str
    source: str = "gold"  # "gold" (the example's own program) or "generated" (passed the metric)
    group: str = ""  # the database or graph it ran on (db_id / graph), to prefer same-database demos

    @property
    def text(self) -> str:
        return query_text(self.inputs)

    def render(self, max_chars: int = 1500) -> str:
        body = f"Another task (already solved): {self.text}\nIts verified {self.language} program:\n{self.program}"
        return body if len(body) <= max_chars else body[: max_chars - 15] + "\n... (cut)"


class BM25:
    """Okapi BM25 over a fixed list of token lists (k1=1.5, b=0.75 by default)."""

    def __init__(self, docs: Sequence[list[str]], k1: float = 1.5, b: float = 0.75):
        self.k1, self.b = k1, b
        self.tfs = [Counter(d) for d in docs]
        self.lengths = [len(d) for d in docs]
        self.avgdl = (sum(self.lengths) / len(docs)) if docs else 0.0
        df: Counter[str] = Counter()
        for tf in self.tfs:
            df.update(tf.keys())
        n = len(docs)
        self.idf = {t: math.log(1.0 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def scores(self, query: list[str]) -> list[float]:
        out = []
        for tf, length in zip(self.tfs, self.lengths):
            norm = self.k1 * (1 - self.b + self.b * length / self.avgdl) if self.avgdl else self.k1
            s = 0.0
            for term in set(query):
                f = tf.get(term)
                if f:
                    s += self.idf[term] * f * (self.k1 + 1) / (f + norm)
            out.append(s)
        return out


@dataclass
class DemoBank:
    """Verified demos plus a BM25 index over their task text.

    `stats` says how many candidates were considered and why the others were left out, so a user can
    see when the bank is thin.
    """

    demos: list[Demo] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._index = BM25([tokenize(d.text) for d in self.demos])

    def __len__(self) -> int:
        return len(self.demos)

    def retrieve(
        self,
        query: str,
        k: int = 8,
        exclude_identical: bool = True,
        task_text: str | None = None,
        group: str | None = None,
    ) -> list[tuple[Demo, float]]:
        """The top-k demos by BM25 score (only those sharing at least one term).

        With `group` (the instance's db_id or graph), demos from the same database or graph rank
        first: their programs use the very tables and names the instance needs. With
        `exclude_identical`, a demo whose task text equals `task_text` (default: the query) is
        skipped: if the bank was built from the very examples being refined, retrieving the instance
        itself would leak its label.
        """
        if k <= 0 or not self.demos:
            return []
        scores = self._index.scores(tokenize(query))
        norm_q = " ".join((query if task_text is None else task_text).split()).lower()
        same = [bool(group) and d.group == group for d in self.demos]
        ranked = sorted((i for i in range(len(self.demos)) if scores[i] > 0), key=lambda i: (-same[i], -scores[i], i))
        out = []
        for i in ranked:
            if len(out) >= k:
                break
            if exclude_identical and " ".join(self.demos[i].text.split()).lower() == norm_q:
                continue
            out.append((self.demos[i], scores[i]))
        return out

    # -- building -------------------------------------------------------------------------------
    @classmethod
    def from_examples(
        cls,
        trainset: Iterable[Any],
        metric: Callable[..., Any] | None = None,
        program_field: str | None = None,
        environment: Callable[[Any], Any] | None = None,
    ) -> DemoBank:
        """Keep training examples whose own (gold) program is verified.

        With `metric`, verified means the metric scores the gold program 1.0 (needed for Python, where
        running a function definition proves little). Without it, the program must execute without
        error, untruncated, and pass the environment's own checks. `environment(example)` builds the
        environment (default: `environment_for`); one is built per distinct database or graph.
        """
        from dspy_hero.execution.environments import EnvironmentCache

        demos: list[Demo] = []
        stats: Counter[str] = Counter()
        envs = EnvironmentCache()
        for example in trainset:
            stats["considered"] += 1
            name = program_field or next((f for f in REFERENCE_PROGRAM_FIELDS if _read(example, f)), None)
            program = _read(example, name) if name else None
            if not program:
                stats["no_program"] += 1
                continue
            language = REFERENCE_PROGRAM_FIELDS.get(name) or environment_kind(example) or "python"
            ok, why = _verify(example, str(program), language, metric, environment, envs)
            if not ok:
                stats[why] += 1
                continue
            demos.append(Demo(_task_fields(example), str(program), language, "gold", group_of(example)))
        stats["kept"] = len(demos)
        return cls(demos, dict(stats))

    @classmethod
    def from_program(
        cls, program: Any, trainset: Iterable[Any], metric: Callable[..., Any], threshold: float = 1.0
    ) -> DemoBank:
        """Keep the programs `program` generated for training examples that scored >= `threshold`.

        Useful when the training set has no gold programs, only tests (e.g. Python tasks).
        """
        from dspy_hero.metrics.base import score_of

        demos: list[Demo] = []
        stats: Counter[str] = Counter()
        for example in trainset:
            stats["considered"] += 1
            inputs = example.inputs() if hasattr(example, "inputs") else example
            try:
                pred = program(**dict(inputs))
                score = score_of(metric(example, pred))
            except Exception as exc:  # noqa: BLE001 - one bad example must not lose the bank
                logger.warning("from_program: example skipped (%s: %s)", type(exc).__name__, exc)
                stats["error"] += 1
                continue
            if score < threshold:
                stats["failed_metric"] += 1
                continue
            field_name = next((f for f in PREDICTION_FIELDS.values() if getattr(pred, f, None)), None)
            if field_name is None:
                stats["no_program"] += 1
                continue
            language = LANGUAGE_OF_OUTPUT[field_name]
            demos.append(Demo(_task_fields(example), str(getattr(pred, field_name)), language, "generated",
                              group_of(example)))
        stats["kept"] = len(demos)
        return cls(demos, dict(stats))

    # -- persistence ----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"version": 1, "demos": [asdict(d) for d in self.demos], "stats": dict(self.stats)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DemoBank:
        if not isinstance(data, dict) or "demos" not in data:
            raise ValueError("not a DemoBank dict: expected a mapping with a 'demos' list")
        demos = [Demo(dict(d["inputs"]), d["program"], d["language"], d.get("source", "gold"), d.get("group", ""))
                 for d in data["demos"]]
        return cls(demos, dict(data.get("stats", {})))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> DemoBank:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def verified_demo_bank(examples: Iterable[Any], metric: Callable[..., Any]) -> DemoBank:
    """HERO-T's demo bank as the CLI, the benchmark harness and the notebooks build it: the training
    examples whose own reference program the task metric scores 1.0.

    One builder, so every entry point retrieves the same kind of "verified" example. The metric,
    not bare execution, is the test for every language: a Python function definition runs without
    error whatever it computes, and a query that runs may still answer another question. Pass only
    training data; test instances must never enter the bank. Warns (never silently returns an empty
    bank) when no example survives, e.g. a task without reference programs.
    """
    if metric is None or not callable(metric):
        raise TypeError("verified_demo_bank needs the task metric (a callable) to verify the demos")
    bank = DemoBank.from_examples(list(examples), metric=metric)
    if bank.stats.get("considered") and not len(bank):
        logger.warning(
            "verified_demo_bank: none of %d training examples has a reference program the metric verifies "
            "(%s); HERO-T will run without retrieved examples. Build one from generated programs with "
            "DemoBank.from_program(program, trainset, metric) if the task has no references.",
            bank.stats["considered"], bank.stats)
    return bank


def _read(obj: Any, name: str | None) -> Any:
    """One named field of an Example, dict or object, without touching any other field.

    (Unlike `dspy_hero.fields.read_unlabeled` this may read labels: the bank is built from training
    examples.)
    """
    return None if name is None else get_field(obj, name)


def _task_fields(example: Any) -> dict[str, str]:
    known = {name: str(v) for name in QUERY_FIELDS if (v := _read(example, name))}
    if known:
        return known
    if isinstance(example, dspy.Example):  # fall back to the example's declared inputs
        try:
            names = list(example.inputs().keys())
        except ValueError:  # no input keys declared
            names = []
        return searchable({n: _read(example, n) for n in names})
    return searchable(dict(example)) if isinstance(example, dict) else {}





def _verify(example, program, language, metric, environment, envs) -> tuple[bool, str]:
    from dspy_hero.metrics.base import score_of

    if metric is not None:
        try:
            score = score_of(metric(example, dspy.Prediction(**{PREDICTION_FIELDS[language]: program})))
        except Exception as exc:  # noqa: BLE001 - logged; the example is left out
            logger.warning("DemoBank: metric failed on an example (%s: %s)", type(exc).__name__, exc)
            return False, "error"
        return (True, "") if score >= 1.0 else (False, "failed_metric")
    try:
        env = (environment or envs)(example)
        execution = env.execute(program)
    except Exception as exc:  # noqa: BLE001 - logged; the example is left out
        logger.warning("DemoBank: could not execute an example (%s: %s)", type(exc).__name__, exc)
        return False, "error"
    if not execution.ok:
        return False, "failed_execution"
    if execution.truncated:
        return False, "truncated"
    passed, _ = env.check(program, execution)
    return (True, "") if passed else (False, "failed_check")
