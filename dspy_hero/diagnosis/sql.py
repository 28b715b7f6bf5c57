"""Diagnosis of SQL programs: the query's structure (sqlglot) checked against the database's schema
(read through the read-only executor), the result's shape, and — for TRAINING cases only, when a
reference is passed — the structural diff to the reference query.

What is checked, and why each is a rule-worthy pattern (6 of 7 failures of a small model on a Spider
sample were a column taken from a table the query should not have joined):
- every table exists; every column exists in the table it is qualified with, else which tables have
  it; an unqualified column in none (or several) of the joined tables;
- every joined table is linked by a condition, on its foreign key when the schema has one, and
  contributes more than its join key;
- an aggregate selected next to plain columns without GROUP BY;
- the result: empty, NULL-only columns, repeated rows without DISTINCT, cut at the row cap;
- with the metric's feedback: the selected column count, the row-limiting clauses or the order
  behind "different number of columns / rows / order".
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError
from sqlglot.optimizer.scope import Scope, traverse_scope

from dspy_hero.diagnosis.common import (
    error_fact,
    feedback_property,
    first_error_location,
    one_line,
    result_facts,
)
from dspy_hero.diagnosis.facts import Category, Diagnosis, Fact
from dspy_hero.execution.base import Execution
from dspy_hero.metrics.base import extract_code

__all__ = ["Schema", "SqlShape", "diagnose_sql", "read_schema", "real_tables", "sql_shape", "text_number_comparisons"]

_COLUMNS_QUERY = ("SELECT m.name, p.name, p.pk FROM sqlite_master AS m JOIN pragma_table_info(m.name) AS p "
                  "WHERE m.type IN ('table', 'view') AND m.name NOT LIKE 'sqlite_%' ORDER BY m.rowid, p.cid")
_KEYS_QUERY = ('SELECT m.name, f."from", f."table", f."to" FROM sqlite_master AS m '
               "JOIN pragma_foreign_key_list(m.name) AS f WHERE m.type = 'table'")


@dataclass(frozen=True)
class Schema:
    """Tables with their columns (original spelling), foreign keys (table, column, ref_table, ref_column)
    and primary-key columns."""

    tables: dict[str, tuple[str, ...]]
    foreign_keys: tuple[tuple[str, str, str, str | None], ...] = ()
    primary_keys: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def is_primary(self, table: str, column: str) -> bool:
        """A declared primary-key column, or a column named `id` (the usual surrogate key)."""
        return column.lower() == "id" or column.lower() in {k.lower() for k in self.primary_keys.get(table, ())}

    def table(self, name: str) -> str | None:
        low = name.lower()
        return next((t for t in self.tables if t.lower() == low), None)

    def has_column(self, table: str, column: str) -> bool:
        return column.lower() in {c.lower() for c in self.tables.get(table, ())}

    def tables_with(self, column: str) -> list[str]:
        return [t for t, cols in self.tables.items() if column.lower() in {c.lower() for c in cols}]

    def links(self, a: str, b: str) -> list[tuple[str, str]]:
        """Foreign-key column pairs (column of a, column of b) linking tables a and b, either way."""
        out = []
        for t, col, ref, ref_col in self.foreign_keys:
            ref_col = ref_col or self._primary(ref)
            if t.lower() == a.lower() and ref.lower() == b.lower():
                out.append((col, ref_col))
            elif t.lower() == b.lower() and ref.lower() == a.lower():
                out.append((ref_col, col))
        return [(x.lower(), y.lower()) for x, y in out if x and y]

    def _primary(self, table: str) -> str:
        cols = self.tables.get(self.table(table) or "", ())
        return cols[0] if cols else ""


def read_schema(environment: Any) -> Schema:
    """The schema of a SQLite environment (anything with an `executor` or `execute` running SQL).

    Raises RuntimeError when the catalog cannot be read (the diagnosis reports it, never guesses)."""
    run = environment.executor.run if hasattr(environment, "executor") else environment.execute
    cols = run(_COLUMNS_QUERY)
    if not cols.ok:
        raise RuntimeError(f"cannot read the schema: {cols.describe()}")
    tables: dict[str, list[str]] = {}
    keys: dict[str, list[str]] = {}
    for table, column, pk in cols.rows or ():
        tables.setdefault(str(table), []).append(str(column))
        if pk:
            keys.setdefault(str(table), []).append(str(column))
    fk_rows = run(_KEYS_QUERY)
    fks = tuple((str(a), str(b), str(c), None if d is None else str(d))
                for a, b, c, d in (fk_rows.rows or ())) if fk_rows.ok else ()
    return Schema({t: tuple(c) for t, c in tables.items()}, fks, {t: tuple(k) for t, k in keys.items()})


@dataclass
class SqlShape:
    """The label-free structure of a query's outermost SELECT (and the tables of the whole query)."""

    tables: list[str] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)  # selected expressions as written
    aggregates: list[str] = field(default_factory=list)
    distinct: bool = False
    group_by: list[str] = field(default_factory=list)
    order_by: list[str] = field(default_factory=list)
    limit: str | None = None
    filters: list[str] = field(default_factory=list)  # columns the WHERE/HAVING read
    joins: int = 0

    def line(self) -> str:
        parts = [f"selects {len(self.columns)} column(s) ({', '.join(f'`{c}`' for c in self.columns[:5])}"
                 + (", ..." if len(self.columns) > 5 else "") + ")"]
        if self.tables:
            parts.append("from " + " + ".join(f"`{t}`" for t in self.tables))
        parts.append("aggregates " + ", ".join(self.aggregates) if self.aggregates else "no aggregate")
        if self.distinct:
            parts.append("DISTINCT")
        parts.append("GROUP BY " + ", ".join(f"`{g}`" for g in self.group_by) if self.group_by else "no GROUP BY")
        if self.order_by:
            parts.append("ORDER BY " + ", ".join(self.order_by))
        if self.limit is not None:
            parts.append(f"LIMIT {self.limit}")
        return "; ".join(parts)


