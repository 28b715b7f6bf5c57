"""The built-in conventions task (``builtin-conventions``): text-to-SQL where the house rules matter.

What it measures. The twelve databases of `conventions_data` follow conventions the schema does not
reveal (money in minor units, text flags, soft deletion, local date formats, status and country
codes, small units; see that module). Every question is plain English ("total amount in euros",
"active customers", "orders placed in March 2023"), and its gold SQL honours the database's
conventions. A model that writes the obvious SQL from the schema alone gets most of them wrong; one
general rule ("look at sample values of amount, flag, date and code columns before filtering;
amounts may be in minor units; rows with a deletion timestamp do not exist") fixes many at once.
That is the situation where an optimizer that finds reusable rules should gain, and it is invisible
to the optimizer: nothing about the conventions reaches it but the execution feedback.

How the questions are made. Each of the `TEMPLATES` writes a question and its SQL through a
`Dialect`: helper calls such as ``d.money("SUM(t.amount)")`` or ``d.is_true("p.is_active")`` render
the database's convention, or the convention-unaware spelling (no division, ``= 1``, an ISO
``BETWEEN``, the status word, the country name, no deletion filter) when the dialect is *naive*
about that kind. So every question has its gold SQL, its fully naive SQL, and one naive SQL per kind
it touches. A question's ``conventions`` are the kinds whose naive SQL text differs from the gold;
its parameters (a year, a country, a category, a threshold) are the first, in a seeded order, for
which the gold result is non-trivial and *each* of those kinds, ignored alone, changes the result
(BIRD set semantics), so no question claims a convention it does not need. A few control templates
touch no convention at all; a template instance with no such parameters is left out.

Split (the paper's cross-database split): the 7 optimization databases (bookshop, wine_cellar,
music_downloads, hardware_store, fabric_shop, coffee_roaster, garden_center) give the train pool, the
5 evaluation databases (pet_supplies, tea_house, audiobook_store, cable_supplier, olive_oil_shop) the
test pool. Every kind recurs on both sides, and every kind has spellings on the evaluation side never
seen in optimization (Omani rials in baisa; 'true'/'false'; DD.MM.YYYY; IOC country codes; seconds
asked in hours; ...). The split is fixed by design; ``split_seed`` draws the data (rows and
parameters) afresh, so several seeds give several draws of the same design. At seed 0
(`conventions_stats` recomputes these figures; the tests check them):

    optimization: 235 questions over 7 databases; evaluation: 168 over 5.
    questions per kind (optimization / evaluation): money 58/39, flag 47/40, soft_delete 123/82,
    date_format 55/45, status_code 68/49, country_code 18/12, unit 21/15; controls 27/18.
    The fully naive SQL is wrong on 88.5% of the optimization and 89.3% of the evaluation questions
    (`benchmarks/conventions_stats.py`, which also reports seeds 1 and 2).

The demo (``builtin-conventions-demo``, `conventions_demo_task`): the same twelve databases and split,
each following soft deletion alone (`conventions_data.following`: every other kind in its plain
spelling, in databases of their own), three questions per template and database, single-table shapes
only; 56 optimization and 20 evaluation questions, balanced over databases, three quarters of each
database's share hinging on the deletion filter (the two databases that do not soft-delete give
controls only). Why: the 1.5B task model follows one written rule on about half of the questions it
is about and ignores a list of several, and on the full mix its answers are wrong for several reasons
at once, so one right rule made 1 to 4 of 48 update pairs right and no demo-sized test could adopt
it (benchmarks/RESULTS.md). The full task is unchanged.

What the model sees. ``db_schema`` is the compact DDL (no comments; plausible column names such as
``price``, ``is_active``, ``status``, ``deleted_at``) followed by the first row of every table, as
stored (`schema_with_rows`; ``sample_rows`` sets how many, 0 drops them): a generator can "check the
sample values" only if it sees some, as BIRD prompts with example rows allow. Nothing states what a
value means: 5499 may be cents or fils, 'N' a flag, '04/05/2024' either April or May. Why one row and
not three: a prompt's first pass over a new database's schema is most of a rollout's cost on a CPU;
with the 1.5B model on 2 idle cores, 10 held-out questions over 5 databases, three rows made a
~720-token prompt whose first pass took 10.1 s (median rollout 7.3 s), one row ~490 tokens and 5.8 s
(median 5.2 s), with the same answers right (1 of 10 each; the probe that became
`benchmarks/conventions_prompt_cost.py`, benchmarks/RESULTS.md). One row still shows each stored
form (minor units, 'Y'/'N', the date order, the codes); what it rarely shows is a soft-deleted row.

Examples: ``db_schema``, ``question`` (the LM's inputs, in `sql_tasks.INPUTS` order), ``db_id``,
``db_path`` (environment references) | ``gold_sql``, ``naive_sql``, ``conventions``, ``template``,
``params`` and ``split`` (labels for analysis and for the scripted simulation in
`dspy_hero.bench.conventions_world`; no metric or optimizer reads them).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any

import dspy

from dspy_hero.metrics.compare import bird_equal
from dspy_hero.tasks.base import Task
from dspy_hero.tasks.builtin.conventions_data import (
    COUNTRIES,
    DATABASES,
    ConventionDB,
    Kind,
    Split,
    ensure_databases,
    following,
)
from dspy_hero.tasks.builtin.sql_tasks import ENV_INPUTS, INPUTS
from dspy_hero.tasks.splits import seeded_order

TASK_NAME = "builtin-conventions"
SAMPLE_ROWS = 1  # example rows per table in db_schema (why one: the module docstring)
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")


# --- rendering -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dialect:
    """Renders SQL for one database, honouring its conventions except the kinds in `naive`."""

    db: ConventionDB
    naive: frozenset[Kind] = frozenset()

    def honours(self, kind: Kind) -> bool:
        return kind not in self.naive and self.db.follows(kind)

    # money
    def money(self, expr: str) -> str:
        return f"{expr} / {self.db.money.scale}.0" if self.honours(Kind.MONEY) else expr

    def money_literal(self, major: float) -> str:
        return str(round(major * self.db.money.scale)) if self.honours(Kind.MONEY) else _num(major)

    # flags
    def is_true(self, column: str) -> str:
        return f"{column} = '{self.db.flags[0]}'" if self.honours(Kind.FLAG) else f"{column} = 1"

    def is_false(self, column: str) -> str:
        return f"{column} = '{self.db.flags[1]}'" if self.honours(Kind.FLAG) else f"{column} = 0"

    # soft deletion
    def alive(self, alias: str) -> str | None:
        return f"{alias}.{self.db.deleted} IS NULL" if self.honours(Kind.SOFT_DELETE) else None

    # dates
    def _part(self, column: str, part: str) -> str:
        width = 4 if part == "Y" else 2
        return f"substr({column}, {self.db.date_positions()[part]}, {width})"

    def date_key(self, column: str) -> str:
        """An expression that sorts and compares like the ISO date."""
        if not self.honours(Kind.DATE_FORMAT) or self.db.sortable_dates():
            return column
        return f"{self._part(column, 'Y')} || '-' || {self._part(column, 'm')} || '-' || {self._part(column, 'd')}"

    def iso_literal(self, iso: str) -> str:
        """An ISO date as the database writes it, to compare with `date_key`."""
        if self.honours(Kind.DATE_FORMAT) and self.db.sortable_dates():
            return f"'{self.db.date_text(date.fromisoformat(iso))}'"
        return f"'{iso}'"

    def year_is(self, column: str, year: int) -> str:
        if self.honours(Kind.DATE_FORMAT):
            return f"{self._part(column, 'Y')} = '{year}'"
        return f"{column} BETWEEN '{year}-01-01' AND '{year}-12-31'"

    def month_is(self, column: str, year: int, month: int) -> str:
        if self.honours(Kind.DATE_FORMAT):
            return f"{self._part(column, 'Y')} = '{year}' AND {self._part(column, 'm')} = '{month:02d}'"
        return f"{column} BETWEEN '{year}-{month:02d}-01' AND '{year}-{month:02d}-31'"

    def year_of(self, column: str) -> str:
        return self._part(column, "Y") if self.honours(Kind.DATE_FORMAT) else f"strftime('%Y', {column})"

    # codes
    def status_is(self, column: str, word: str) -> str:
        value = self.db.status_code(word) if self.honours(Kind.STATUS_CODE) else word
        return f"{column} = '{value}'"

    def country_is(self, column: str, name: str) -> str:
        value = self.db.country_code(name) if self.honours(Kind.COUNTRY_CODE) else name
        return f"{column} = '{value}'"

    # units
    def measure(self, expr: str) -> str:
        return f"{expr} / {self.db.measure.scale}.0" if self.honours(Kind.UNIT) else expr

    def measure_literal(self, amount: float) -> str:
        return str(round(amount * self.db.measure.scale)) if self.honours(Kind.UNIT) else _num(amount)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def where(*conditions: str | None) -> str:
    kept = [c for c in conditions if c]
    return " WHERE " + " AND ".join(kept) if kept else ""


# --- templates ---------------------------------------------------------------------------------------

Params = dict[str, Any]


@dataclass(frozen=True)
class Template:
    """One question shape: candidate parameters (preference order is seeded), the question text and
    the SQL, both written for any database through its names and a `Dialect`."""

    name: str
    question: Callable[[ConventionDB, Params], str]
    sql: Callable[[Dialect, Params], str]
    params: Callable[[ConventionDB], list[Params]] = field(default=lambda db: [{}])


def _years(db: ConventionDB) -> list[Params]:
    return [{"year": y} for y in (2022, 2023, 2024)]


def _join_years(db: ConventionDB) -> list[Params]:
    return [{"year": y} for y in (2020, 2021, 2022, 2023, 2024)]


def _countries(db: ConventionDB) -> list[Params]:
    return [{"country": c[0]} for c in COUNTRIES[:10]]


def _categories(db: ConventionDB) -> list[Params]:
    return [{"category": c} for c in db.domain.categories]


def _price_thresholds(db: ConventionDB) -> list[Params]:
    low, high = db.domain.price_range
    return [{"x": round(low + (high - low) * f)} for f in (0.25, 0.4, 0.5, 0.6)]


def _amount_thresholds(db: ConventionDB) -> list[Params]:
    low, high = db.domain.price_range
    return [{"x": round((low + high) * f)} for f in (1.0, 1.5, 2.0, 3.0)]


def _measure_thresholds(db: ConventionDB) -> list[Params]:
    m = db.measure
    return [{"x": round((m.low + (m.high - m.low) * f) / m.scale, 1 if m.scale > 1 else 0)} for f in (0.3, 0.5, 0.7)]


def _months(db: ConventionDB) -> list[Params]:
    return [{"year": y, "month": mo} for y in (2023, 2024) for mo in (2, 3, 5, 10, 11)]


def _status_years(db: ConventionDB) -> list[Params]:
    return [{"year": y, "status": s} for s in ("cancelled", "refunded") for y in (2022, 2023, 2024)]


def _since(db: ConventionDB) -> list[Params]:
    return [{"iso": f"2024-{mo:02d}-01", "month": mo} for mo in (3, 5, 7, 9)]


def _people(db: ConventionDB) -> str:
    return f"{db.domain.people} p"


def _t(db: ConventionDB) -> str:
    return f"{db.domain.txns} t"


def _id(db: ConventionDB, role: str) -> str:
    return f"{getattr(db.domain, role)}_id"


def _pj(db: ConventionDB) -> str:
    """people JOIN txns"""
    return f"{_people(db)} JOIN {_t(db)} ON t.{_id(db, 'person')} = p.{_id(db, 'person')}"


def _ilt(db: ConventionDB) -> str:
    """items JOIN lines JOIN txns"""
    d = db.domain
    return (f"{d.items} i JOIN {d.lines} l ON l.{_id(db, 'item')} = i.{_id(db, 'item')} JOIN {_t(db)} "
            f"ON t.{_id(db, 'txn')} = l.{_id(db, 'txn')}")


def _when(p: Params) -> str:
    return f"{MONTHS[p['month'] - 1]} {p['year']}"


TEMPLATES: tuple[Template, ...] = (
    Template(
        "active_people",
        lambda db, p: f"How many {db.domain.people_q} are {db.domain.people_adj}?",
        lambda d, p: f"SELECT COUNT(*) FROM {_people(d.db)}"
        + where(d.is_true(f"p.{d.db.domain.people_flag}"), d.alive("p"))),
    Template(
        "inactive_people",
        lambda db, p: f"How many {db.domain.people_q} are not {db.domain.people_adj}?",
        lambda d, p: f"SELECT COUNT(*) FROM {_people(d.db)}"
        + where(d.is_false(f"p.{d.db.domain.people_flag}"), d.alive("p"))),
    Template(
        "people_from_country",
        lambda db, p: f"How many {db.domain.people_q} are from {p['country']}?",
        lambda d, p: f"SELECT COUNT(*) FROM {_people(d.db)}" + where(d.country_is("p.country", p["country"]), d.alive("p")),
        _countries),
    Template(
        "active_names_from_country",
        lambda db, p: f"List the names of the {db.domain.people_adj} {db.domain.people_q} from {p['country']}.",
        lambda d, p: f"SELECT p.name FROM {_people(d.db)}"
        + where(d.country_is("p.country", p["country"]), d.is_true(f"p.{d.db.domain.people_flag}"), d.alive("p")),
        _countries),
    Template(
        "joined_in_year",
        lambda db, p: f"How many {db.domain.people_q} {db.domain.joined_verb} in {p['year']}?",
        lambda d, p: f"SELECT COUNT(*) FROM {_people(d.db)}" + where(d.year_is(f"p.{d.db.domain.joined}", p["year"]), d.alive("p")),
        _join_years),
    Template(
        "people_per_country",
        lambda db, p: f"How many {db.domain.people_q} are there in each country? Show the country and the number of "
        f"{db.domain.people_q}.",
        lambda d, p: f"SELECT p.country, COUNT(*) FROM {_people(d.db)}" + where(d.alive("p")) + " GROUP BY p.country"),
    Template(
        "items_in_category",
        lambda db, p: f"How many {db.domain.items} are in the {p['category']} category?",
        lambda d, p: f"SELECT COUNT(*) FROM {d.db.domain.items} i" + where(f"i.category = '{p['category']}'", d.alive("i")),
        _categories),
    Template(
        "avg_price_in_category",
        lambda db, p: f"What is the average price of the {db.domain.items} in the {p['category']} category, in "
        f"{db.money.currency}, rounded to 2 decimals?",
        lambda d, p: f"SELECT ROUND({d.money(f'AVG(i.{d.db.domain.price})')}, 2) FROM {d.db.domain.items} i"
        + where(f"i.category = '{p['category']}'", d.alive("i")),
        _categories),
    Template(
        "items_cheaper_than",
        lambda db, p: f"How many {db.domain.items} cost less than {p['x']} {db.money.currency}?",
        lambda d, p: f"SELECT COUNT(*) FROM {d.db.domain.items} i"
        + where(f"i.{d.db.domain.price} < {d.money_literal(p['x'])}", d.alive("i")),
        _price_thresholds),
    Template(
        "most_expensive_in_category",
        lambda db, p: f"What are the 3 most expensive {db.domain.items} in the {p['category']} category? Give each "
        f"name and its price in {db.money.currency}.",
        lambda d, p: f"SELECT i.name, {d.money(f'i.{d.db.domain.price}')} FROM {d.db.domain.items} i"
        + where(f"i.category = '{p['category']}'", d.alive("i")) + f" ORDER BY i.{d.db.domain.price} DESC LIMIT 3",
        _categories),
    Template(
        "items_above_measure",
        lambda db, p: f"How many {db.domain.items} {db.measure.comparative} {p['x']} {db.measure.unit}?",
        lambda d, p: f"SELECT COUNT(*) FROM {d.db.domain.items} i"
        + where(f"i.{d.db.measure.column} > {d.measure_literal(p['x'])}", d.alive("i")),
        _measure_thresholds),
    Template(
        "total_measure_in_category",
        lambda db, p: f"What is the total {db.measure.quantity} of the {db.domain.items} in the {p['category']} "
        f"category, in {db.measure.unit}?",
        lambda d, p: f"SELECT {d.measure(f'SUM(i.{d.db.measure.column})')} FROM {d.db.domain.items} i"
        + where(f"i.category = '{p['category']}'", d.alive("i")),
        _categories),
    Template(
        "flagged_items",
        lambda db, p: f"How many {db.domain.items} are {db.domain.item_adj}?",
        lambda d, p: f"SELECT COUNT(*) FROM {d.db.domain.items} i"
        + where(d.is_true(f"i.{d.db.domain.item_flag}"), d.alive("i"))),
    Template(
        "avg_measure_of_flagged",
        lambda db, p: f"What is the average {db.measure.quantity} of the {db.domain.items} that are "
        f"{db.domain.item_adj}, in {db.measure.unit}, rounded to 2 decimals?",
        lambda d, p: f"SELECT ROUND({d.measure(f'AVG(i.{d.db.measure.column})')}, 2) FROM {d.db.domain.items} i"
        + where(d.is_true(f"i.{d.db.domain.item_flag}"), d.alive("i"))),
    Template(
        "flagged_in_category",
        lambda db, p: f"List the names of the {db.domain.item_adj} {db.domain.items} in the {p['category']} category.",
        lambda d, p: f"SELECT i.name FROM {d.db.domain.items} i"
        + where(f"i.category = '{p['category']}'", d.is_true(f"i.{d.db.domain.item_flag}"), d.alive("i")),
        _categories),
    Template(
        "delivered_amount_in_year",
        lambda db, p: f"What was the total amount, in {db.money.currency}, of the delivered {db.domain.txns_q} "
        f"{db.domain.txn_verb} in {p['year']}?",
        lambda d, p: f"SELECT {d.money(f'SUM(t.{d.db.domain.amount})')} FROM {_t(d.db)}"
        + where(d.status_is("t.status", "delivered"), d.year_is(f"t.{d.db.domain.txn_date}", p["year"])),
        _years),
    Template(
        "cancelled_count",
        lambda db, p: f"How many {db.domain.txns_q} were cancelled?",
        lambda d, p: f"SELECT COUNT(*) FROM {_t(d.db)}" + where(d.status_is("t.status", "cancelled"))),
    Template(
        "status_in_year",
        lambda db, p: f"How many of the {db.domain.txns_q} {db.domain.txn_verb} in {p['year']} were {p['status']}?",
        lambda d, p: f"SELECT COUNT(*) FROM {_t(d.db)}"
        + where(d.status_is("t.status", p["status"]), d.year_is(f"t.{d.db.domain.txn_date}", p["year"])),
        _status_years),
    Template(
        "txns_in_month",
        lambda db, p: f"How many {db.domain.txns_q} were {db.domain.txn_verb} in {_when(p)}?",
        lambda d, p: f"SELECT COUNT(*) FROM {_t(d.db)}" + where(d.month_is(f"t.{d.db.domain.txn_date}", p["year"], p["month"])),
        _months),
    Template(
        "avg_delivered_amount",
        lambda db, p: f"What is the average amount of a delivered {db.domain.txn_q}, in {db.money.currency}, rounded "
        "to 2 decimals?",
        lambda d, p: f"SELECT ROUND({d.money(f'AVG(t.{d.db.domain.amount})')}, 2) FROM {_t(d.db)}"
        + where(d.status_is("t.status", "delivered"))),
    Template(
        "top_spenders_in_year",
        lambda db, p: f"Which {p['k']} {db.domain.people_q} spent the most on delivered {db.domain.txns_q} in "
        f"{p['year']}? Give each name and the total in {db.money.currency}.",
        lambda d, p: f"SELECT p.name, {d.money(f'SUM(t.{d.db.domain.amount})')} FROM {_pj(d.db)}"
        + where(d.status_is("t.status", "delivered"), d.year_is(f"t.{d.db.domain.txn_date}", p["year"]), d.alive("p"))
        + f" GROUP BY p.{_id(d.db, 'person')} ORDER BY SUM(t.{d.db.domain.amount}) DESC LIMIT {p['k']}",
        lambda db: [{"year": y, "k": k} for k in (3, 5) for y in (2022, 2023, 2024)]),
    Template(
        "txns_above_amount",
        lambda db, p: f"How many {db.domain.txns_q} had an amount above {p['x']} {db.money.currency}?",
        lambda d, p: f"SELECT COUNT(*) FROM {_t(d.db)}" + where(f"t.{d.db.domain.amount} > {d.money_literal(p['x'])}"),
        _amount_thresholds),
    Template(
        "latest_date_with_status",
        lambda db, p: f"On what date was the most recent {p['status']} {db.domain.txn_q} {db.domain.txn_verb}? Give "
        "the date as it is recorded.",
        lambda d, p: f"SELECT t.{d.db.domain.txn_date} FROM {_t(d.db)}" + where(d.status_is("t.status", p["status"]))
        + f" ORDER BY {d.date_key(f't.{d.db.domain.txn_date}')} DESC LIMIT 1",
        lambda db: [{"status": s} for s in ("cancelled", "refunded", "delivered")]),
    Template(
        "earliest_date_with_status",
        lambda db, p: f"On what date was the first {p['status']} {db.domain.txn_q} {db.domain.txn_verb}? Give the "
        "date as it is recorded.",
        lambda d, p: f"SELECT t.{d.db.domain.txn_date} FROM {_t(d.db)}" + where(d.status_is("t.status", p["status"]))
        + f" ORDER BY {d.date_key(f't.{d.db.domain.txn_date}')} LIMIT 1",
        lambda db: [{"status": s} for s in ("refunded", "cancelled", "delivered")]),
    Template(
        "delivered_amount_by_country",
        lambda db, p: f"What was the total amount, in {db.money.currency}, of the delivered {db.domain.txns_q} of "
        f"{db.domain.people_q} from {p['country']}?",
        lambda d, p: f"SELECT {d.money(f'SUM(t.{d.db.domain.amount})')} FROM {_pj(d.db)}"
        + where(d.status_is("t.status", "delivered"), d.country_is("p.country", p["country"]), d.alive("p")),
        _countries),
    Template(
        "units_sold_in_category",
        lambda db, p: f"How many units of {db.domain.items} in the {p['category']} category were sold in delivered "
        f"{db.domain.txns_q}?",
        lambda d, p: f"SELECT SUM(l.quantity) FROM {_ilt(d.db)}"
        + where(f"i.category = '{p['category']}'", d.status_is("t.status", "delivered"), d.alive("i")),
        _categories),
    Template(
        "line_revenue_per_category",
        lambda db, p: f"For each category, how much money did {db.domain.txn_q} lines (quantity times price) bring in, "
        f"in {db.money.currency}? Show the category and the amount.",
        lambda d, p: f"SELECT i.category, {d.money('SUM(l.quantity * l.price)')} FROM {d.db.domain.items} i JOIN "
        f"{d.db.domain.lines} l ON l.{_id(d.db, 'item')} = i.{_id(d.db, 'item')}" + where(d.alive("i"))
        + " GROUP BY i.category"),
    Template(
        "active_without_txns",
        lambda db, p: f"How many {db.domain.people_adj} {db.domain.people_q} have no {db.domain.txns_q} at all?",
        lambda d, p: f"SELECT COUNT(*) FROM {_people(d.db)}"
        + where(d.is_true(f"p.{d.db.domain.people_flag}"), d.alive("p"),
                f"p.{_id(d.db, 'person')} NOT IN (SELECT {_id(d.db, 'person')} FROM {d.db.domain.txns})")),
    Template(
        "txns_per_year",
        lambda db, p: f"How many {db.domain.txns_q} were {db.domain.txn_verb} in each year? Show the year and the count.",
        lambda d, p: f"SELECT {d.year_of(f't.{d.db.domain.txn_date}')} AS year, COUNT(*) FROM {_t(d.db)} GROUP BY year"),
    Template(
        "txns_since",
        lambda db, p: f"How many {db.domain.txns_q} were {db.domain.txn_verb} on or after 1 {MONTHS[p['month'] - 1]} 2024?",
        lambda d, p: f"SELECT COUNT(*) FROM {_t(d.db)}"
        + where(f"{d.date_key(f't.{d.db.domain.txn_date}')} >= {d.iso_literal(p['iso'])}"),
        _since),
    Template(
        "active_spend_in_year",
        lambda db, p: f"How much did {db.domain.people_adj} {db.domain.people_q} spend in total on delivered "
        f"{db.domain.txns_q} in {p['year']}, in {db.money.currency}?",
        lambda d, p: f"SELECT {d.money(f'SUM(t.{d.db.domain.amount})')} FROM {_pj(d.db)}"
        + where(d.is_true(f"p.{d.db.domain.people_flag}"), d.alive("p"), d.status_is("t.status", "delivered"),
                d.year_is(f"t.{d.db.domain.txn_date}", p["year"])),
        _years),
    # --- controls: no convention is involved ------------------------------------------------------
    Template(
        "txn_count",
        lambda db, p: f"How many {db.domain.txns_q} are there in total?",
        lambda d, p: f"SELECT COUNT(*) FROM {_t(d.db)}"),
    Template(
        "largest_line_quantity",
        lambda db, p: f"What is the largest quantity of one {db.domain.item} on a single {db.domain.txn_q} line?",
        lambda d, p: f"SELECT MAX(l.quantity) FROM {d.db.domain.lines} l"),
    Template(
        "txns_with_many_lines",
        lambda db, p: f"How many {db.domain.txns_q} have more than 3 lines?",
        lambda d, p: f"SELECT COUNT(*) FROM (SELECT l.{_id(d.db, 'txn')} FROM {d.db.domain.lines} l GROUP BY "
        f"l.{_id(d.db, 'txn')} HAVING COUNT(*) > 3)"),
)

TEMPLATE_BY_NAME: dict[str, Template] = {t.name: t for t in TEMPLATES}


# --- question instances ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    """One question over one database: gold SQL, fully naive SQL, and the naive SQL per kind."""

    db_id: str
    template: str
    question: str
    gold_sql: str
    naive_sql: str
    naive_by_kind: dict[Kind, str]  # only the kinds whose naive text differs from the gold
    params: Params = field(default_factory=dict)
    db: ConventionDB | None = field(default=None, compare=False, repr=False)  # the spec (variant) it was asked of
    instance: int = 0  # the how-many-th accepted parameters of its template on its database

    def sql_ignoring(self, kinds: frozenset[Kind]) -> str:
        """The SQL of a writer who honours every convention but `kinds`."""
        return TEMPLATE_BY_NAME[self.template].sql(Dialect(self.db or DATABASES[self.db_id], kinds), self.params)

    @property
    def example_id(self) -> str:
        return f"{self.db_id}-{self.template}" + (f"-{self.instance}" if self.instance else "")

    @property
    def conventions(self) -> tuple[str, ...]:
        return tuple(k.value for k in self.naive_by_kind)


def render(template: Template, db: ConventionDB, params: Params) -> Question:
    gold = template.sql(Dialect(db), params)
    per_kind = {}
    for kind in Kind:
        text = template.sql(Dialect(db, frozenset({kind})), params)
        if text != gold:
            per_kind[kind] = text
    naive = template.sql(Dialect(db, frozenset(Kind)), params)
    return Question(db.db_id, template.name, template.question(db, params), gold, naive, per_kind, dict(params), db)


def trivial(rows: list[tuple] | None) -> bool:
    """No rows, or one row of nothing but NULL/0: not an answer worth asking for."""
    if not rows:
        return True
    return len(rows) == 1 and all(v is None or v == 0 for v in rows[0])


def _rows(conn: sqlite3.Connection, sql: str) -> list[tuple] | None:
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.Error:
        return None


_LIMIT = re.compile(r"\bLIMIT (\d+)$")


def tied_at_limit(sql: str, conn: sqlite3.Connection) -> bool:
    """Would a tie at a top-k boundary make the answer depend on the engine's row order? (Checked on
    the last column, which holds the ranked value in every multi-column top-k template.)"""
    match = _LIMIT.search(sql)
    if not match:
        return False
    k = int(match.group(1))
    rows = _rows(conn, sql[: match.start()] + f"LIMIT {k + 1}") or []
    return len(rows) > k and len(rows[0]) > 1 and rows[k - 1][-1] == rows[k][-1]


def accepted(question: Question, conn: sqlite3.Connection) -> bool:
    """Gold gives a non-trivial, tie-free answer and every convention it claims matters, alone and all
    together."""
    gold = _rows(conn, question.gold_sql)
    if gold is None or trivial(gold) or tied_at_limit(question.gold_sql, conn):
        return False
    naive_texts = list(question.naive_by_kind.values()) + ([question.naive_sql] if question.naive_by_kind else [])
    for sql in naive_texts:
        rows = _rows(conn, sql)
        if rows is not None and bird_equal(rows, gold):
            return False
    return True


def build_questions(db: ConventionDB, db_path: Path, seed: int, per_template: int = 1) -> list[Question]:
    """The questions of one database: per template, the first `per_template` accepted parameters in
    seeded order (the first keeps the id ``<db>-<template>``, later ones add ``-1``, ``-2``, ...)."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        out = []
        for template in TEMPLATES:
            candidates = seeded_order(template.params(db), seed, key=lambda p: f"{db.db_id}:{template.name}:{p}")
            taken, asked = 0, set()
            for params in candidates:
                question = render(template, db, params)
                if question.question in asked:  # parameters that round to the same question (a plain unit)
                    continue
                if accepted(question, conn):
                    asked.add(question.question)
                    out.append(replace(question, instance=taken))
                    taken += 1
                    if taken >= per_template:
                        break
        return out
    finally:
        conn.close()


