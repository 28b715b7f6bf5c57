"""Twelve SQLite shop databases whose data follow house conventions that their schema does not show.

Why: on BIRD most failures of small models are not SQL skill but *conventions* the schema hides — money
kept in minor units, flags spelled 'Y'/'N', dates stored as text in a local format — which BIRD states
in an "evidence" hint. A rule such as "look at sample values of flag, date and amount columns before
filtering" fixes many questions at once, and it transfers only if it is general. So the databases
here share the *kinds* of convention but not their values: one stores euros in cents and another
dinars in thousandths (fils); one spells flags 'Y'/'N', another 'true'/'false'.

Every database has the same four-table shape under its own names: people (customers, clients,
members, listeners), items (books, wines, cables, ...), transactions (orders, sales, purchases,
invoices) and transaction lines. The convention kinds (`Kind`), and how a database can spell each:

- ``money``: prices and amounts as INTEGER minor units, 100 per unit (cents, pence, rappen) or 1000
  (fils, baisa); plain databases store REAL major units;
- ``flag``: yes/no columns as TEXT pairs ('Y'/'N', 'T'/'F', 'yes'/'no' in optimization; 'true'/'false',
  'y'/'n', 'TRUE'/'FALSE', 'Yes'/'No' in evaluation); plain databases store INTEGER 1/0;
- ``soft_delete``: people and items carry a deletion timestamp (``deleted_at``, ``removed_at``,
  ``deleted_on``, ``archived_at``; ``discarded_at``, ``date_deleted``, ``deleted_date``,
  ``archived_on``); a row with it set no longer exists, wherever it is read;
- ``date_format``: dates as TEXT in one local format (DD/MM/YYYY, YYYYMMDD, MM-DD-YYYY, DD-MM-YYYY;
  DD.MM.YYYY, MM/DD/YYYY, YYYY/MM/DD, YYYY.MM.DD); plain databases use ISO YYYY-MM-DD;
- ``status_code``: transaction status as codes for the words delivered / pending / cancelled /
  refunded ('D', 'DLV', 'DL', 'DELIVERED'; 'DELIV', 'Delivered', 'd', 'dlv');
- ``country_code``: people's country as ISO alpha-2 or alpha-3 codes (also lower-case alpha-2, and
  IOC codes such as GER, SUI, NED in evaluation); plain: English names;
- ``unit``: an item measure in a small unit where questions ask for a larger one (grams/kilograms,
  millilitres/litres, seconds/minutes, millimetres/metres, millimetres/centimetres; seconds/hours,
  centimetres/metres in evaluation).

Which database follows which convention is `DATABASES` (a spec per database). Questions and the
split live in `conventions_tasks`. The databases are built by `ensure_databases(seed)` into
``$HERO_CACHE_DIR/builtin/conventions/seed-<seed>`` (default ``~/.cache/dspy-hero/...``) on first
use, never at import; a stamp with a digest of the generated rows and of the file triggers a rebuild
when either changes. The same seed gives byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass, replace
from datetime import date, timedelta
from enum import Enum
from pathlib import Path

from dspy_hero.tasks.builtin.sql_data import FIRST_NAMES, LAST_NAMES, Table, cache_root, materialize

GENERATOR_VERSION = 1

N_PEOPLE = 120
N_ITEMS = 64
N_TXNS = 420
FIRST_DAY, LAST_DAY = date(2022, 1, 1), date(2024, 12, 31)
STATUS_WORDS = ("delivered", "pending", "cancelled", "refunded")


class Kind(str, Enum):
    """A kind of convention; each database spells the kinds it follows in its own way."""

    MONEY = "money"
    FLAG = "flag"
    SOFT_DELETE = "soft_delete"
    DATE_FORMAT = "date_format"
    STATUS_CODE = "status_code"
    COUNTRY_CODE = "country_code"
    UNIT = "unit"


class Split(str, Enum):
    OPTIMIZATION = "optimization"
    EVALUATION = "evaluation"


# (name, ISO alpha-2, ISO alpha-3, IOC)
COUNTRIES = (
    ("Germany", "DE", "DEU", "GER"), ("Netherlands", "NL", "NLD", "NED"), ("Switzerland", "CH", "CHE", "SUI"),
    ("Portugal", "PT", "PRT", "POR"), ("Denmark", "DK", "DNK", "DEN"), ("Greece", "GR", "GRC", "GRE"),
    ("France", "FR", "FRA", "FRA"), ("Spain", "ES", "ESP", "ESP"), ("Italy", "IT", "ITA", "ITA"),
    ("United Kingdom", "GB", "GBR", "GBR"), ("Ireland", "IE", "IRL", "IRL"), ("Austria", "AT", "AUT", "AUT"),
    ("Sweden", "SE", "SWE", "SWE"), ("Canada", "CA", "CAN", "CAN"), ("Japan", "JP", "JPN", "JPN"),
)
COUNTRY_STYLES = {"name": 0, "iso2": 1, "iso3": 2, "ioc": 3, "iso2_lower": 1}
STATUS_STYLES = {
    "word": ("delivered", "pending", "cancelled", "refunded"),
    "letter": ("D", "P", "C", "R"),
    "two": ("DL", "PN", "CX", "RF"),
    "three": ("DLV", "PND", "CNL", "RFD"),
    "upper": ("DELIVERED", "PENDING", "CANCELLED", "REFUNDED"),
    "capital": ("Delivered", "Pending", "Cancelled", "Refunded"),
    "abbrev": ("DELIV", "PEND", "CANC", "REFD"),
    "lower_letter": ("d", "p", "c", "r"),
    "lower_three": ("dlv", "pnd", "cnl", "rfd"),
}


@dataclass(frozen=True)
class Money:
    """How amounts are stored: `scale` minor units per unit of `currency` (1 = REAL major units)."""

    currency: str  # plural, as a question says it: "dollars", "Kuwaiti dinars"
    scale: int

    def store(self, minor: int) -> int | float:
        """`minor` is the amount in hundredths or thousandths as generated (matching `scale`)."""
        return minor if self.scale > 1 else round(minor / 100, 2)


@dataclass(frozen=True)
class Measure:
    """An item measure stored in a small unit; questions ask in `unit`, `scale` stored units each."""

    column: str  # weight, volume, duration, length, height
    quantity: str  # the noun a question uses: "weight"
    unit: str  # the unit a question asks in: "kilograms"
    scale: int  # stored units per asked unit (1 = stored in the asked unit)
    comparative: str  # "weigh more than"
    low: int  # range of stored values
    high: int


@dataclass(frozen=True)
class Domain:
    """The names of one database's four tables, their key columns and the nouns questions use."""

    people: str  # table and plural noun
    person: str
    items: str
    item: str
    txns: str
    txn: str
    lines: str
    txn_verb: str  # "placed": "orders placed in 2023"
    joined: str  # people's sign-up date column
    joined_verb: str  # "joined"
    txn_date: str  # transactions' date column
    people_flag: str  # column
    people_adj: str  # "active"
    item_flag: str
    item_adj: str  # "organic"
    price: str  # items' price column
    amount: str  # transactions' total column
    categories: tuple[str, ...]
    adjectives: tuple[str, ...]
    nouns: tuple[str, ...]
    price_range: tuple[int, int]  # whole currency units
    label: str  # the business, to qualify nouns in questions: "bookshop" -> "bookshop customers"

    @property
    def people_q(self) -> str:
        return f"{self.label} {self.people}"

    @property
    def txns_q(self) -> str:
        return f"{self.label} {self.txns}"

    @property
    def txn_q(self) -> str:
        return f"{self.label} {self.txn}"