def sql_shape(tree: exp.Expression) -> SqlShape:
    """The structure of a parsed query (see `SqlShape`)."""
    select = tree if isinstance(tree, exp.Select) else tree.find(exp.Select)
    shape = SqlShape()
    shape.tables = list(dict.fromkeys(t.name for t in tree.find_all(exp.Table) if t.name))
    if select is None:
        return shape
    shape.columns = [one_line(e.sql(dialect="sqlite"), 60) for e in select.expressions]
    shape.aggregates = list(dict.fromkeys(type(a).__name__.upper() + ("(DISTINCT)" if a.find(exp.Distinct) else "")
                                          for e in select.expressions for a in e.find_all(exp.AggFunc)))
    shape.distinct = bool(select.args.get("distinct"))
    group = select.args.get("group")
    shape.group_by = [one_line(g.sql(dialect="sqlite"), 40) for g in group.expressions] if group else []
    order = select.args.get("order")
    shape.order_by = [one_line(o.sql(dialect="sqlite"), 40) for o in order.expressions] if order else []
    limit = select.args.get("limit")
    if limit is not None:
        value = limit.args.get("expression") or limit.args.get("this")
        shape.limit = value.sql(dialect="sqlite") if value is not None else limit.sql(dialect="sqlite")
    shape.joins = len(select.args.get("joins") or [])
    where = [select.args.get("where"), select.args.get("having")]
    shape.filters = list(dict.fromkeys(c.name.lower() for w in where if w is not None for c in w.find_all(exp.Column)))
    return shape


def diagnose_sql(program: str, execution: Execution | None, environment: Any, *, reference: str | None = None,
                 feedback: str | None = None) -> Diagnosis:
    """Facts about one SQL run (see the module docstring); `environment` is a SQLite environment or None."""
    sql = extract_code(program, "sql")
    errors: list[str] = []
    if execution is None and environment is not None:
        execution = environment.execute(sql)
    facts: list[Fact] = []
    if not sql.strip():
        return Diagnosis("sql", (Fact(Category.EMPTY_PROGRAM, "the answer contains no SQL query"),))
    tree, parse_error = _parse(sql)
    schema = None
    if environment is not None:
        try:
            schema = read_schema(environment)
        except Exception as exc:  # noqa: BLE001 - reported in Diagnosis.errors, never silent
            errors.append(f"schema unavailable ({type(exc).__name__}: {str(exc)[:160]})")
    shape = sql_shape(tree) if tree is not None else None
    if tree is not None:
        facts += _text_number_facts(tree)
    if tree is not None and schema is not None:
        facts += schema_facts(tree, schema)
    elif tree is not None:  # no schema: what the text alone shows
        facts += [f for select in tree.find_all(exp.Select) for f in _aggregate_facts(select)]
    if execution is not None and not execution.ok:
        facts += _engine_error(execution, parse_error, facts)
    elif tree is None and parse_error:
        facts.append(Fact(Category.SYNTAX_ERROR, f"sqlglot cannot parse the query ({parse_error})"))
    if execution is not None and execution.ok:
        facts += result_facts(execution, distinct=bool(shape and (shape.distinct or shape.group_by)))
        if shape is not None:
            facts += _property_facts(feedback, shape, execution)
    if reference is not None and tree is not None:
        facts += reference_facts(tree, reference)
    return Diagnosis("sql", tuple(_dedup(facts)), shape.line() if shape else "", tuple(errors))


