"""Cypher over a Neo4j server (used when HERO_NEO4J_URI is set or an executor is passed explicitly).

Read-only in depth: the lexical guard of `prepare_query`, sessions in READ access mode, and every
transaction rolled back, never committed, so even a write the server let through would not persist.
A server must honour the last two for that: FalkorDB's experimental Bolt listener, used by the tests
as a live Bolt server, honours neither (see `falkordb_bolt.py`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from dspy_hero.execution.base import (
    ENVIRONMENT,
    REJECTED,
    RESOURCE,
    RUNTIME,
    SYNTAX,
    TIMEOUT,
    Execution,
    failed,
)
from dspy_hero.execution.cypher_common import BoundCypherExecutor, normalize_result, prepare_query

__all__ = ["Neo4jExecutor", "Neo4jSettings"]


@dataclass(frozen=True)
class Neo4jSettings:
    """Where a Neo4j server is and how to log in. `from_env` is the one place dspy-hero reads the
    HERO_NEO4J_* variables (the metric, the environment and the executor all ask it)."""

    uri: str
    user: str | None = None
    password: str = ""
    database: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Neo4jSettings | None:
        """From HERO_NEO4J_URI, HERO_NEO4J_USER, HERO_NEO4J_PASSWORD and HERO_NEO4J_DATABASE; None
        when no URI is set (then the embedded FalkorDB engine serves Cypher)."""
        env = os.environ if environ is None else environ
        uri = env.get("HERO_NEO4J_URI")
        if not uri:
            return None
        return cls(uri, env.get("HERO_NEO4J_USER") or None, env.get("HERO_NEO4J_PASSWORD", ""),
                   env.get("HERO_NEO4J_DATABASE") or None)

    @property
    def auth(self) -> tuple[str, str] | None:
        return (self.user, self.password) if self.user else None


def _neo4j_error_type(exc: Exception) -> str:
    code = (getattr(exc, "code", None) or "").lower()
    name = type(exc).__name__
    if "timedout" in code or "timeout" in code or "terminated" in code:
        return TIMEOUT
    if "accessmode" in code or "forbidden" in code or "writeonreadonly" in code:
        return REJECTED
    if "memory" in code:
        return RESOURCE
    if name == "CypherSyntaxError" or ".syntaxerror" in code or "procedurenotfound" in code or "unknownfunction" in code:
        return SYNTAX
    if name in ("ServiceUnavailable", "SessionExpired", "AuthError") or "database.databasenotfound" in code:
        return ENVIRONMENT
    return RUNTIME


class Neo4jExecutor:
    """Cypher over a Neo4j server: READ sessions, a transaction timeout, transactions never committed.

    `database` fixes the database; otherwise, with ``graph_as_database=True``, ``run(cypher, graph)``
    uses the graph name as the database name (one database per graph, Neo4j Enterprise); else the
    server's default database. An unreachable server raises ConnectionError at construction, before
    any budget is spent.
    """

    def __init__(
        self,
        uri: str,
        auth: tuple[str, str] | None = None,
        database: str | None = None,
        timeout_s: float = 120.0,
        max_rows: int = 100_000,
        graph_as_database: bool = False,
        connect_timeout_s: float = 5.0,
    ):
        import neo4j

        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        self.uri, self.database, self.timeout_s = uri, database, float(timeout_s)
        self.max_rows, self.graph_as_database = int(max_rows), bool(graph_as_database)
        try:
            self._driver = neo4j.GraphDatabase.driver(uri, auth=auth, connection_timeout=connect_timeout_s)
        except Exception as exc:
            raise ValueError(f"invalid Neo4j URI {uri!r}: {exc}") from exc
        try:
            self._driver.verify_connectivity()
        except Exception as exc:
            self._driver.close()
            raise ConnectionError(
                f"cannot reach Neo4j at {uri} ({type(exc).__name__}: {exc}); check HERO_NEO4J_URI / credentials, "
                "or unset HERO_NEO4J_URI to use the embedded FalkorDB engine"
            ) from exc

    @classmethod
    def from_env(cls, **kwargs: Any) -> Neo4jExecutor:
        """Configured from HERO_NEO4J_URI, HERO_NEO4J_USER, HERO_NEO4J_PASSWORD (and HERO_NEO4J_DATABASE),
        read by `Neo4jSettings.from_env`."""
        settings = Neo4jSettings.from_env()
        if settings is None:
            raise ValueError("HERO_NEO4J_URI is not set")
        kwargs.setdefault("database", settings.database)
        return cls(settings.uri, auth=settings.auth, **kwargs)

    def close(self) -> None:
        self._driver.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def graph_names(self) -> list[str]:
        return [self.database] if self.database else []

    def run(self, cypher: str, graph: str | None = None, timeout_s: float | None = None) -> Execution:
        import neo4j

        start = time.perf_counter()
        text, refusal = prepare_query(cypher)
        if refusal is not None:
            return refusal
        database = self.database or (graph if self.graph_as_database else None)
        limit_s = self.timeout_s if timeout_s is None else min(float(timeout_s), self.timeout_s)
        try:
            with self._driver.session(database=database, default_access_mode=neo4j.READ_ACCESS) as session:
                tx = session.begin_transaction(timeout=limit_s)
                try:
                    result = tx.run(text)
                    columns = tuple(result.keys())
                    rows = []
                    for record in result:
                        rows.append(record.values())
                        if len(rows) > self.max_rows:
                            break
                finally:
                    tx.rollback()  # never commit, whatever slipped through
        except Exception as exc:  # noqa: BLE001 - every driver/server error becomes an Execution
            return failed(_neo4j_error_type(exc), f"{type(exc).__name__}: {exc}", time.perf_counter() - start, engine="neo4j")
        truncated = len(rows) > self.max_rows
        return Execution(
            ok=True,
            rows=normalize_result(rows[: self.max_rows]),
            columns=columns,
            runtime_s=time.perf_counter() - start,
            truncated=truncated,
            details={"engine": "neo4j", "database": database},
        )

    def bound(self, graph: str | None = None) -> BoundCypherExecutor:
        return BoundCypherExecutor(self, graph)
