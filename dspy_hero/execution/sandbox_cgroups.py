"""Per-run control groups: one memory and process budget for a sandboxed run's whole process tree.

RLIMIT_AS and RLIMIT_NPROC bound one process (and one uid); four children of 400 MB each still fit
under a 512 MB RLIMIT_AS, and tmpfs pages (``/dev/shm``, the work dir) count against no rlimit at
all. A control group per run charges all of it, children and tmpfs pages included, to one budget.

Used as root when the kernel offers it: cgroup v2 (one directory with ``memory.max``, ``pids.max``)
or cgroup v1 (the ``memory`` and ``pids`` hierarchies). The run's process joins before it runs any
Python (a ``/bin/sh`` wrapper writes its own pid, then execs the sandbox), so every child is inside.
Without root, or where neither is writable, the best bound left is RLIMIT_AS per process times
RLIMIT_NPROC processes plus the size-limited tmpfs mounts; `CgroupSupport.detect` then returns None
and the sandbox says so in its probe log.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CgroupSupport", "RunCgroup", "join_command"]

_ROOT = Path("/sys/fs/cgroup")

# /bin/sh joins every cgroup named before "--" (writing its own pid, which exec keeps), then execs;
# gated, it first waits for one line on stdin (`read` takes exactly that line from a pipe)
_JOIN = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
_JOIN_GATED = ('while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; '
               'read -r go || exit 0; exec "$@"')
JOIN_FAILED = 125


def join_command(procs_files: list[str], argv: list[str], gate: bool = False) -> list[str]:
    """`argv` wrapped so that its process is in the given cgroups before it starts (and, with
    `gate`, starts only once a line arrives on its stdin)."""
    return ["/bin/sh", "-c", _JOIN_GATED if gate else _JOIN, "hero-cgroup-join", *procs_files, "--", *argv]


def _own_path(controller: str | None) -> str | None:
    """This process's cgroup path for a v1 controller (or v2's when `controller` is None)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if controller is None and parts[0] == "0" and parts[1] == "":
            return parts[2]
        if controller is not None and controller in parts[1].split(","):
            return parts[2]
    return None


@dataclass(frozen=True)
class RunCgroup:
    """The cgroup directories of one run (one for v2, memory + pids for v1)."""

    dirs: tuple[str, ...]
    version: int

    @property
    def procs_files(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of this run for passing the memory budget."""
        for d in self.dirs:
            for name in ("memory.events", "memory.oom_control"):
                try:
                    text = Path(d, name).read_text()
                except OSError:
                    continue
                for line in text.splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and value.strip().isdigit() and int(value) > 0:
                        return True
            try:
                if int(Path(d, "memory.failcnt").read_text().strip() or 0) > 0:
                    return True
            except (OSError, ValueError):
                pass
        return False

    def close(self) -> None:
        """Kill whatever is left in the run's cgroups and remove them (retrying while the kernel
        finishes tearing processes down)."""
        deadline = time.monotonic() + 3.0
        for d in self.dirs:
            while True:
                try:
                    pids = [int(p) for p in Path(d, "cgroup.procs").read_text().split()]
                except (OSError, ValueError):
                    pids = []
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.02)


@dataclass(frozen=True)
class CgroupSupport:
    """Where this process may make per-run cgroups (probed once per sandbox)."""

    version: int
    parents: tuple[str, ...]  # v2: one parent; v1: memory parent, pids parent

    @staticmethod
    def detect() -> CgroupSupport | None:
        if os.getuid() != 0 or not _ROOT.is_dir():
            return None
        support: CgroupSupport | None = None
        own = _own_path(None)
        if (_ROOT / "cgroup.controllers").exists() and own is not None:
            parent = str(_ROOT) + own.rstrip("/")
            support = CgroupSupport(2, (parent,))
        else:
            mem, pids = _own_path("memory"), _own_path("pids")
            if mem is not None and pids is not None and (_ROOT / "memory").is_dir() and (_ROOT / "pids").is_dir():
                support = CgroupSupport(1, (str(_ROOT / "memory") + mem.rstrip("/"),
                                            str(_ROOT / "pids") + pids.rstrip("/")))
        if support is None:
            return None
        try:  # a trial group must accept both limits
            trial = support.create("hero-sbx-probe-" + os.urandom(4).hex(), 64 << 20, 8)
        except OSError:
            return None
        trial.close()
        return support

    def create(self, name: str, memory_bytes: int, max_pids: int) -> RunCgroup:
        """A fresh cgroup (or pair, v1) with the run's memory and process budget; OSError if the
        kernel refuses (the caller then fails the run rather than run it unbounded)."""
        made: list[str] = []
        try:
            if self.version == 2:
                d = os.path.join(self.parents[0], name)
                os.mkdir(d)
                made.append(d)
                controllers = Path(d, "cgroup.controllers").read_text().split()
                if "memory" not in controllers or "pids" not in controllers:
                    raise OSError(f"cgroup v2 at {self.parents[0]} does not delegate memory and pids")
                Path(d, "memory.max").write_text(str(memory_bytes))
                if Path(d, "memory.swap.max").exists():
                    Path(d, "memory.swap.max").write_text("0")
                Path(d, "pids.max").write_text(str(max_pids))
            else:
                mem, pids = (os.path.join(p, name) for p in self.parents)
                os.mkdir(mem)
                made.append(mem)
                os.mkdir(pids)
                made.append(pids)
                Path(mem, "memory.limit_in_bytes").write_text(str(memory_bytes))
                if Path(mem, "memory.memsw.limit_in_bytes").exists():
                    Path(mem, "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
                Path(pids, "pids.max").write_text(str(max_pids))
        except OSError:
            RunCgroup(tuple(made), self.version).close()
            raise
        return RunCgroup(tuple(made), self.version)
