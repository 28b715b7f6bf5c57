"""Kept for compatibility (metrics/cypher.py imports it): the Cypher environment is `cypher_environment.py`."""

from dspy_hero.execution.cypher_environment import (  # noqa: F401
    CypherEnvironment,
    default_engine,
    ensure_loaded,
    graph_schema_text,
    resolve_graph,
)