# SQLite reports name errors as syntax errors; the schema facts name them precisely.
_NAME_ERRORS = (
    ("no such column", Category.UNKNOWN_COLUMN,
     (Category.COLUMN_NOT_IN_TABLE, Category.COLUMN_FROM_UNJOINED_TABLE, Category.UNKNOWN_COLUMN)),
    ("no such table", Category.UNKNOWN_TABLE, (Category.UNKNOWN_TABLE,)),
    ("ambiguous column", Category.AMBIGUOUS_COLUMN, (Category.AMBIGUOUS_COLUMN,)),
    ("misuse of aggregate", Category.AGGREGATE_WITHOUT_GROUP_BY, ()),
)


def _engine_error(execution: Execution, parse_error: str, facts: list[Fact]) -> list[Fact]:
    """The engine's error as a fact: left out when a schema fact already explains it, else categorized
    by what it says (a name error is not a syntax error) with its position when the engine gives one."""
    message = (execution.error_message or "").lower()
    for phrase, category, explained_by in _NAME_ERRORS:
        if phrase in message:
            if any(f.category in explained_by for f in facts):
                return []
            return [Fact(category, f"SQLite: {one_line(execution.error_message or '', 160)}")]
    where = first_error_location(execution.error_message or "") or parse_error
    return [error_fact(execution, where)]


def _parse(sql: str) -> tuple[exp.Expression | None, str]:
    try:
        trees = sqlglot.parse(sql, read="sqlite")
    except ParseError as exc:
        info = exc.errors[0] if exc.errors else {}
        where = f"line {info.get('line')}, column {info.get('col')}" if info.get("line") else ""
        near = info.get("highlight")
        return None, (where + (f", near `{near}`" if near else "")).strip(", ")
    except SqlglotError as exc:
        return None, one_line(str(exc), 80)
    trees = [t for t in trees if t is not None]
    return (trees[0] if trees else None), ""


def schema_facts(tree: exp.Expression, schema: Schema) -> list[Fact]:
    """Tables, columns and joins of every SELECT scope checked against the schema."""
    facts: list[Fact] = []
    try:
        scopes = traverse_scope(tree)
    except SqlglotError:
        scopes = []
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    for scope in scopes:
        facts += _scope_facts(scope, schema, ctes)
    return facts


def real_tables(scope: Scope, schema: Schema, *, keep_case: bool = False) -> dict[str, str]:
    """alias -> schema table, for the scope's sources that are tables of the database.

    Aliases are lowercased for lookups (SQLite matches them without case); `keep_case` keeps them as the
    query spells them, for code that writes an alias back into the query's text.
    """
    out = {}
    for alias, source in scope.sources.items():
        if isinstance(source, exp.Table):
            table = schema.table(source.name)
            if table is not None:
                out[alias if keep_case else alias.lower()] = table
    return out


def _resolve_alias(scope: Scope | None, name: str) -> tuple[str, Any] | None:
    while scope is not None:
        for alias, source in scope.sources.items():
            if alias.lower() == name.lower():
                return alias, source
        scope = scope.parent
    return None


