"""Disjoint diagnosis / update / selection pools.

Why three pools (paper §4.1): examples that inspired a change must not also judge it, and the
prompt finally returned must be chosen on examples that neither inspired nor accepted it.
Grouping (e.g. by ``db_id``) keeps all examples of a group in one pool, so an accepted rule has to
transfer to unseen databases rather than to other questions about the same database.
"""

from __future__ import annotations

import logging
import random
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from dspy_hero.fields import get_field

logger = logging.getLogger("dspy_hero.optimizer")


@dataclass
class Pools:
    """Example ids per pool. `selection_reuses_update` is True when the data was too small for a
    separate selection pool and the update pool is used for final selection too; `notes` are the
    compromises the split had to make (they become HeroResult warnings)."""

    diagnosis: list[str]
    update: list[str]
    selection: list[str]
    selection_reuses_update: bool = False
    selection_is_valset: bool = False
    group_key: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class PoolSplitter(Protocol):
    def split(self, train: list[tuple[str, Any]], val: list[tuple[str, Any]] | None, seed: int) -> Pools: ...


class DefaultPoolSplitter:
    """Splits shuffled examples (or groups) by `fractions` = (diagnosis, update, selection).

    - With a valset, the valset is the selection pool and the trainset is split into diagnosis and
      update by the first two fractions (renormalized): the user's held-out data picks the winner.
    - Below `min_three_way` trainset examples (or groups), there is no separate selection pool:
      selection reuses the update pool, and `Pools.notes` says so.
    - Deterministic given `seed`: groups are ordered by first appearance, then shuffled.
    """

    def __init__(
        self,
        fractions: tuple[float, float, float] = (0.4, 0.4, 0.2),
        group_key: str | None = None,
        min_three_way: int = 6,
    ):
        if len(fractions) != 3 or any(f < 0 for f in fractions) or fractions[0] <= 0 or fractions[1] <= 0:
            raise ValueError(f"pool fractions must be 3 non-negative numbers with diagnosis, update > 0: {fractions}")
        self.fractions = tuple(float(f) for f in fractions)
        self.group_key = group_key
        self.min_three_way = min_three_way

    def split(self, train: list[tuple[str, Any]], val: list[tuple[str, Any]] | None, seed: int) -> Pools:
        notes: list[str] = []
        groups = self._groups(train, notes)
        rng = random.Random(seed)
        keys = list(groups)
        rng.shuffle(keys)
        if len(keys) < 2:
            raise ValueError(
                f"HERO-O needs at least 2 training examples (or groups of {self.group_key!r}) to keep "
                f"diagnosis and update pools disjoint; got {len(keys)}"
            )
        fd, fu, fs = self.fractions
        three_way = not val and fs > 0 and len(keys) >= self.min_three_way
        if not three_way:
            fs = 0.0
        sizes = _sizes(len(keys), (fd, fu, fs))
        cut1, cut2 = sizes[0], sizes[0] + sizes[1]
        diag = [i for k in keys[:cut1] for i in groups[k]]
        update = [i for k in keys[cut1:cut2] for i in groups[k]]
        sel = [i for k in keys[cut2:] for i in groups[k]]
        reuse = False
        if val:
            sel = [i for i, _ in val]
        elif not sel:
            sel, reuse = list(update), True
            notes.append(
                f"only {len(keys)} training {'groups' if self.group_key else 'examples'}: too few for three "
                "pools, so final selection reuses the update pool"
            )
        return Pools(diag, update, sel, reuse, bool(val), self.group_key, notes)

    def _groups(self, train: list[tuple[str, Any]], notes: list[str]) -> OrderedDict[Any, list[str]]:
        groups: OrderedDict[Any, list[str]] = OrderedDict()
        if self.group_key:
            missing = [i for i, ex in train if get_field(ex, self.group_key) is None]
            if missing:
                raise ValueError(f"group_key {self.group_key!r} is missing from examples {missing[:5]}")
            for i, ex in train:
                groups.setdefault(str(get_field(ex, self.group_key)), []).append(i)
            if len(groups) < 2:
                notes.append(f"only one {self.group_key!r} group: pools split by example, not by group")
                logger.warning("group_key %r has a single value; splitting pools by example", self.group_key)
                groups = OrderedDict((i, [i]) for i, _ in train)
        else:
            for i, _ in train:
                groups[i] = [i]
        return groups


def _sizes(n: int, fractions: tuple[float, float, float]) -> tuple[int, int, int]:
    """Largest-remainder apportionment of n items, with at least one in each pool whose fraction > 0."""
    total = sum(fractions)
    raw = [n * f / total for f in fractions]
    sizes = [int(r) for r in raw]
    for i in sorted(range(3), key=lambda i: raw[i] - sizes[i], reverse=True)[: n - sum(sizes)]:
        sizes[i] += 1
    for i in range(3):
        if fractions[i] > 0 and sizes[i] == 0:
            j = max(range(3), key=lambda k: sizes[k])
            sizes[j] -= 1
            sizes[i] += 1
    return sizes[0], sizes[1], sizes[2]