@dataclass(frozen=True)
class ConventionDB:
    """One database: its domain, its split, and how it spells each convention kind."""

    db_id: str
    split: Split
    domain: Domain
    money: Money
    flags: tuple[str, str] | None  # (true, false) as stored; None = INTEGER 1/0
    deleted: str | None  # soft-delete column on people and items; None = rows are deleted for real
    date_format: str  # strftime pattern of every date column
    status_style: str  # key of STATUS_STYLES
    country_style: str  # key of COUNTRY_STYLES
    measure: Measure

    def follows(self, kind: Kind) -> bool:
        """Does this database follow a non-plain spelling of `kind`?"""
        return {
            Kind.MONEY: self.money.scale > 1,
            Kind.FLAG: self.flags is not None,
            Kind.SOFT_DELETE: self.deleted is not None,
            Kind.DATE_FORMAT: self.date_format != "%Y-%m-%d",
            Kind.STATUS_CODE: self.status_style != "word",
            Kind.COUNTRY_CODE: self.country_style != "name",
            Kind.UNIT: self.measure.scale > 1,
        }[kind]

    def kinds(self) -> frozenset[Kind]:
        return frozenset(k for k in Kind if self.follows(k))

    def status_code(self, word: str) -> str:
        return STATUS_STYLES[self.status_style][STATUS_WORDS.index(word)]

    def country_code(self, name: str) -> str:
        row = next(c for c in COUNTRIES if c[0] == name)
        code = row[COUNTRY_STYLES[self.country_style]]
        return code.lower() if self.country_style.endswith("_lower") else code

    def date_text(self, day: date) -> str:
        return day.strftime(self.date_format)

    def date_positions(self) -> dict[str, int]:
        """1-based offsets of the year, month and day in a stored date (for substr)."""
        pos, out = 1, {}
        for token in re.findall(r"%[Ymd]|.", self.date_format):
            if token in ("%Y", "%m", "%d"):
                out[token[1]] = pos
                pos += 4 if token == "%Y" else 2
            else:
                pos += 1
        return out

    def sortable_dates(self) -> bool:
        """Does text order equal date order (year, then month, then day, fixed width)?"""
        p = self.date_positions()
        return p["Y"] < p["m"] < p["d"]