def _scope_facts(scope: Scope, schema: Schema, ctes: set[str]) -> list[Fact]:
    facts: list[Fact] = []
    tables = real_tables(scope, schema)
    for alias, source in scope.sources.items():
        if isinstance(source, exp.Table) and source.name.lower() not in ctes and schema.table(source.name) is None:
            close = difflib.get_close_matches(source.name.lower(), [t.lower() for t in schema.tables], n=3, cutoff=0.5)
            similar = [t for t in schema.tables if t.lower() in close]
            facts.append(Fact(Category.UNKNOWN_TABLE, f"table `{source.name}` does not exist"
                              + (f"; similar tables: {_names(similar)}" if similar else "")))
    select = scope.expression
    aliases = {e.alias.lower() for e in getattr(select, "expressions", []) if isinstance(e, exp.Alias)}
    derived = [s for s in scope.sources.values() if not isinstance(s, exp.Table)]
    used: dict[str, set[str]] = {a: set() for a in tables}  # alias -> columns read through it
    # sqlglot also lists a predicate subquery's columns under the outer scope: keep this SELECT's own
    own = [c for c in scope.columns if c.find_ancestor(exp.Select) is select] if isinstance(select, exp.Select) else scope.columns
    for col in own:
        name = col.name
        if not name or name == "*":
            continue
        if col.table:
            found = _resolve_alias(scope, col.table)
            if found is None:
                real = schema.table(col.table)
                if real is not None:
                    facts.append(Fact(Category.COLUMN_FROM_UNJOINED_TABLE,
                                      f"`{col.table}.{name}` names table `{real}`, which the query does not join"))
                else:
                    facts.append(Fact(Category.UNKNOWN_TABLE, f"`{col.table}.{name}` names `{col.table}`, "
                                      "which is neither a table nor an alias in the query"))
                continue
            alias, source = found
            if not isinstance(source, exp.Table):
                continue  # a derived table or CTE: its columns are its own SELECT's business
            table = schema.table(source.name)
            if table is None:
                continue  # already told: unknown table
            if alias.lower() in used:
                used[alias.lower()].add(name.lower())
            if not schema.has_column(table, name):
                facts.append(_missing_column(name, table, schema, set(tables.values()), col.table))
            continue
        if name.lower() in aliases or derived:
            continue  # an output alias, or possibly a derived table's column
        quoted = isinstance(col.this, exp.Identifier) and col.this.quoted
        holders = [a for a, t in tables.items() if schema.has_column(t, name)]
        if len(holders) == 1:
            used[holders[0]].add(name.lower())
        elif len(holders) > 1:
            owners = list(dict.fromkeys(tables[a] for a in holders))
            if len(owners) > 1:
                facts.append(Fact(Category.AMBIGUOUS_COLUMN, f"unqualified column `{name}` is in several joined "
                                  f"tables: {_names(owners)}"))
            for a in holders:
                used[a].add(name.lower())
        elif _outer_has(scope.parent, name, schema):
            continue  # a correlated reference to an outer query's table
        elif quoted and '"' in col.sql(dialect="sqlite"):
            continue  # SQLite reads a double-quoted name that matches no column as a string literal
        else:
            others = schema.tables_with(name)
            if others:
                facts.append(Fact(Category.COLUMN_FROM_UNJOINED_TABLE,
                                  f"column `{name}` is in none of the joined tables ({_names(list(tables.values()))}); "
                                  f"tables that have it: {_names(others)}"))
            elif tables:
                facts.append(_unknown_column(name, schema, list(tables.values())))
    if isinstance(select, exp.Select):
        trouble = any(f.category in _COLUMN_TROUBLE for f in facts)
        facts += _join_facts(select, tables, schema, used, trouble)
        facts += _aggregate_facts(select)
    return facts


def _outer_has(scope: Scope | None, name: str, schema: Schema) -> bool:
    while scope is not None:
        if any(schema.has_column(t, name) for t in real_tables(scope, schema).values()):
            return True
        scope = scope.parent
    return False


def _missing_column(name: str, table: str, schema: Schema, joined: set[str], written: str = "") -> Fact:
    holders = schema.tables_with(name)
    if not holders:
        return _unknown_column(name, schema, [table], qualified=written or table)
    in_query = [t for t in holders if t in joined]
    where = f"tables that have it: {_names(holders)}"
    if in_query and len(in_query) < len(holders):
        where += f" (joined here: {_names(in_query)})"
    return Fact(Category.COLUMN_NOT_IN_TABLE, f"column `{name}` is not in `{table}`; {where}")


def _unknown_column(name: str, schema: Schema, tables: list[str], qualified: str | None = None) -> Fact:
    pool = [c for t in tables for c in schema.tables.get(t, ())]
    close = difflib.get_close_matches(name.lower(), [c.lower() for c in pool], n=3, cutoff=0.6)
    similar = list(dict.fromkeys(c for c in pool if c.lower() in close))
    head = f"no table has a column `{name}`" + (f" (used as `{qualified}.{name}`)" if qualified else "")
    return Fact(Category.UNKNOWN_COLUMN, head + (f"; similar columns in {_names(tables)}: {_names(similar)}" if similar else ""))


