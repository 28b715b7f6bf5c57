"""Run a program in an environment and report what happened (`Execution`); never judge it.

Executors: `SQLiteExecutor`, `FalkorDBExecutor` (embedded engine), `Neo4jExecutor` (Bolt), `PythonSandbox`.
Environments (probes for HERO-T): `SQLiteEnvironment`, `CypherEnvironment`, `PythonEnvironment`,
`environment_for`. Names load lazily: the Cypher and sandbox modules start processes only when used.
"""

from __future__ import annotations

from dspy_hero.lazy import lazy_exports

_EXPORTS = {
    "Execution": "dspy_hero.execution.base",
    "Executor": "dspy_hero.execution.base",
    "Environment": "dspy_hero.execution.base",
    "ProbeResult": "dspy_hero.execution.base",
    "failed": "dspy_hero.execution.base",
    "TIMEOUT": "dspy_hero.execution.base",
    "REJECTED": "dspy_hero.execution.base",
    "SYNTAX": "dspy_hero.execution.base",
    "RUNTIME": "dspy_hero.execution.base",
    "RESOURCE": "dspy_hero.execution.base",
    "EMPTY_PROGRAM": "dspy_hero.execution.base",
    "ENVIRONMENT": "dspy_hero.execution.base",
    "SQLiteExecutor": "dspy_hero.execution.sqlite",
    "SQLiteSession": "dspy_hero.execution.sqlite",
    "SQLiteEnvironment": "dspy_hero.execution.sqlite_probes",
    "FalkorDBExecutor": "dspy_hero.execution.cypher",
    "Neo4jExecutor": "dspy_hero.execution.neo4j_executor",
    "GraphSource": "dspy_hero.execution.cypher_graphs",
    "CypherEnvironment": "dspy_hero.execution.cypher_probes",
    "graph_schema_text": "dspy_hero.execution.cypher_probes",
    "PythonSandbox": "dspy_hero.execution.python",
    "PythonEnvironment": "dspy_hero.execution.python_probes",
    "VisibleExample": "dspy_hero.execution.python_probes",
    "environment_for": "dspy_hero.execution.environments",
    "EnvironmentCache": "dspy_hero.execution.environments",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