# --- the twelve databases ------------------------------------------------------------------------

GRAMS_KG = Measure("weight", "weight", "kilograms", 1000, "weigh more than", 80, 4800)


def _domain(**kw) -> Domain:
    return Domain(**kw)


BOOKSHOP = _domain(
    people="customers", person="customer", items="books", item="book", txns="orders", txn="order",
    lines="order_items", txn_verb="placed", joined="created", joined_verb="signed up", txn_date="ordered",
    people_flag="is_active", people_adj="active", item_flag="is_signed", item_adj="signed", price="price",
    amount="amount", categories=("Fiction", "History", "Science", "Children", "Poetry", "Travel"),
    adjectives=("Silent", "Golden", "Northern", "Hidden", "Last", "Winter", "Paper", "Distant"),
    nouns=("Harbor", "Garden", "Letters", "Empire", "Voyage", "Orchard", "Atlas", "Lantern"), price_range=(6, 60), label="bookshop")
WINE = _domain(
    people="clients", person="client", items="wines", item="wine", txns="sales", txn="sale", lines="sale_lines",
    txn_verb="made", joined="joined", joined_verb="joined", txn_date="sold_on", people_flag="active",
    people_adj="active", item_flag="is_organic", item_adj="organic", price="list_price", amount="total",
    categories=("Red", "White", "Rose", "Sparkling", "Dessert", "Fortified"),
    adjectives=("Chateau", "Domaine", "Villa", "Casa", "Quinta", "Clos", "Tenuta", "Bodega"),
    nouns=("Belair", "Rocca", "Verde", "Soleil", "Alta", "Monte", "Riviera", "Lune"), price_range=(8, 140), label="wine cellar")
