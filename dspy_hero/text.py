"""Floor-0 utilities that every floor may import: program text out of an LM answer, token estimates,
and one engine-independent form of a result cell.

They live below `execution/` because executors, metrics, the LM adapter and the optimizer all need
them, and a shared helper kept in a higher floor would make a lower one import upward. Standard
library only; nothing here imports another dspy_hero module.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from decimal import Decimal
from typing import Any, Self

__all__ = ["FENCED_BLOCK", "FLOAT_DIGITS", "NAN", "Pairs", "approx_tokens", "extract_code", "normalize_cell"]


def approx_tokens(text: str) -> int:
    """A cheap, deterministic token estimate (about 4 characters per token)."""
    return max(1, (len(text) + 3) // 4) if text else 0


# --- program text in an LM answer ------------------------------------------------------------

_MARKER = re.compile(r"\[\[\s*##\s*\w+\s*##\s*\]\]")
FENCED_BLOCK = re.compile(r"```[ \t]*([A-Za-z0-9_+\-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(text: Any, language: str | None = None) -> str:
    """The program inside an LM answer, tolerant of the ways small models answer.

    Prefers a fenced block whose tag matches `language` (``sql``, ``cypher``, ``python``), else the
    longest fenced block, else an unterminated fence, else the text itself. Strips DSPy field markers
    and a leading ``SQL:``-style label. Never raises: a non-string becomes ``""``.
    """
    if text is None:
        return ""
    if not isinstance(text, str):
        text = str(text)
    # Small models leave DSPy's field markers inline ("LIMIT 5;[[ ## completed ## ]]"): never program text.
    text = _MARKER.sub("\n", text)
    blocks = [(tag.lower(), body) for tag, body in FENCED_BLOCK.findall(text)]
    if blocks:
        wanted = {"sql": {"sql", "sqlite"}, "cypher": {"cypher", "neo4j"}, "python": {"python", "py", "python3"}}
        tags = wanted.get(language or "", set())
        tagged = [body for tag, body in blocks if tag in tags]
        chosen = max(tagged or [b for _, b in blocks], key=len)
        return chosen.strip()
    code = text.strip()
    code = re.sub(r"^(?:sql|cypher|python|query|answer)\s*:\s*", "", code, flags=re.IGNORECASE)
    return code.strip()


# --- result cells ----------------------------------------------------------------------------

# Floats are rounded to this many significant digits: enough to keep every value a benchmark stores,
# few enough that 0.1 + 0.2 and 0.3 (or SUM in a different order) collapse to one value.
FLOAT_DIGITS = 12


class _NaN:
    """The one NaN: equal to itself and hashable, unlike float('nan'), so two NaN cells match."""

    _instance: _NaN | None = None

    def __new__(cls) -> Self:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _NaN)

    def __hash__(self) -> int:
        return hash("dspy_hero.NaN")

    def __repr__(self) -> str:
        return "NaN"

    def __reduce__(self):
        return (_NaN, ())


NAN = _NaN()


class Pairs(tuple):
    """A normalized dict: its (key, value) pairs sorted. A tuple, so it hashes and compares as one,
    but marked so normalizing it again leaves each pair's key before its value."""

    __slots__ = ()


def _norm_float(x: float) -> Any:
    if math.isnan(x):
        return NAN
    if math.isinf(x) or x == 0.0:
        return x + 0.0  # folds -0.0 into 0.0
    return float(f"{x:.{FLOAT_DIGITS}g}")


def _order_key(v: Any) -> tuple:
    """A total order over normalized cells of mixed types, so lists inside cells sort deterministically."""
    if v is None:
        return (0,)
    if isinstance(v, (bool, int, float)):
        return (1, 0, v)
    if v is NAN:
        return (1, 1)
    if isinstance(v, str):
        return (2, v)
    if isinstance(v, bytes):
        return (3, v)
    if isinstance(v, tuple):
        return (4, tuple(_order_key(x) for x in v))
    return (5, type(v).__name__, repr(v))


def normalize_cell(value: Any) -> Any:
    """A hashable, engine-independent form of one result cell.

    Lists, tuples and sets become tuples (lists and sets sorted recursively, as CypherBench sorts list
    values); dicts become sorted tuples of (key, value) pairs; dates, times and datetimes (also Neo4j's
    temporal types) become ISO strings; floats and Decimals are rounded to 12 significant digits;
    every NaN becomes the single `NAN` marker, equal to itself; numpy scalars become Python scalars.
    Anything else unhashable falls back to its repr.
    """
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return _norm_float(value)
    if isinstance(value, Decimal):
        return _norm_float(float(value))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, Pairs):
        return value
    if isinstance(value, dict):
        pairs = [(normalize_cell(k), normalize_cell(v)) for k, v in value.items()]
        return Pairs(sorted(pairs, key=_order_key))
    if isinstance(value, (list, tuple, set, frozenset)):
        return tuple(sorted((normalize_cell(v) for v in value), key=_order_key))
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        try:
            return normalize_cell(value.tolist())
        except Exception:  # noqa: BLE001, S110 - an odd numpy object: fall through to the generic forms
            pass
    iso = getattr(value, "iso_format", None) or getattr(value, "isoformat", None)
    if callable(iso):  # neo4j.time.Date / DateTime / Duration and friends
        try:
            return str(iso())
        except Exception:  # noqa: BLE001, S110 - not really a temporal value: fall through
            pass
    if value is NAN:
        return NAN
    try:
        hash(value)
        return value
    except TypeError:
        return repr(value)