# --- examples and the task --------------------------------------------------------------------------------


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def schema_with_rows(db_path: Path, rows: int = SAMPLE_ROWS) -> str:
    """The compact DDL of `schema_text`, then the first `rows` rows of every table, as stored.

    Why rows: a single-pass generator can only "check the sample values" if it sees some, as in the
    BIRD prompts that list example rows. They show the data, never what it means: no comment, no unit.
    """
    from dspy_hero.execution.sqlite_environment import quote_identifier, schema_text

    text = schema_text(db_path)
    if rows <= 0:
        return text
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid")]
        lines = []
        for table in tables:
            sample = conn.execute(f"SELECT * FROM {quote_identifier(table)} ORDER BY rowid LIMIT {int(rows)}").fetchall()
            shown = ", ".join("(" + ", ".join(_literal(v) for v in row) + ")" for row in sample)
            lines.append(f"Example rows of {table}: {shown}")
        return text + "\n" + "\n".join(lines)
    finally:
        conn.close()


def conventions_examples(
    seed: int = 0, directory: Path | None = None, sample_rows: int = SAMPLE_ROWS,
    kinds: frozenset[Kind] | None = None, per_template: int = 1,
) -> list[dspy.Example]:
    """All questions of all twelve databases (databases built on demand), by database then template.
    ``db_schema`` is the DDL plus `sample_rows` example rows per table (0: the DDL alone). `kinds`: the
    databases follow only these conventions (`conventions_data.following`; None: all of theirs);
    `per_template`: accepted parameter sets asked per template and database."""
    paths = ensure_databases(seed, directory, kinds)
    examples = []
    for db_id, full in DATABASES.items():
        db = following(full, kinds)
        schema = schema_with_rows(paths[db_id], sample_rows)
        for q in build_questions(db, paths[db_id], seed, per_template):
            shown = {"db_schema": schema, "question": q.question}
            examples.append(
                dspy.Example(
                    example_id=q.example_id, **{name: shown[name] for name in INPUTS}, db_id=db_id,
                    db_path=str(paths[db_id]), gold_sql=q.gold_sql, naive_sql=q.naive_sql,
                    conventions=q.conventions, template=q.template, params=dict(q.params), split=db.split.value,
                    follows=tuple(sorted(k.value for k in db.kinds())),
                ).with_inputs(*INPUTS, *ENV_INPUTS)
            )
    return examples


