"""Saved KV states of shared prompt prefixes, so a prefix seen before is restored, not computed again.

Why: the deterministic engine (`dspy_hero.lm.local.PinnedPrefixEngine`) holds one pinned prefix in
its one slot. HERO-O's paired test runs the current prompt on a chunk of examples, then the
candidate on the same chunk; both differ in their system message, and a chunk spans several
databases, so nearly every rollout needed its (schema-long) prefix computed from scratch: ~7.7 s of
a conventions rollout on 2 cores. llama.cpp can save a slot's KV to a file and restore it in
milliseconds (0.5B model, 603 tokens: 7.4 MB, saved in 4 ms, restored in 2 ms). A restored state is a
byte copy of the one computed the canonical way, so determinism is kept: the engine saves a prefix
right after computing it from scratch and restores only what it saved. Measured with the 1.5B model
(`benchmarks/prefix_store.py`, 48 rollouts of HERO-O's alternating pattern on the conventions demo):
494 s without saved states, 289 s with them, the same 48 programs; `benchmarks/determinism.py` gives
12/12 identical Spider queries across two orders with and without them, and the same queries in both.

The store is a least-recently-used set of those files under a byte cap; the files live in the
server's own folder (`LocalServer.slot_dir`), removed with the server.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections import OrderedDict
from dataclasses import dataclass

logger = logging.getLogger(__name__)


def prefix_name(tokens: list[int]) -> str:
    """The file name of a prefix's saved state: a digest of its token ids."""
    digest = hashlib.sha256(",".join(map(str, tokens)).encode("ascii")).hexdigest()[:32]
    return f"prefix-{digest}.bin"


@dataclass
class StoredPrefix:
    name: str
    n_tokens: int
    n_bytes: int


class PrefixStore:
    """Which prefixes have a saved state in `folder`, most recently used last, within `max_bytes`.

    Not thread-safe on its own: the engine calls it under its request lock."""

    def __init__(self, folder: str, max_bytes: int):
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive (a store that can hold nothing is no store)")
        self.folder, self.max_bytes = folder, int(max_bytes)
        self._entries: OrderedDict[str, StoredPrefix] = OrderedDict()

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def total_bytes(self) -> int:
        return sum(e.n_bytes for e in self._entries.values())

    def touch(self, name: str) -> StoredPrefix:
        self._entries.move_to_end(name)
        return self._entries[name]

    def add(self, name: str, n_tokens: int, n_bytes: int) -> list[str]:
        """Record a saved file; delete the least recently used ones beyond the cap (never the new one).
        Returns the names evicted."""
        self._entries[name] = StoredPrefix(name, int(n_tokens), int(n_bytes))
        self._entries.move_to_end(name)
        evicted = []
        while self.total_bytes > self.max_bytes and len(self._entries) > 1:
            old, _ = self._entries.popitem(last=False)
            self._remove_file(old)
            evicted.append(old)
        return evicted

    def discard(self, name: str) -> None:
        """Forget a file that could not be restored (and delete it)."""
        if self._entries.pop(name, None) is not None:
            self._remove_file(name)

    def _remove_file(self, name: str) -> None:
        try:
            os.remove(os.path.join(self.folder, name))
        except FileNotFoundError:
            pass
        except OSError as exc:  # a file left behind costs disk, not correctness
            logger.warning("could not delete the saved prefix %s: %s", name, exc)
