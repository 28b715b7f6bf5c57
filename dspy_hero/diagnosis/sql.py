"""Diagnosis of sql programs (implementation follows in the next commit)."""

from __future__ import annotations

from typing import Any

from dspy_hero.diagnosis.facts import Diagnosis
from dspy_hero.execution.base import Execution


def diagnose_sql(program: str, execution: Execution | None, environment: Any, *, reference: str | None = None,
                   feedback: str | None = None) -> Diagnosis:
    """Facts about one sql run; see dspy_hero.diagnosis.diagnose."""
    raise NotImplementedError("diagnose_sql: being implemented")