def split_examples(examples: Sequence[dspy.Example]) -> tuple[list[dspy.Example], list[dspy.Example]]:
    train = [ex for ex in examples if DATABASES[ex.db_id].split is Split.OPTIMIZATION]
    test = [ex for ex in examples if DATABASES[ex.db_id].split is Split.EVALUATION]
    return train, test


def _note(train: Sequence[dspy.Example], test: Sequence[dspy.Example], seed: int, sample_rows: int,
          extra: str = "", name: str = TASK_NAME) -> str:
    def dbs(exs: Sequence[dspy.Example]) -> str:
        return ", ".join(dict.fromkeys(ex.db_id for ex in exs))

    return (
        f"{name}: split by database, fixed by design: {len(train)} optimization questions over "
        f"{len({ex.db_id for ex in train})} databases ({dbs(train)}) / {len(test)} evaluation questions over "
        f"{len({ex.db_id for ex in test})} other databases ({dbs(test)}); both sides follow the same kinds of "
        f"convention with different spellings; data seed {seed}; db_schema shows the DDL and {sample_rows} "
        f"example row{'' if sample_rows == 1 else 's'} per table{extra}. Semantics: BIRD execution accuracy."
    )


def builtin_conventions_task(
    split_seed: int = 0, data_seed: int | None = None, directory: Path | None = None,
    sample_rows: int = SAMPLE_ROWS, **_: object
) -> Task:
    """The conventions Task. The split is fixed by database; `split_seed` (or `data_seed`) draws the data;
    `sample_rows` example rows per table go into ``db_schema``."""
    from dspy_hero.metrics.sql import sql_execution_metric
    from dspy_hero.tasks.builtin.task_builder import make_task

    seed = split_seed if data_seed is None else data_seed
    train, test = split_examples(conventions_examples(seed, directory, sample_rows))
    return make_task(
        name=TASK_NAME, language="sql", train=train, test=test, metric=sql_execution_metric(),
        inputs=INPUTS, group_key="db_id", split_note=_note(train, test, seed, sample_rows),
        extras={"data_seed": seed, "sample_rows": sample_rows},
    )


