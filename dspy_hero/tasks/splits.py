"""Deterministic, disjoint optimization/evaluation splits shared by all benchmark adapters.

The paper fixes splits and pool membership across methods and seeds (Appendix A). Only part of each
benchmark is present here, so every split is computed from whatever rows were loaded, with a seeded
hash order that does not depend on Python's hash randomization, file order or thread timing, and each
split returns a note saying exactly what it did.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import dspy


@dataclass(frozen=True)
class Split:
    """An optimization pool, an evaluation pool and a one-line account of how they were made."""

    train: list[dspy.Example]
    test: list[dspy.Example]
    note: str
    extras: dict[str, Any] = field(default_factory=dict)


def stable_key(text: str, seed: int) -> str:
    """A seed-dependent, process-independent sort key (Python's hash() is salted per process)."""
    return hashlib.sha256(f"{seed}\x00{text}".encode()).hexdigest()


def seeded_order(items: Sequence[Any], seed: int, key: Callable[[Any], str] = str) -> list[Any]:
    """`items` in a pseudo-random order fixed by `seed` and each item's `key`."""
    return sorted(items, key=lambda item: stable_key(key(item), seed))


def split_by_group(
    examples: Sequence[dspy.Example], group: str, test_fraction: float, seed: int = 0
) -> tuple[list[dspy.Example], list[dspy.Example]]:
    """Partition whole groups (databases, graphs) so no group is in both pools.

    Groups are visited in seeded order and go to the evaluation pool until it holds about
    `test_fraction` of the examples; at least one group lands on each side when there are two or more.
    Within a pool, examples keep their file order.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    groups: dict[str, int] = {}
    for ex in examples:
        groups[str(ex[group])] = groups.get(str(ex[group]), 0) + 1
    if len(groups) < 2:
        raise ValueError(f"cannot split by {group!r}: only {len(groups)} group(s) present")
    target = test_fraction * len(examples)
    test_groups: set[str] = set()
    taken = 0
    for name in seeded_order(list(groups), seed):
        if taken >= target or len(test_groups) == len(groups) - 1:
            break
        # Take the group unless doing so overshoots the target by more than skipping undershoots it.
        if test_groups and taken + groups[name] - target > target - taken:
            continue
        test_groups.add(name)
        taken += groups[name]
    train = [ex for ex in examples if str(ex[group]) not in test_groups]
    test = [ex for ex in examples if str(ex[group]) in test_groups]
    return train, test


def split_by_fraction(
    examples: Sequence[dspy.Example], train_fraction: float, seed: int = 0, id_field: str = "example_id"
) -> tuple[list[dspy.Example], list[dspy.Example]]:
    """Item-level split: a seeded order of example ids, the first `train_fraction` to optimization."""
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    ordered = seeded_order(list(examples), seed, key=lambda ex: str(ex[id_field]))
    n_train = round(train_fraction * len(ordered))
    n_train = min(max(n_train, 1), len(ordered) - 1) if len(ordered) >= 2 else n_train
    train_ids = {str(ex[id_field]) for ex in ordered[:n_train]}
    train = [ex for ex in examples if str(ex[id_field]) in train_ids]
    test = [ex for ex in examples if str(ex[id_field]) not in train_ids]
    return train, test


def cap(examples: Sequence[dspy.Example], limit: int | None, seed: int = 0, group: str | None = None) -> list[dspy.Example]:
    """At most `limit` examples, chosen in seeded order (round-robin over groups when grouped), kept in file order.

    Round-robin keeps small caps spread over databases instead of draining the first one.
    """
    if limit is None or limit >= len(examples):
        return list(examples)
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    ordered = seeded_order(list(examples), seed, key=lambda ex: str(ex["example_id"]))
    if group is not None:
        buckets: dict[str, list[dspy.Example]] = {}
        for ex in ordered:
            buckets.setdefault(str(ex[group]), []).append(ex)
        interleaved: list[dspy.Example] = []
        queues = [buckets[g] for g in seeded_order(list(buckets), seed)]
        while any(queues):
            for q in queues:
                if q:
                    interleaved.append(q.pop(0))
        ordered = interleaved
    keep = {id(ex) for ex in ordered[:limit]}
    return [ex for ex in examples if id(ex) in keep]


def describe_groups(examples: Sequence[dspy.Example], group: str) -> str:
    names = sorted({str(ex[group]) for ex in examples})
    return f"{len(examples)} examples from {len(names)} {group}(s): {', '.join(names)}"