def _join_facts(select: exp.Select, tables: dict[str, str], schema: Schema, used: dict[str, set[str]],
                column_trouble: bool = False) -> list[Fact]:
    """Each joined table linked to the others by equalities (on the schema's key when it has one, else
    on a same-named id column both tables have), and not joined only for its key (not told when a
    column is already misplaced: then which table is "used" is itself wrong)."""
    if len(tables) < 2:
        return []
    conditions = [j.args.get("on") for j in select.args.get("joins") or [] if j.args.get("on") is not None]
    if select.args.get("where") is not None:
        conditions.append(select.args["where"])
    links: dict[frozenset[str], list[tuple[str, str, str, str]]] = {}
    key_columns: dict[str, set[str]] = {a: set() for a in tables}
    for cond in conditions:
        for eq in cond.find_all(exp.EQ):
            left, right = eq.this, eq.expression
            if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
                continue
            la, ra = _alias_of(left, tables, schema), _alias_of(right, tables, schema)
            if la is None or ra is None or la == ra:
                continue
            links.setdefault(frozenset((la, ra)), []).append((la, left.name.lower(), ra, right.name.lower()))
            key_columns[la].add(left.name.lower())
            key_columns[ra].add(right.name.lower())
    facts: list[Fact] = []
    order = list(tables)
    reached = _component(order[0], links)
    for a in order[1:]:
        if a not in reached:  # one fact per table not linked (directly or through others) to the first
            linked = [tables[b] for b in order if b in reached]
            facts.append(Fact(Category.UNLINKED_JOIN, f"`{tables[a]}` is joined with no condition linking it to "
                              f"{_names(linked)} (every row pairs with every row)"))
            reached |= _component(a, links)
    for pair, eqs in links.items():
        a, b = sorted(pair)
        keys = schema.links(tables[a], tables[b])
        how = "the schema links them by"
        if not keys:  # no declared key: a same-named id column both tables have is the evident link
            if any(schema.is_primary(tables[la], x) or schema.is_primary(tables[rb], y)
                   or _named_link(tables[la], x, tables[rb], y) for la, x, rb, y in eqs):
                continue  # `x_id = other.id`, `setCode = sets.code`: joined on a key, whatever its name
            shared = [c.lower() for c in schema.tables[tables[a]] if schema.has_column(tables[b], c)
                      and _looks_like_key(c) and not (schema.is_primary(tables[a], c) and schema.is_primary(tables[b], c))]
            keys, how = [(c, c) for c in shared], "both tables have"
        if not keys:
            continue
        on_key = any((x, y) in keys if la == a else (y, x) in keys for la, x, _, y in eqs)
        if not on_key:
            la, x, rb, y = eqs[0]
            if how == "both tables have":
                fk = ", ".join(f"`{k1}`" for k1, _ in keys[:2])
            else:
                fk = ", ".join(f"`{tables[a]}.{k1}` = `{tables[b]}.{k2}`" for k1, k2 in keys[:2])
            facts.append(Fact(Category.JOIN_NOT_ON_KEY, f"`{tables[la]}` and `{tables[rb]}` are joined on "
                              f"`{x}` = `{y}`; {how} {fk}"))
    # a table joined only for its key still counts rows under an aggregate, GROUP BY or DISTINCT
    # (or duplicates cannot matter: the SELECT feeds IN / EXISTS / a set operation)
    counts_rows = bool(select.args.get("group") or select.args.get("distinct")
                       or any(e.find(exp.AggFunc) for e in select.expressions)
                       or select.find_ancestor(exp.In, exp.Exists, exp.Union, exp.Except, exp.Intersect) is not None
                       or isinstance(select.parent, (exp.Union, exp.Except, exp.Intersect)))
    for a in tables if not (column_trouble or counts_rows) else ():
        degree = sum(1 for pair in links if a in pair)
        if (degree == 1 and used.get(a) and used[a] <= key_columns[a]
                and not any(schema.is_primary(tables[a], k) for k in key_columns[a])):
            facts.append(Fact(Category.UNUSED_TABLE, f"`{tables[a]}` is joined but only its join key is used "
                              "(it can only repeat or drop rows)"))
    return facts


_COLUMN_TROUBLE = (Category.COLUMN_NOT_IN_TABLE, Category.COLUMN_FROM_UNJOINED_TABLE, Category.UNKNOWN_COLUMN,
                   Category.AMBIGUOUS_COLUMN, Category.UNKNOWN_TABLE)


def _component(start: str, links: dict[frozenset[str], Any]) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        a = todo.pop()
        for pair in links:
            if a in pair:
                for b in pair - seen:
                    seen.add(b)
                    todo.append(b)
    return seen


def _named_link(a: str, x: str, b: str, y: str) -> bool:
    """Column names that say they link the two tables: one name contains the other (`setcode` /
    `code`) or names the other table (`link_to_event` / `event`)."""
    x, y = x.lower(), y.lower()
    stems = {a.lower().rstrip("s"), b.lower().rstrip("s")}
    return x in y or y in x or any(stem and (stem in x or stem in y) for stem in stems)


def _looks_like_key(column: str) -> bool:
    low = column.lower()
    return low == "id" or low.endswith(("_id", "id", "_key", "_code"))


def _alias_of(col: exp.Column, tables: dict[str, str], schema: Schema) -> str | None:
    if col.table:
        return col.table.lower() if col.table.lower() in tables else None
    holders = [a for a, t in tables.items() if schema.has_column(t, col.name)]
    return holders[0] if len(holders) == 1 else None