MUSIC = _domain(
    people="members", person="member", items="tracks", item="track", txns="purchases", txn="purchase",
    lines="purchase_items", txn_verb="made", joined="registered", joined_verb="registered", txn_date="purchased",
    people_flag="subscribed", people_adj="subscribed", item_flag="is_explicit", item_adj="explicit",
    price="price", amount="amount", categories=("Rock", "Jazz", "Pop", "Electronic", "Folk", "Classical"),
    adjectives=("Neon", "Velvet", "Electric", "Broken", "Endless", "Crystal", "Restless", "Open"),
    nouns=("Signal", "Parade", "Mirror", "Horizon", "Frequency", "Circle", "Bridge", "Window"), price_range=(0, 5), label="download store")
HARDWARE = _domain(
    people="customers", person="customer", items="parts", item="part", txns="orders", txn="order",
    lines="order_lines", txn_verb="placed", joined="signup_date", joined_verb="signed up", txn_date="order_date",
    people_flag="is_active", people_adj="active", item_flag="in_stock", item_adj="in stock", price="unit_price",
    amount="total", categories=("Fasteners", "Plumbing", "Electrical", "Tools", "Paint", "Garden"),
    adjectives=("Steel", "Brass", "Heavy", "Compact", "Galvanized", "Pro", "Mini", "Flex"),
    nouns=("Bracket", "Valve", "Hinge", "Clamp", "Socket", "Coupler", "Anchor", "Spindle"), price_range=(2, 90), label="hardware store")
FABRIC = _domain(
    people="customers", person="customer", items="fabrics", item="fabric", txns="orders", txn="order",
    lines="order_items", txn_verb="placed", joined="joined", joined_verb="joined", txn_date="ordered_on",
    people_flag="is_active", people_adj="active", item_flag="on_sale", item_adj="on sale", price="price",
    amount="amount", categories=("Cotton", "Linen", "Silk", "Wool", "Denim", "Velvet"),
    adjectives=("Striped", "Floral", "Plain", "Checked", "Dotted", "Herringbone", "Paisley", "Ombre"),
    nouns=("Meadow", "Harbor", "Sunrise", "Slate", "Coral", "Forest", "Dune", "Glacier"), price_range=(5, 70), label="fabric shop")
COFFEE = _domain(
    people="customers", person="customer", items="coffees", item="coffee", txns="orders", txn="order",
    lines="order_items", txn_verb="placed", joined="created", joined_verb="signed up", txn_date="created",
    people_flag="active", people_adj="active", item_flag="is_decaf", item_adj="decaffeinated", price="price",
    amount="amount", categories=("Ethiopia", "Colombia", "Brazil", "Kenya", "Guatemala", "Sumatra"),
    adjectives=("Bright", "Dark", "Morning", "Velvet", "Wild", "Smooth", "Bold", "Honey"),
    nouns=("Roast", "Blend", "Reserve", "Harvest", "Peak", "Valley", "Estate", "Lot"), price_range=(4, 30), label="roastery")
GARDEN = _domain(
    people="customers", person="customer", items="plants", item="plant", txns="sales", txn="sale",
    lines="sale_items", txn_verb="made", joined="since", joined_verb="joined", txn_date="sale_date",
    people_flag="is_active", people_adj="active", item_flag="is_perennial", item_adj="perennial", price="price",
    amount="total", categories=("Roses", "Herbs", "Shrubs", "Succulents", "Ferns", "Bulbs"),
    adjectives=("Dwarf", "Giant", "Creeping", "Scarlet", "Silver", "Alpine", "Sweet", "Wild"),
    nouns=("Sage", "Laurel", "Ivy", "Lavender", "Thyme", "Aster", "Juniper", "Fern"), price_range=(3, 55), label="garden center")
PETS = _domain(
    people="customers", person="customer", items="products", item="product", txns="orders", txn="order",
    lines="order_items", txn_verb="placed", joined="created", joined_verb="signed up", txn_date="created",
    people_flag="is_active", people_adj="active", item_flag="is_bestseller", item_adj="bestsellers",
    price="price", amount="amount", categories=("Dog Food", "Cat Food", "Toys", "Grooming", "Aquarium", "Birds"),
    adjectives=("Happy", "Chewy", "Fluffy", "Premium", "Natural", "Crunchy", "Cozy", "Sturdy"),
    nouns=("Treats", "Kibble", "Brush", "Bed", "Leash", "Feeder", "Ball", "Perch"), price_range=(3, 80), label="pet shop")