def balanced_subset(examples: Sequence[dspy.Example], size: int, seed: int) -> list[dspy.Example]:
    """`size` examples taken round-robin over databases (seeded order inside each), file order kept, so
    a small subset still covers every database and most convention kinds."""
    groups: dict[str, list[dspy.Example]] = {}
    for ex in seeded_order(list(examples), seed, key=lambda ex: str(ex.example_id)):
        groups.setdefault(str(ex.db_id), []).append(ex)
    chosen: set[str] = set()
    while len(chosen) < min(size, len(examples)):
        for members in groups.values():
            if members and len(chosen) < size:
                chosen.add(str(members.pop(0).example_id))
    return [ex for ex in examples if str(ex.example_id) in chosen]


DEMO_KINDS = frozenset({Kind.SOFT_DELETE})  # the one convention the demo's databases follow
DEMO_PER_TEMPLATE = 3  # accepted parameter sets per template and database
DEMO_TRAIN_SIZE = 56  # 8 per optimization database: an update pool of 3-4 databases holds 24-32 questions
DEMO_TEST_SIZE = 20
DEMO_SINGLE_SHARE = 0.75
_NOT_SINGLE_TABLE = re.compile(r"\bJOIN\b|\bGROUP\s+BY\b|\bROUND\s*\(|\(\s*SELECT\b", re.IGNORECASE)