# Functions whose result is TEXT whatever they read; a function's result has no column affinity, so
# SQLite compares it with a number literal without converting either side (a number sorts below every
# text): `STRFTIME('%Y', d) = 2023` is false on every row, `STRFTIME('%Y', d) > 2023` true on every row.
_TEXT_RESULTS = (exp.TimeToStr, exp.Substring)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)


def _is_text_result(node: exp.Expression) -> bool:
    return isinstance(node, _TEXT_RESULTS) or (isinstance(node, exp.Anonymous)
                                               and str(node.this).upper() in ("STRFTIME", "SUBSTR", "SUBSTRING"))


def _is_number(node: exp.Expression) -> bool:
    if isinstance(node, exp.Neg):
        node = node.this
    return isinstance(node, exp.Literal) and not node.is_string


def text_number_comparisons(tree: exp.Expression) -> list[tuple[exp.Expression, exp.Expression]]:
    """(text-valued side, the comparison) for each comparison of a TEXT function result with number
    literals: `=`, `<>`, `<`, ... (either side), `IN (numbers)`, `BETWEEN number AND number`.
    Their outcome does not depend on the row, so the query cannot mean them as written."""
    found = []
    for node in tree.find_all(*_COMPARISONS, exp.In, exp.Between):
        if isinstance(node, exp.In):
            pairs = [(node.this, node.expressions)] if node.expressions else []
        elif isinstance(node, exp.Between):
            pairs = [(node.this, [node.args.get("low"), node.args.get("high")])]
        else:
            pairs = [(node.this, [node.expression]), (node.expression, [node.this])]
        for side, others in pairs:
            if _is_text_result(side) and all(o is not None and _is_number(o) for o in others):
                found.append((side, node))
    return found


def _text_number_facts(tree: exp.Expression) -> list[Fact]:
    def text(node: exp.Expression, width: int) -> str:
        return one_line(node.sql(dialect="sqlite"), width)

    return [Fact(Category.TEXT_COMPARED_WITH_NUMBER,
                 f"`{text(cmp, 80)}` compares the text `{text(side, 50)}` with a number: SQLite never finds them "
                 "equal (a number sorts below any text), so it holds on every row or on none; CAST the text AS "
                 "INTEGER, or compare with a quoted value")
            for side, cmp in text_number_comparisons(tree)]


def _aggregate_facts(select: exp.Select) -> list[Fact]:
    if select.args.get("group") is not None:
        return []
    def own(e: exp.Expression, kind: type) -> list[exp.Expression]:  # nodes of this SELECT, not of a subquery
        return [n for n in e.find_all(kind) if n.find_ancestor(exp.Select) is select]

    def grouping(e: exp.Expression) -> list[exp.Expression]:  # its aggregates, window functions excluded
        return [a for a in own(e, exp.AggFunc) if a.find_ancestor(exp.Window) is None]

    aggs = [e for e in select.expressions if grouping(e)]
    plain = [e for e in select.expressions if not own(e, exp.AggFunc) and not own(e, exp.Window) and own(e, exp.Column)
             and not isinstance(e.unalias(), exp.Star)]
    # SQLite's bare-column rule: next to a single MIN or MAX, plain columns come from that row
    extremes = [a for e in aggs for a in grouping(e)]
    if len(extremes) == 1 and isinstance(extremes[0], (exp.Min, exp.Max)):
        return []
    if aggs and plain:
        return [Fact(Category.AGGREGATE_WITHOUT_GROUP_BY,
                     f"selects {_names([one_line(p.sql(dialect='sqlite'), 40) for p in plain])} next to "
                     f"{one_line(aggs[0].sql(dialect='sqlite'), 40)} without GROUP BY (one arbitrary row)")]
    return []