TEA = _domain(
    people="members", person="member", items="teas", item="tea", txns="orders", txn="order",
    lines="order_lines", txn_verb="placed", joined="joined", joined_verb="joined", txn_date="placed",
    people_flag="active", people_adj="active", item_flag="is_organic", item_adj="organic", price="price",
    amount="total", categories=("Green", "Black", "Oolong", "White", "Herbal", "Rooibos"),
    adjectives=("Jade", "Imperial", "Misty", "Golden", "Silver", "Spring", "Royal", "Mountain"),
    nouns=("Dragon", "Needle", "Pearl", "Cloud", "Monkey", "Peony", "Lotus", "Tip"), price_range=(4, 45), label="tea house")
AUDIOBOOKS = _domain(
    people="listeners", person="listener", items="audiobooks", item="audiobook", txns="purchases",
    txn="purchase", lines="purchase_items", txn_verb="made", joined="registered", joined_verb="registered",
    txn_date="purchased", people_flag="subscribed", people_adj="subscribed", item_flag="is_abridged",
    item_adj="abridged", price="price", amount="amount",
    categories=("Mystery", "Biography", "Fantasy", "Business", "Romance", "Science"),
    adjectives=("Quiet", "Crimson", "Secret", "Iron", "Fading", "Brave", "Endless", "Hollow"),
    nouns=("Witness", "Kingdom", "Ledger", "Tide", "Road", "Promise", "Archive", "Storm"), price_range=(5, 40), label="audiobook store")
CABLES = _domain(
    people="clients", person="client", items="cables", item="cable", txns="invoices", txn="invoice",
    lines="invoice_lines", txn_verb="issued", joined="since", joined_verb="became clients", txn_date="invoice_date",
    people_flag="is_active", people_adj="active", item_flag="is_shielded", item_adj="shielded", price="unit_price",
    amount="total", categories=("Power", "Network", "Coaxial", "Fiber", "Audio", "Control"),
    adjectives=("Flex", "Armored", "Twin", "Quad", "Marine", "Solar", "Slim", "Outdoor"),
    nouns=("Core", "Line", "Lead", "Link", "Trunk", "Patch", "Feeder", "Drop"), price_range=(3, 120), label="cable supplier")
OLIVE = _domain(
    people="customers", person="customer", items="oils", item="oil", txns="orders", txn="order",
    lines="order_items", txn_verb="placed", joined="created", joined_verb="signed up", txn_date="order_date",
    people_flag="active", people_adj="active", item_flag="is_unfiltered", item_adj="unfiltered", price="price",
    amount="amount", categories=("Extra Virgin", "Virgin", "Infused", "Blend", "Single Estate", "Organic"),
    adjectives=("Sunny", "Coastal", "Ancient", "Green", "Golden", "Early", "Mild", "Peppery"),
    nouns=("Grove", "Harvest", "Press", "Terrace", "Hill", "Reserve", "Valley", "Cove"), price_range=(6, 50), label="olive oil shop")


