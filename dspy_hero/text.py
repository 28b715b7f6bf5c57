"""Small text utilities shared by production code (no dependencies)."""

from __future__ import annotations


def approx_tokens(text: str) -> int:
    """A cheap, deterministic token estimate (about 4 characters per token)."""
    return max(1, (len(text) + 3) // 4) if text else 0
