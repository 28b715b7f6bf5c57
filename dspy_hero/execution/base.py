"""The records and protocols every executor and environment shares.

An executor runs one program text and reports what happened. It never judges correctness: judging is
the job of `dspy_hero.metrics`. Keeping the two apart lets the same `Execution` feed a metric (offline,
with a gold program) and HERO-T's refiner (test time, with no gold at all).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

# Error types shared by all executors, so feedback and tests can name them without knowing the engine.
TIMEOUT = "Timeout"
REJECTED = "Rejected"  # the program tried something the executor forbids (a write, a second statement, ...)
SYNTAX = "SyntaxError"
RUNTIME = "RuntimeError"
RESOURCE = "ResourceLimit"  # memory / process / output limits
EMPTY_PROGRAM = "EmptyProgram"
ENVIRONMENT = "EnvironmentError"  # the environment itself failed (missing database, engine down)


@dataclass(frozen=True)
class Execution:
    """What running one program showed.

    `rows` holds query results as a tuple of row tuples (SQL, Cypher); `output` holds captured text
    (Python stdout/stderr or a unittest report). `truncated` says the row cap or output cap was hit,
    so a comparison on a truncated result is not trustworthy.
    """

    ok: bool
    rows: tuple[tuple[Any, ...], ...] | None = None
    columns: tuple[str, ...] | None = None
    output: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    runtime_s: float = 0.0
    truncated: bool = False
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def row_count(self) -> int:
        return len(self.rows) if self.rows is not None else 0

    @property
    def column_count(self) -> int:
        if self.columns is not None:
            return len(self.columns)
        if self.rows:
            return len(self.rows[0])
        return 0

    def describe(self, max_rows: int = 3, max_chars: int = 400) -> str:
        """A short, human-readable account for feedback and refinement evidence."""
        if not self.ok:
            text = f"{self.error_type or 'Error'}: {self.error_message or ''}".strip()
            return text[:max_chars]
        if self.rows is not None:
            head = f"returned {self.row_count} row(s) with {self.column_count} column(s)"
            if self.columns:
                head += f" {list(self.columns)}"
            if self.truncated:
                head += " (truncated at the row cap)"
            if max_rows and self.rows:
                sample = "; ".join(repr(tuple(r))[:120] for r in self.rows[:max_rows])
                head += f"; first rows: {sample}"
            return head[:max_chars]
        out = (self.output or "").strip()
        return (f"ran ok; output: {out}" if out else "ran ok with no output")[:max_chars]


def failed(error_type: str, message: str, runtime_s: float = 0.0, **details: Any) -> Execution:
    """Shorthand for a failed Execution."""
    return Execution(ok=False, error_type=error_type, error_message=message, runtime_s=runtime_s, details=details)


@runtime_checkable
class Executor(Protocol):
    """Runs one program text. Implementations must be safe to call from several threads."""

    def run(self, program: str) -> Execution: ...


@dataclass(frozen=True)
class ProbeResult:
    """One environment probe (schema listing, sample values, a sub-query, docstring examples)."""

    name: str
    argument: str
    text: str
    ok: bool = True


@runtime_checkable
class Environment(Protocol):
    """The test-time world of one instance, as HERO-T sees it.

    It can execute candidate programs and answer probes, but it holds no gold program, expected
    output or correctness label: that is what makes refinement label-free.
    """

    language: str  # "sql" | "cypher" | "python"

    def execute(self, program: str) -> Execution: ...

    def probes(self) -> dict[str, str]:
        """Available probe names with a one-line description of the argument each takes."""
        ...

    def probe(self, name: str, argument: str = "") -> ProbeResult: ...

    def check(self, program: str, execution: Execution) -> tuple[bool, str]:
        """Programmatic gate checks beyond "executed without error" (e.g. visible Python examples)."""
        ...