DATABASES: dict[str, ConventionDB] = {db.db_id: db for db in (
    # --- optimization --------------------------------------------------------------------------
    ConventionDB("bookshop", Split.OPTIMIZATION, BOOKSHOP, Money("dollars", 100), ("Y", "N"), "deleted_at",
                 "%d/%m/%Y", "letter", "iso2", GRAMS_KG),
    ConventionDB("wine_cellar", Split.OPTIMIZATION, WINE, Money("euros", 100), ("T", "F"), "removed_at",
                 "%Y%m%d", "three", "iso3",
                 Measure("volume", "volume", "litres", 1000, "hold more than", 187, 3000)),
    ConventionDB("music_downloads", Split.OPTIMIZATION, MUSIC, Money("Kuwaiti dinars", 1000), ("yes", "no"),
                 "deleted_at", "%m-%d-%Y", "upper", "name",
                 Measure("duration", "duration", "minutes", 60, "last longer than", 95, 540)),
    ConventionDB("hardware_store", Split.OPTIMIZATION, HARDWARE, Money("dollars", 1), ("Y", "N"), "deleted_on",
                 "%d-%m-%Y", "letter", "iso2", GRAMS_KG),
    ConventionDB("fabric_shop", Split.OPTIMIZATION, FABRIC, Money("Canadian dollars", 100), None, "archived_at",
                 "%d/%m/%Y", "two", "iso3",
                 Measure("length", "length", "metres", 1000, "are longer than", 500, 12000)),
    ConventionDB("coffee_roaster", Split.OPTIMIZATION, COFFEE, Money("Bahraini dinars", 1000), ("T", "F"), None,
                 "%Y%m%d", "three", "iso2", Measure("weight", "weight", "kilograms", 1000, "weigh more than", 250, 5000)),
    ConventionDB("garden_center", Split.OPTIMIZATION, GARDEN, Money("euros", 100), ("yes", "no"), "deleted_at",
                 "%Y-%m-%d", "letter", "iso3",
                 Measure("height", "height", "centimetres", 10, "are taller than", 50, 1800)),
    # --- evaluation ----------------------------------------------------------------------------
    ConventionDB("pet_supplies", Split.EVALUATION, PETS, Money("Swiss francs", 100), ("true", "false"),
                 "discarded_at", "%d.%m.%Y", "abbrev", "ioc", GRAMS_KG),
    ConventionDB("tea_house", Split.EVALUATION, TEA, Money("Omani rials", 1000), ("y", "n"), "date_deleted",
                 "%m/%d/%Y", "capital", "iso2_lower", Measure("weight", "weight", "kilograms", 1000, "weigh more than", 25, 1000)),
    ConventionDB("audiobook_store", Split.EVALUATION, AUDIOBOOKS, Money("pounds", 100), ("TRUE", "FALSE"), None,
                 "%Y/%m/%d", "lower_letter", "ioc",
                 Measure("duration", "duration", "hours", 3600, "last longer than", 3600, 90000)),
    ConventionDB("cable_supplier", Split.EVALUATION, CABLES, Money("Jordanian dinars", 1000), ("Yes", "No"),
                 "deleted_date", "%d.%m.%Y", "lower_three", "name",
                 Measure("length", "length", "metres", 100, "are longer than", 50, 10000)),
    ConventionDB("olive_oil_shop", Split.EVALUATION, OLIVE, Money("euros", 1), ("true", "false"), "archived_on",
                 "%Y.%m.%d", "capital", "ioc",
                 Measure("volume", "volume", "litres", 1000, "hold more than", 250, 5000)),
)}


def databases(split: Split | None = None) -> list[ConventionDB]:
    return [db for db in DATABASES.values() if split is None or db.split is split]