def single_table(sql: str) -> bool:
    """Does the SQL read one table with no grouping, rounding or subquery (the shapes where a small model's
    answer is wrong mostly for a convention it missed, not for the SQL around it)?"""
    return not _NOT_SINGLE_TABLE.search(sql)


def interleaved_by_database(examples: Sequence[dspy.Example]) -> list[dspy.Example]:
    """Round-robin over databases (each database's own order kept), so any prefix (``--test-limit``)
    still covers every database."""
    groups: dict[str, list[dspy.Example]] = {}
    for ex in examples:
        groups.setdefault(str(ex.db_id), []).append(ex)
    out: list[dspy.Example] = []
    while any(groups.values()):
        for members in groups.values():
            if members:
                out.append(members.pop(0))
    return out


def demo_subset(examples: Sequence[dspy.Example], size: int, seed: int,
                single_share: float = DEMO_SINGLE_SHARE) -> list[dspy.Example]:
    """`size` examples, balanced over databases, where about `single_share` of each database's quota
    are questions that hinge on ONE convention kind and the rest (multi-convention questions and
    controls) are drawn in seeded order; returned interleaved over databases.

    Why: on the full task most questions touch two or more conventions, and a writer who misses any
    one of them still answers wrongly, so one correct rule alone fixes few questions (on the old
    84-question demo, 1 to 4 of 48 update pairs per rule). A sound paired test at the run's level
    (a share of alpha / T, about 8 fixes and no break) can then adopt nothing in a demo-sized run, even
    though the rule is right. A subset where a rule's own questions are common lets a demo-sized
    run show the mechanism -- a rule adopted on some databases, tested on others -- while the
    multi-convention questions keep showing that one rule is not the whole story. Every method
    sees the same subset; the full task (``builtin-conventions``) is unchanged."""
    if not 0.0 <= single_share <= 1.0:
        raise ValueError(f"single_share must be in [0, 1], got {single_share}")
    groups: dict[str, list[dspy.Example]] = {}
    for ex in seeded_order(list(examples), seed, key=lambda ex: str(ex.example_id)):
        groups.setdefault(str(ex.db_id), []).append(ex)
    quotas = {db: size // len(groups) + (i < size % len(groups)) for i, db in enumerate(groups)} if groups else {}
    chosen: list[dspy.Example] = []
    for db, members in groups.items():
        quota = min(quotas[db], len(members))
        singles = [ex for ex in members if len(ex.conventions) == 1]
        others = [ex for ex in members if len(ex.conventions) != 1]
        take = singles[: min(len(singles), round(quota * single_share))]
        take += others[: quota - len(take)]
        take += [ex for ex in singles if ex not in take][: quota - len(take)]
        chosen += take
    ids = {str(ex.example_id) for ex in chosen}
    return interleaved_by_database([ex for ex in examples if str(ex.example_id) in ids])


def variant_examples(split_seed: int = 0, directory: Path | None = None, sample_rows: int = SAMPLE_ROWS,
                     kinds: frozenset[Kind] | None = DEMO_KINDS, per_template: int = DEMO_PER_TEMPLATE
                     ) -> tuple[list[dspy.Example], list[dspy.Example]]:
    """(optimization, evaluation) questions of the databases following only `kinds`, `per_template` per
    template and database, single-table shapes only (`single_table`)."""
    examples = conventions_examples(split_seed, directory, sample_rows, kinds, per_template)
    return split_examples([ex for ex in examples if single_table(ex.gold_sql)])


def _follows(kinds: frozenset[Kind] | None) -> str:
    return "all their conventions" if kinds is None else "only " + " and ".join(sorted(k.value for k in kinds))


def soft_delete_task(split_seed: int = 0, directory: Path | None = None, sample_rows: int = SAMPLE_ROWS,
                     per_template: int = DEMO_PER_TEMPLATE, **_: object) -> Task:
    """``builtin-conventions-soft-delete``: every single-table question of the twelve databases following
    soft deletion alone (`variant_examples`), the task the demo is a subset of. Where the full task asks
    for several conventions at once, this one asks whether a method finds the one reusable rule that
    its recurring failures need, and how much the rule is worth on other databases (benchmarks/RESULTS.md)."""
    from dspy_hero.metrics.sql import sql_execution_metric
    from dspy_hero.tasks.builtin.task_builder import make_task

    train, test = variant_examples(split_seed, directory, sample_rows, DEMO_KINDS, per_template)
    name = f"{TASK_NAME}-soft-delete"
    note = _note(train, test, split_seed, sample_rows, name=name,
                 extra=f"; the databases follow {_follows(DEMO_KINDS)}, {per_template} question(s) per template, "
                       "single-table shapes")
    return make_task(
        name=name, language="sql", train=train, test=test, metric=sql_execution_metric(),
        inputs=INPUTS, group_key="db_id", split_note=note,
        extras={"data_seed": split_seed, "sample_rows": sample_rows, "kinds": sorted(k.value for k in DEMO_KINDS),
                "per_template": per_template},
    )


def conventions_demo_task(
    train_size: int = DEMO_TRAIN_SIZE, test_size: int = DEMO_TEST_SIZE, split_seed: int = 0,
    directory: Path | None = None, sample_rows: int = SAMPLE_ROWS, single_share: float = DEMO_SINGLE_SHARE,
    kinds: frozenset[Kind] | None = DEMO_KINDS, per_template: int = DEMO_PER_TEMPLATE, **_: object
) -> Task:
    """The demo-sized conventions Task of `hero demo` (``builtin-conventions-demo``): the questions of
    `variant_examples` (the twelve databases following only `kinds`, by default soft deletion alone
    under each database's own column name; `per_template` per template and database; single-table
    shapes), then `train_size` optimization and `test_size` evaluation questions chosen by `demo_subset`
    (balanced over databases, about `single_share` of each database's quota hinging on a convention
    where it has such questions).

    Why this shape, measured with Qwen2.5-Coder-1.5B as task model (benchmarks/RESULTS.md, session 9):
    it follows one written rule on about half of the questions the rule is about, ignores a list of
    six; on the full task most questions need two or more conventions and the model's own SQL errors
    (joins to unrelated tables, filters read from a shop's name), so one right rule made 1 to 4 of 48
    update pairs right and no demo-sized paired test could adopt it. Here a question is wrong for the
    seed mostly because of the one convention, so the rule's effect is large enough for a 20-pair test
    to see, and the two databases that do not soft-delete (coffee_roaster, audiobook_store) give the
    test questions a rule must not break."""
    from dspy_hero.metrics.sql import sql_execution_metric
    from dspy_hero.tasks.builtin.task_builder import make_task

    train, test = variant_examples(split_seed, directory, sample_rows, kinds, per_template)
    train = demo_subset(train, train_size, split_seed, single_share)
    test = demo_subset(test, test_size, split_seed, single_share)
    singles = sum(len(ex.conventions) == 1 for ex in train + test)
    note = _note(train, test, split_seed, sample_rows,
                 extra=(f"; demo subset: the databases follow {_follows(kinds)}, {per_template} question(s) per "
                        f"template, single-table shapes, balanced over databases, {singles} of {len(train) + len(test)} "
                        f"questions hinge on a convention (share {single_share})"), name=f"{TASK_NAME}-demo")
    return make_task(
        name=f"{TASK_NAME}-demo", language="sql", train=train, test=test, metric=sql_execution_metric(),
        inputs=INPUTS, group_key="db_id", split_note=note,
        extras={"data_seed": split_seed, "sample_rows": sample_rows, "demo_subset": True,
                "single_share": single_share, "kinds": None if kinds is None else sorted(k.value for k in kinds),
                "per_template": per_template},
    )
