"""Process control of sandbox runs: starting a run's process, feeding it, reading its output and
verdict under a deadline and a cap, and killing everything it started.

`dspy_hero.execution.python` decides what to run (`sandbox_command`) and calls these; nothing here
knows about layers beyond what a `Plan` says.
"""

from __future__ import annotations

import os
import secrets
import selectors
import signal
import stat
import subprocess
import time
from dataclasses import dataclass

from dspy_hero.execution.sandbox_cgroups import CgroupSupport, RunCgroup, join_command
from dspy_hero.execution.sandbox_command import SECCOMP_FD, TEMP_PREFIX, Plan
from dspy_hero.execution.sandbox_verdict import MAX_VERDICT_BYTES

__all__ = ["PIPE_SAFE_BYTES", "Launch", "collect", "discard", "discard_all", "feed", "hand_over", "kill_by_token",
           "kill_group", "start_run"]

PIPE_SAFE_BYTES = 32 * 1024  # a payload this small fits the pipe buffer: writing it cannot block


@dataclass
class Launch:
    """A started sandbox process (blocked before the boot when it waits in a cgroup) and its parts."""

    proc: subprocess.Popen
    cgroup: RunCgroup | None
    plan: Plan
    uid: int
    layer: str


def discard(launch: Launch) -> None:
    kill_group(launch.proc)
    for pipe in (launch.proc.stdin, launch.proc.stdout, launch.proc.stderr):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass
    if launch.cgroup is not None:
        launch.cgroup.close()


def discard_all(ready: list[Launch]) -> None:
    while ready:
        discard(ready.pop())


def start_run(plan: Plan, layer: str, uid: int, *, cgroups: CgroupSupport | None, memory_mb: int,
              max_processes: int, seccomp: bytes | None) -> Launch:
    """Start the process of `plan`: in a fresh cgroup when `cgroups` (blocked at its gate until the
    run sends "go"), with the seccomp filter on a pipe for bwrap."""
    argv = plan.argv
    cgroup = None
    if cgroups is not None and layer != "docker":
        cgroup = cgroups.create(TEMP_PREFIX + secrets.token_hex(8), memory_mb << 20, max_processes + 8)
        argv = join_command(cgroup.procs_files, argv, gate=True)
    filter_fd = -1
    if layer == "bwrap" and seccomp is not None:
        filter_fd = filter_pipe(seccomp)
        argv = [a if a != SECCOMP_FD else str(filter_fd) for a in argv]
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
    return Launch(proc, cgroup, plan, uid, layer)


def filter_pipe(program: bytes) -> int:
    """A pipe's read end holding the seccomp program (bwrap reads it to EOF); a few hundred bytes,
    far below the pipe buffer, so writing never blocks."""
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, program)
    finally:
        os.close(write_fd)
    return read_fd


def hand_over(workdir: str, uid: int | None = None) -> None:
    """The weak rlimit layer's run dir: private to the run. Without root the sandbox user is this
    user, so owner access suffices; any access for others would let another local user swap files
    in it. As root it belongs to the run's own uid (no other run has that uid); the root boot never
    reads from it (its config arrives on stdin) and adds it to sys.path only after dropping root."""
    if os.getuid() == 0 and uid is not None:
        os.chown(workdir, uid, uid)
    os.chmod(workdir, stat.S_IRWXU)


def feed(proc: subprocess.Popen, data: bytes) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(data)
        proc.stdin.close()
    except (BrokenPipeError, OSError, ValueError):
        pass


def kill_group(proc: subprocess.Popen) -> None:
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


def kill_by_token(token: str, spare: int | None = None) -> int:
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


def collect(proc: subprocess.Popen, deadline: float, plan: Plan, cap: int) -> tuple[bytes, bytes, bool, bool]:
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
            kill_by_token(plan.env["HERO_SANDBOX_TOKEN"], spare=proc.pid)
            try:
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
        kill_group(proc)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        proc.wait(timeout=5)
    return b"".join(chunks[out_fd]), b"".join(chunks[verdict_fd]), timed_out, capped
