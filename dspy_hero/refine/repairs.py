"""Programmatic repairs: precise edits to a program that does not run, each justified by a schema fact.

Why: a small reviser does not act on an error it is shown. On the conventions task (session 23,
Qwen2.5-Coder-1.5B) 24 of HERO-T's 26 refined queries did not run, and the reviser, asked twice,
repeated the failing query in 22 of its 30 revisions, although the diagnosis named the fix
("column `tea_id` is in none of the joined tables"; "no such function: YEAR"). Most of those
failures are mechanical: a date-part function SQLite lacks, a column read through the wrong alias
of a join, a soft-deletion condition on a column this database does not have. A repairer makes
those edits directly, without an LM call.

Why this cannot trade a right program for a wrong one: a repair is proposed only for a program that
fails (it has no result to lose), and its proposal goes through the same evidence gate as an LM
revision. Nothing here reads labels; every edit rests on the database's own catalog.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.scope import traverse_scope

from dspy_hero.diagnosis.sql import Schema, read_schema, real_tables, text_number_comparisons
from dspy_hero.metrics.base import extract_code

__all__ = ["DEFAULT_REPAIRER", "NoRepairs", "Repair", "Repairer", "SqlRepairs"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Repair:
    """A repaired program and, per edit, what was changed and the fact behind it."""

    program: str
    changes: tuple[str, ...]

    @property
    def reason(self) -> str:
        return "; ".join(self.changes)


class Repairer(Protocol):
    """Proposes a repaired program for one that fails, or None when it knows no repair."""

    def repair(self, program: str, environment: Any, language: str | None) -> Repair | None: ...


@dataclass(frozen=True)
class NoRepairs:
    """Every revision comes from the reviser LM (the paper's HERO-T)."""

    def repair(self, program: str, environment: Any, language: str | None) -> Repair | None:
        return None


# SQLite has no YEAR/MONTH/DAY; strftime gives the same parts, as integers after the cast.
_DATE_PARTS = {exp.Year: "%Y", exp.Month: "%m", exp.Day: "%d"}


@dataclass(frozen=True)
class SqlRepairs:
    """SQLite repairs, applied together (a failing query often has several of these faults):

    - ``YEAR(x)``, ``MONTH(x)``, ``DAY(x)`` (not SQLite functions) become
      ``CAST(STRFTIME('%Y', x) AS INTEGER)`` and the like;
    - a text function result compared with numbers (``STRFTIME('%Y', x) = 2023``, which SQLite never
      finds equal) is cast: ``CAST(STRFTIME('%Y', x) AS INTEGER) = 2023``;
    - ``T.col`` where the table behind alias ``T`` has no ``col`` and exactly one other table of the
      same SELECT has it is read through that table's alias;
    - a top-level ``AND`` condition ``col IS NULL`` where no table the SELECT reads has ``col`` is
      removed: a column a table lacks is absent on every row, so the test always holds (the typical
      case: a soft-deletion rule applied to a table without the deletion column). Any other condition
      on a missing column is left alone: dropping it would change what the query asks, and whether
      to join the table that has it is the reviser's call.

    Other languages, and queries sqlglot cannot parse, get no repair.
    """

    def repair(self, program: str, environment: Any, language: str | None) -> Repair | None:
        if language != "sql":
            return None
        sql = extract_code(program, "sql").strip()
        try:
            tree = sqlglot.parse_one(sql, read="sqlite")
        except SqlglotError:
            return None
        if tree is None:
            return None
        try:
            schema = read_schema(environment)
        except Exception as exc:  # noqa: BLE001 - no catalog, no repair; the reviser still runs
            logger.warning("HeroRefine: no SQL repair (the schema cannot be read: %s: %s)", type(exc).__name__, exc)
            return None
        changes = [*_date_parts(tree), *_cast_text_compared_with_numbers(tree), *_requalify(tree, schema),
                   *_drop_absent_presence_tests(tree, schema)]
        if not changes:
            return None
        return Repair(tree.sql(dialect="sqlite"), tuple(changes))


def _as_integer(node: exp.Expression) -> exp.Cast:
    return exp.Cast(this=node, to=exp.DataType.build("INTEGER"))


def _date_parts(tree: exp.Expression) -> list[str]:
    changes = []
    for kind, fmt in _DATE_PARTS.items():
        for node in list(tree.find_all(kind)):
            arg = node.this
            new = _as_integer(exp.Anonymous(this="STRFTIME", expressions=[exp.Literal.string(fmt), arg.copy()]))
            changes.append(f"SQLite has no {kind.__name__.upper()}(): `{node.sql(dialect='sqlite')}` becomes "
                           f"`{new.sql(dialect='sqlite')}`")
            node.replace(new)
    return changes


def _cast_text_compared_with_numbers(tree: exp.Expression) -> list[str]:
    changes = []
    for side, comparison in text_number_comparisons(tree):
        before = comparison.sql(dialect="sqlite")
        side.replace(_as_integer(side.copy()))
        changes.append(f"SQLite compares a text with a number without converting it (no text equals a number): "
                       f"`{before}` becomes `{comparison.sql(dialect='sqlite')}`")
    return changes


def _scopes(tree: exp.Expression) -> list[Any]:
    try:
        return list(traverse_scope(tree))
    except SqlglotError:
        return []


def _requalify(tree: exp.Expression, schema: Schema) -> list[str]:
    changes = []
    for scope in _scopes(tree):
        tables = real_tables(scope, schema, keep_case=True)
        for col in scope.columns:
            if col.find_ancestor(exp.Join) is not None:
                continue  # a join condition: moving one side to the other table would make it a tautology
            table = tables.get(col.table) if col.table else None
            if table is None or schema.has_column(table, col.name):
                continue
            holders = [alias for alias, t in tables.items() if alias != col.table and schema.has_column(t, col.name)]
            if len(holders) == 1:
                before = col.sql(dialect="sqlite")
                col.set("table", exp.to_identifier(holders[0]))
                changes.append(f"`{table}` has no column `{col.name}` and `{tables[holders[0]]}` has: `{before}` "
                               f"becomes `{col.sql(dialect='sqlite')}`")
    return changes


def _drop_absent_presence_tests(tree: exp.Expression, schema: Schema) -> list[str]:
    changes = []
    for scope in _scopes(tree):
        select = scope.expression
        if not isinstance(select, exp.Select) or select.args.get("where") is None:
            continue
        if any(not isinstance(src, exp.Table) for src in scope.sources.values()):
            continue  # a derived table or CTE may define the column
        tables = [schema.table(src.name) for src in scope.sources.values()]
        if not tables or any(t is None for t in tables):
            continue  # an unknown table: its columns are unknown too
        where = select.args["where"]
        conditions = list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]
        kept = []
        for cond in conditions:
            col = cond.this if isinstance(cond, exp.Is) and isinstance(cond.expression, exp.Null) else None
            if (isinstance(col, exp.Column) and col.name
                    and not any(schema.has_column(t, col.name) for t in tables)):
                changes.append(f"{_names(tables)} {'has' if len(tables) == 1 else 'have'} no column `{col.name}`, "
                               f"so it is absent on every row and `{cond.sql(dialect='sqlite')}` always holds: "
                               "the condition is removed")
            else:
                kept.append(cond)
        if len(kept) < len(conditions):
            select.set("where", exp.Where(this=exp.and_(*kept)) if kept else None)
    return changes


def _names(tables: list[str | None]) -> str:
    return ", ".join(f"`{t}`" for t in dict.fromkeys(tables))


# HeroRefine's default (frozen and stateless, so one instance serves every module and thread).
DEFAULT_REPAIRER: Repairer = SqlRepairs()