def following(db: ConventionDB, kinds: frozenset[Kind] | None) -> ConventionDB:
    """`db` following only those of its conventions whose kind is in `kinds`, every other kind in its
    plain spelling (REAL major units, INTEGER 1/0 flags, no deletion column, ISO dates, status words,
    country names, the asked unit); None: all of them, as `DATABASES` has it. A variant never gains a
    convention the database does not follow.

    Why: in the twelve databases most questions touch two or more conventions, so one right rule
    alone rarely makes an answer right; a variant that follows one kind asks questions that hinge on
    that kind alone (the demo's task, `conventions_tasks.conventions_demo_task`)."""
    if kinds is None:
        return db
    keep = frozenset(kinds)
    return replace(
        db,
        money=db.money if Kind.MONEY in keep else Money(db.money.currency, 1),
        flags=db.flags if Kind.FLAG in keep else None,
        deleted=db.deleted if Kind.SOFT_DELETE in keep else None,
        date_format=db.date_format if Kind.DATE_FORMAT in keep else "%Y-%m-%d",
        status_style=db.status_style if Kind.STATUS_CODE in keep else "word",
        country_style=db.country_style if Kind.COUNTRY_CODE in keep else "name",
        measure=db.measure if Kind.UNIT in keep else replace(db.measure, scale=1, low=max(1, db.measure.low // db.measure.scale),
                                                             high=max(2, db.measure.high // db.measure.scale)),
    )


def kinds_tag(kinds: frozenset[Kind] | None) -> str:
    """How a convention set names its database folder: "" for all, else "-" + the kinds, sorted."""
    return "" if kinds is None else "-" + "+".join(sorted(k.value for k in kinds))


# --- generation ------------------------------------------------------------------------------------


def _day(rng: random.Random, start: date, end: date) -> date:
    return start + timedelta(days=rng.randrange((end - start).days + 1))


def _minor_prices(rng: random.Random, db: ConventionDB, n: int) -> list[int]:
    """`n` distinct prices in minor units (hundredths, or thousandths for a scale-1000 currency), so
    "the most expensive" never ties."""
    low, high = db.domain.price_range
    per = 1000 if db.money.scale == 1000 else 100
    endings = range(0, 1000, 50) if per == 1000 else (0, 25, 49, 50, 75, 95, 99)
    grid = [whole * per + end for whole in range(low, high + 1) for end in endings if whole or end]
    if len(grid) < n:  # a narrow range in whole units (a plain variant of a thousandths currency): every cent
        grid = [whole * per + end for whole in range(low, high + 1) for end in range(per) if whole or end]
    return rng.sample(grid, n)


def _stored_date(db: ConventionDB, day: date | None) -> str | None:
    return None if day is None else db.date_text(day)


def generate(db: ConventionDB, seed: int) -> list[Table]:
    """The tables of one database, from an RNG seeded by (seed, db_id) so databases are independent."""
    rng = random.Random(f"conventions:{seed}:{db.db_id}")
    d = db.domain
    flag = (lambda v: db.flags[0] if v else db.flags[1]) if db.flags else (lambda v: int(v))
    flag_type = "TEXT" if db.flags else "INTEGER"
    money_type = "INTEGER" if db.money.scale > 1 else "REAL"
    deleted = [db.deleted] if db.deleted else []
    del_ddl = f", {db.deleted} TEXT" if db.deleted else ""

    people = []
    weights = [14, 10, 8, 8, 7, 7, 7, 6, 6, 6, 5, 5, 4, 4, 3]
    for pid in range(1, N_PEOPLE + 1):
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        country = rng.choices(COUNTRIES, weights)[0][0]
        joined = _day(rng, date(2019, 1, 1), date(2024, 6, 30))
        gone = _day(rng, joined, date(2024, 12, 31)) if rng.random() < 0.13 else None
        row = (pid, f"{first} {last}", f"{first.lower()}.{last.lower()}{pid}@example.com",
               db.country_code(country), flag(rng.random() < 0.7), db.date_text(joined))
        people.append(row + ((_stored_date(db, gone),) if db.deleted else ()))

    items, names = [], set()
    prices = _minor_prices(rng, db, N_ITEMS)
    m = db.measure
    for iid in range(1, N_ITEMS + 1):
        while True:
            name = f"{rng.choice(d.adjectives)} {rng.choice(d.nouns)}"
            if name not in names:
                names.add(name)
                break
        gone = _day(rng, date(2022, 6, 1), date(2024, 12, 31)) if rng.random() < 0.14 else None
        row = (iid, name, rng.choice(d.categories), db.money.store(prices[iid - 1]), rng.randint(m.low, m.high),
               flag(rng.random() < 0.35))
        items.append(row + ((_stored_date(db, gone),) if db.deleted else ()))

    # some people never buy anything (their accounts exist, their history is empty)
    buyers = [pid for pid in range(1, N_PEOPLE + 1) if rng.random() >= 0.12]
    txns, lines = [], []
    for tid in range(1, N_TXNS + 1):
        day = _day(rng, FIRST_DAY, LAST_DAY)
        word = rng.choices(STATUS_WORDS, (70, 8, 14, 8))[0]
        if day >= date(2024, 12, 1) and rng.random() < 0.6:
            word = "pending"
        total = 0
        for item in rng.sample(range(N_ITEMS), rng.randint(1, 4)):
            qty = rng.choices((1, 2, 3, 4, 5), (50, 25, 12, 8, 5))[0]
            total += qty * prices[item]
            lines.append((len(lines) + 1, tid, item + 1, qty, db.money.store(prices[item])))
        txns.append((tid, rng.choice(buyers), db.date_text(day), db.status_code(word), db.money.store(total)))

    p_id, i_id, t_id = f"{d.person}_id", f"{d.item}_id", f"{d.txn}_id"
    return [
        Table(d.people, f"CREATE TABLE {d.people} ({p_id} INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT, "
              f"country TEXT, {d.people_flag} {flag_type} NOT NULL, {d.joined} TEXT{del_ddl})",
              (p_id, "name", "email", "country", d.people_flag, d.joined, *deleted), people),
        Table(d.items, f"CREATE TABLE {d.items} ({i_id} INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT, "
              f"{d.price} {money_type} NOT NULL, {m.column} INTEGER, {d.item_flag} {flag_type} NOT NULL{del_ddl})",
              (i_id, "name", "category", d.price, m.column, d.item_flag, *deleted), items),
        Table(d.txns, f"CREATE TABLE {d.txns} ({t_id} INTEGER PRIMARY KEY, {p_id} INTEGER NOT NULL REFERENCES "
              f"{d.people}({p_id}), {d.txn_date} TEXT NOT NULL, status TEXT NOT NULL, {d.amount} {money_type} NOT NULL)",
              (t_id, p_id, d.txn_date, "status", d.amount), txns),
        Table(d.lines, f"CREATE TABLE {d.lines} (line_id INTEGER PRIMARY KEY, {t_id} INTEGER NOT NULL REFERENCES "
              f"{d.txns}({t_id}), {i_id} INTEGER NOT NULL REFERENCES {d.items}({i_id}), quantity INTEGER NOT NULL, "
              f"price {money_type} NOT NULL)",
              ("line_id", t_id, i_id, "quantity", "price"), lines),
    ]


def content_digest(tables: list[Table]) -> str:
    digest = hashlib.sha256(f"conventions-v{GENERATOR_VERSION}".encode())
    for table in tables:
        digest.update(json.dumps([table.name, table.ddl, table.columns, table.rows]).encode())
    return digest.hexdigest()


# --- building --------------------------------------------------------------------------------------


def default_directory(seed: int, kinds: frozenset[Kind] | None = None) -> Path:
    return cache_root() / "conventions" / f"seed-{seed}{kinds_tag(kinds)}"


def ensure_database(db_id: str, seed: int = 0, directory: Path | None = None,
                    kinds: frozenset[Kind] | None = None) -> Path:
    """The path of database `db_id` for `seed` following `kinds` (None: all its conventions), (re)built
    if missing, stale or altered. Idempotent. A variant lives in a folder of its own."""
    if db_id not in DATABASES:
        raise KeyError(f"unknown conventions database {db_id!r}; choose one of {sorted(DATABASES)}")
    tables = generate(following(DATABASES[db_id], kinds), seed)
    if not directory:
        directory = default_directory(seed, kinds)
    elif kinds is not None:  # a variant inside a given folder still gets a folder of its own
        directory = Path(directory) / f"seed-{seed}{kinds_tag(kinds)}"
    directory = Path(directory)
    return materialize(tables, directory, db_id, content_digest(tables), seed=seed)


def ensure_databases(seed: int = 0, directory: Path | None = None,
                     kinds: frozenset[Kind] | None = None) -> dict[str, Path]:
    """All twelve databases for `seed` (following `kinds`: see `following`), by db_id."""
    return {db_id: ensure_database(db_id, seed, directory, kinds) for db_id in DATABASES}