def _property_facts(feedback: str | None, shape: SqlShape, execution: Execution) -> list[Fact]:
    """The metric's "which property differs" joined with the clauses that decide that property."""
    prop = feedback_property(feedback)
    if prop is None or (prop is Category.WRONG_ROW_COUNT and execution.row_count == 0):
        return []  # an empty result is already its own fact
    rows, cols = execution.row_count, execution.column_count
    if prop is Category.WRONG_COLUMN_COUNT:
        text = (f"selects {cols} column(s) ({', '.join(f'`{c}`' for c in shape.columns[:6])}); the expected result "
                "has a different number of columns")
    elif prop is Category.WRONG_ROW_COUNT:
        why = []
        if shape.limit is not None:
            why.append(f"LIMIT {shape.limit}")
        if shape.aggregates and not shape.group_by:
            why.append("an aggregate without GROUP BY gives one row")
        if shape.group_by:
            why.append("one row per " + ", ".join(f"`{g}`" for g in shape.group_by))
        if not shape.distinct and not shape.group_by:
            why.append("no DISTINCT")
        if shape.joins:
            why.append(f"{shape.joins} join(s)")
        text = f"returns {rows} row(s) ({'; '.join(why) or 'no row-limiting clause'}); the expected row count differs"
    elif prop is Category.WRONG_ORDER:
        text = ("rows are right but ordered " + (f"by {', '.join(shape.order_by)}" if shape.order_by else
                                                 "arbitrarily (no ORDER BY)"))
    else:
        text = (f"the result has the expected shape ({rows} row(s) x {cols} column(s)) but other values; "
                + (f"filters on {', '.join(f'`{c}`' for c in shape.filters[:5])}" if shape.filters else "no filter"))
    return [Fact(prop, text)]


def reference_facts(tree: exp.Expression, reference: str) -> list[Fact]:
    """TRAINING cases only: what the reference query's structure has that the prediction's lacks
    (or the reverse): tables, selected column count, aggregates, DISTINCT, GROUP BY, ORDER BY/LIMIT,
    filtered columns (missing and extra)."""
    ref_tree, _ = _parse(extract_code(reference, "sql"))
    if ref_tree is None:
        return []
    pred, ref = sql_shape(tree), sql_shape(ref_tree)
    facts: list[Fact] = []
    p_tables, r_tables = {t.lower() for t in pred.tables}, {t.lower() for t in ref.tables}
    missing = [t for t in ref.tables if t.lower() not in p_tables]
    extra = [t for t in pred.tables if t.lower() not in r_tables]
    if missing:
        facts.append(Fact(Category.REF_MISSING_TABLE, f"the reference uses {_names(missing)}, the prediction does not"))
    if extra:
        facts.append(Fact(Category.REF_EXTRA_TABLE, f"the prediction uses {_names(extra)}, the reference does not"))
    if len(pred.columns) != len(ref.columns):
        facts.append(Fact(Category.REF_COLUMN_COUNT, f"the reference selects {len(ref.columns)} column(s), "
                          f"the prediction {len(pred.columns)}"))
    if set(pred.aggregates) != set(ref.aggregates):
        facts.append(Fact(Category.REF_AGGREGATE, f"the reference aggregates with {', '.join(ref.aggregates) or 'nothing'}, "
                          f"the prediction with {', '.join(pred.aggregates) or 'nothing'}"))
    if pred.distinct != ref.distinct:
        facts.append(Fact(Category.REF_DISTINCT, "the reference uses DISTINCT, the prediction does not" if ref.distinct
                          else "the prediction uses DISTINCT, the reference does not"))
    if bool(pred.group_by) != bool(ref.group_by):
        facts.append(Fact(Category.REF_GROUP_BY, "the reference groups rows (GROUP BY), the prediction does not"
                          if ref.group_by else "the prediction groups rows (GROUP BY), the reference does not"))
    if bool(pred.order_by) != bool(ref.order_by) or (pred.limit is None) != (ref.limit is None):
        facts.append(Fact(Category.REF_ORDER_LIMIT, f"the reference has {_clauses(ref)}, the prediction {_clauses(pred)}"))
    lacking = [c for c in ref.filters if c not in set(pred.filters)]
    if lacking:
        facts.append(_filter_fact(Category.REF_FILTER, ("reference", "prediction"), ref_tree, lacking))
    # Its own category, not a kind of REF_FILTER: in 206 failing conventions rollouts (sessions 5-6) 104
    # filtered on a column the reference does not (a country read from "in Kuwaiti dinars", a category
    # from the shop's name), 58 of them with no missing filter, so nothing else said what went wrong.
    extra = [c for c in pred.filters if c not in set(ref.filters)]
    if extra:
        facts.append(_filter_fact(Category.REF_EXTRA_FILTER, ("prediction", "reference"), tree, extra))
    facts += _form_facts(_column_forms(tree), _column_forms(ref_tree))
    facts += _value_facts(_compared_values(tree), _compared_values(ref_tree))
    return facts


def _filter_fact(category: Category, sides: tuple[str, str], tree: exp.Expression, columns: list[str]) -> Fact:
    """`sides[0]` (whose query is `tree`) filters on `columns`, `sides[1]` does not: quoting its
    simplest conditions on the first two, which is what a rule would have to say."""
    has, lacks = sides
    conditions = [cond for c in columns[:2] if (cond := _condition_on(tree, c))]
    names = ", ".join(f"`{c}`" for c in columns[:4])
    if conditions:
        return Fact(category, f"the {has} adds the condition {' and '.join(f'`{c}`' for c in conditions)}; the "
                              f"{lacks} has no condition on {names}")
    return Fact(category, f"the {has} filters on {names}, the {lacks} does not")


