"""Programmatic, LM-free diagnosis of a failed program run: what the program did, what the environment
says about it, and what shape its result has — as typed, countable facts.

Why: a small reflection model shown a failing case writes "The correct query should be SELECT ..."
instead of a rule. When the evidence already states the pattern ("6 of 7 failing cases: a column is
taken from a table that does not have it"), the reflector only has to phrase a rule for it. Shared by
HERO-O (evidence for reflection) and HERO-T (the diagnose action).

Public API::

    diagnose(language, inputs, program, execution=None, *, environment=None, reference=None,
             feedback=None) -> Diagnosis
    Diagnoser(...)            # the same, reusing environments across calls (close() when done)
    count_categories(diagnoses) -> list[CategoryCount]      # most frequent first
    Category, Fact, Diagnosis, CategoryCount

Label-free by default: facts come from the program text, the environment (schema, graph, the
prompt's visible examples) and the result. `feedback` (the metric's own, already label-safe wording,
e.g. "different number of rows") may be passed to name which result property is wrong. `reference`
is a TRAINING case's reference program; it adds REF_* facts (its structural diff) and must never be
passed at test time or by HERO-T.

Floor 3: imports execution/, metrics/ and the bottom utilities only.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Self

from dspy_hero.diagnosis.facts import Category, CategoryCount, Diagnosis, Fact, count_categories
from dspy_hero.execution.base import TIMEOUT, Environment, Execution, failed
from dspy_hero.fields import environment_fields, language_of, program_text

__all__ = [
    "Category",
    "CategoryCount",
    "Diagnoser",
    "Diagnosis",
    "Fact",
    "count_categories",
    "diagnose",
    "environment_fields",
    "language_of",
    "program_text",
]

LANGUAGES = ("sql", "cypher", "python")
# Which Diagnoser options each environment takes (one Diagnoser serves cases of several kinds).
_OPTIONS = {"sql": ("timeout_s", "max_rows"), "cypher": ("engine", "timeout_s", "max_rows"),
            "python": ("timeout_s", "visible_tests")}
_TIMED_OUT = re.compile(rf"\b{TIMEOUT}\b")


def diagnose(
    language: str | None,
    inputs: Any,
    program: str,
    execution: Execution | None = None,
    *,
    environment: Environment | None = None,
    reference: str | None = None,
    feedback: str | None = None,
) -> Diagnosis:
    """The facts about one program run.

    `language`: "sql" | "cypher" | "python" (None: read from the environment references in `inputs`).
    `inputs`: the case's fields (a dict or `dspy.Example`); only environment references and, for Python,
    the prompt are read, never labels. `program`: the program text (an LM answer is unwrapped).
    `execution`: what running it showed, when the caller has it; else it is run in `environment`.
    `environment`: the case's environment; built from `inputs` (and closed afterwards) when None.
    Never raises for a bad program; an environment that cannot be opened is reported in
    `Diagnosis.errors` and the program-only facts are still returned.
    """
    with Diagnoser() as diagnoser:
        return diagnoser.diagnose(language, inputs, program, execution, environment=environment,
                                  reference=reference, feedback=feedback)


class Diagnoser:
    """`diagnose` with environments kept between calls (one per database or graph), for a batch of
    cases: a Cypher environment loads a graph and a Python one probes the sandbox, which should
    happen once per run, not once per case. Thread-safe; `close()` stops what it started.

    `environment_factory` (inputs -> Environment) replaces the default, which builds environments
    with `dspy_hero.execution.environments.environment_for` and `environment_options` (e.g.
    ``engine=`` to share a Cypher executor, ``sandbox=`` for Python). `timeout_s` bounds each re-run
    of a program (the metric already waited its own timeout; a diagnosis of 32 cases must not wait
    32 of them), and a case whose feedback reports a Timeout is not re-run at all.
    """

    def __init__(self, environment_factory: Any = None, *, timeout_s: float = 10.0, **environment_options: Any) -> None:
        self._factory = environment_factory
        self.timeout_s = float(timeout_s)
        self._options = {"timeout_s": self.timeout_s, **environment_options}
        self._envs: dict[tuple, Environment] = {}
        self._sandbox: Any = None
        self._lock = threading.Lock()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def environment(self, inputs: Any) -> Environment:
        """The environment of a case: one per database or graph, a new one per Python task (they hold
        the task's own visible examples) sharing one sandbox."""
        if self._factory is not None:
            return self._factory(inputs)
        from dspy_hero.execution.environments import environment_for, environment_key, environment_kind

        key = environment_key(inputs)
        with self._lock:
            if key is not None and key in self._envs:
                return self._envs[key]
            kind = environment_kind(inputs)
            options = {k: v for k, v in self._options.items() if k in _OPTIONS.get(kind or "", ())}
            if kind == "python":
                if self._sandbox is None:
                    from dspy_hero.execution.python import PythonSandbox

                    self._sandbox = self._options.get("sandbox") or PythonSandbox(timeout_s=self.timeout_s)
                options["sandbox"] = self._sandbox
            env = environment_for(inputs, **options)
            if key is not None:
                self._envs[key] = env
            return env

    def close(self) -> None:
        """Close the environments this diagnoser opened (a Cypher one stops the engine it started)."""
        with self._lock:
            envs, self._envs = list(self._envs.values()), {}
        for env in envs:
            close = getattr(env, "close", None)
            if callable(close):
                close()

    def diagnose(
        self,
        language: str | None,
        inputs: Any,
        program: str,
        execution: Execution | None = None,
        *,
        environment: Environment | None = None,
        reference: str | None = None,
        feedback: str | None = None,
    ) -> Diagnosis:
        """See `diagnose`."""
        language = language or language_of(inputs)
        if language not in LANGUAGES:
            raise ValueError(f"diagnose: unknown language {language!r}; expected one of {LANGUAGES} "
                             "(or inputs with db_path / graph / prompt)")
        errors: list[str] = []
        refs = environment_fields(inputs)
        if environment is None and not refs:
            errors.append("no environment references on the case (db_path / graph / prompt): facts from the "
                          "program text and feedback only")
        elif environment is None:
            try:
                environment = self.environment(refs)
            except Exception as exc:  # noqa: BLE001 - a missing database or engine: reported, program-only facts kept
                errors.append(f"no environment ({type(exc).__name__}: {str(exc)[:200]})")
        if execution is None and feedback and _TIMED_OUT.search(feedback):
            execution = failed(TIMEOUT, "the program ran past the time limit when the metric ran it (not re-run)")
        if language == "sql":
            from dspy_hero.diagnosis.sql import diagnose_sql as run
        elif language == "cypher":
            from dspy_hero.diagnosis.cypher import diagnose_cypher as run
        else:
            from dspy_hero.diagnosis.python import diagnose_python as run
        diag = run(program, execution, environment, reference=reference, feedback=feedback)
        if errors:
            diag = Diagnosis(diag.language, diag.facts, diag.structure, tuple(errors) + diag.errors)
        return diag