# Wrappers that convert a stored value (a scale, a text date, a cast); aggregates and parentheses are
# looked through, so SUM(amount) / 100.0 is `amount` read as "SUM(amount) / 100.0".
_CONVERSIONS = (exp.Div, exp.Mul, exp.Add, exp.Sub, exp.Func)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.In)


def _column_forms(tree: exp.Expression) -> dict[str, set[str]]:
    """For each column name, the conversions it is read through ("" = as stored)."""
    forms: dict[str, set[str]] = {}
    for col in tree.find_all(exp.Column):
        parent, written = col.parent, col.sql(dialect="sqlite")
        while isinstance(parent, (exp.Paren, exp.AggFunc)) or (  # sqlglot's implicit casts print as the column
                isinstance(parent, exp.Func) and parent.sql(dialect="sqlite") == written):
            parent = parent.parent
        form = ""
        if isinstance(parent, _CONVERSIONS) and not isinstance(parent, exp.AggFunc):
            bare = parent.copy()
            for c in bare.find_all(exp.Column):
                c.set("table", None)
            form = one_line(bare.sql(dialect="sqlite"), 60)
        forms.setdefault(col.name.lower(), set()).add(form)
    return forms


def _condition_on(tree: exp.Expression, column: str) -> str | None:
    """The reference's simplest WHERE/HAVING condition on `column` (what a rule would have to say)."""
    conds = [c for c in tree.find_all(*_COMPARISONS, exp.Is, exp.Between)
             if any(col.name.lower() == column for col in c.find_all(exp.Column))]
    if not conds:
        return None
    bare = min(conds, key=lambda c: len(c.sql(dialect="sqlite"))).copy()
    for col in bare.find_all(exp.Column):
        col.set("table", None)
    return one_line(bare.sql(dialect="sqlite"), 60)


def _form_facts(pred: dict[str, set[str]], ref: dict[str, set[str]]) -> list[Fact]:
    """Columns both queries read that the reference converts in a way the prediction never does."""
    facts = []
    for name in sorted(set(pred) & set(ref)):
        converted = sorted(f for f in ref[name] - pred[name] if f)
        if converted and not pred[name] & (ref[name] - {""}):
            own = sorted(f for f in pred[name] if f)
            facts.append(Fact(Category.REF_COLUMN_FORM, f"the reference reads `{name}` as `{converted[0]}`, the "
                              + (f"prediction as `{own[0]}`" if own else "prediction uses it as stored")))
    return facts[:3]


def _compared_values(tree: exp.Expression) -> dict[str, set[str]]:
    """For each column compared directly with literals (`col = 'Y'`, `col IN (1, 2)`), those literals."""
    values: dict[str, set[str]] = {}
    for cmp in tree.find_all(*_COMPARISONS):
        operands = [cmp.this] + ([*cmp.expressions] if isinstance(cmp, exp.In) else [cmp.expression])
        operands = [o.unnest() if isinstance(o, exp.Paren) else o for o in operands if o is not None]
        cols = [o for o in operands if isinstance(o, exp.Column)]
        lits = [o for o in operands if isinstance(o, (exp.Literal, exp.Neg, exp.Boolean))]
        if len(cols) == 1 and lits:
            values.setdefault(cols[0].name.lower(), set()).update(one_line(o.sql(dialect="sqlite"), 30) for o in lits)
    return values


def _value_facts(pred: dict[str, set[str]], ref: dict[str, set[str]]) -> list[Fact]:
    """Columns both queries compare with literals, with no literal in common."""
    facts = []
    for name in sorted(set(pred) & set(ref)):
        if not pred[name] & ref[name]:
            facts.append(Fact(Category.REF_COMPARED_VALUE, f"the reference compares `{name}` with "
                              f"{', '.join(sorted(ref[name])[:3])}, the prediction with {', '.join(sorted(pred[name])[:3])}"))
    return facts[:3]


def _clauses(shape: SqlShape) -> str:
    parts = (["ORDER BY"] if shape.order_by else []) + (["LIMIT"] if shape.limit is not None else [])
    return " and ".join(parts) or "neither ORDER BY nor LIMIT"


def _names(items: list[str]) -> str:
    return ", ".join(f"`{t}`" for t in items) if items else "(none)"


def _dedup(facts: list[Fact]) -> list[Fact]:
    return list(dict.fromkeys(facts))
