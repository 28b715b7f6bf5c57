"""Which sandbox processes are alive: the /proc scan behind the "nothing left behind" checks.

A run of `PythonSandbox` must leave no process behind. The attack tests and the load benchmark both
check that by listing live processes that belong to the sandbox (uid 65534 or a per-run uid, or a
``bwrap``/``unshare`` launcher) and are
*ours*: descendants of this process, or orphans (reparented to pid 1) started after a given moment.
Other programs on a shared machine may run their own sandboxes at the same time; their processes are
neither. Linux only (reads ``/proc``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from dspy_hero.execution.python import is_sandbox_uid

__all__ = ["now_ticks", "proc_table", "sandbox_processes", "wait_for_exit"]


def proc_table() -> dict[int, tuple[int, int, int, bytes, str]]:
    """pid -> (ppid, uid, start ticks, argv[0], state) for every process we can see."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()
            status = Path(f"/proc/{entry}/status").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:  # it ended while we looked
            continue
        uid = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("Uid:"))
        table[int(entry)] = (int(stat[1]), uid, int(stat[19]), cmd, stat[0].decode())
    return table


def now_ticks() -> int:
    """The current time in the clock ticks of /proc's process start times (one tick early, so a
    process started in this very tick counts as started after it)."""
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return int(uptime * os.sysconf("SC_CLK_TCK")) - 1


def sandbox_processes(since: int = 0) -> set[int]:
    """Live sandbox processes that are ours: descendants of this process, or orphans started after
    `since` (clock ticks, see `now_ticks`). Zombies are dead and not counted."""
    table = proc_table()
    ours, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, row in table.items() if row[0] in frontier} - ours
        ours |= frontier
    found = set()
    for pid, (ppid, uid, start, cmd, state) in table.items():
        if state == "Z" or not (is_sandbox_uid(uid) or os.path.basename(cmd) in (b"bwrap", b"unshare")):
            continue
        if pid in ours or (ppid == 1 and start >= since):
            found.add(pid)
    return found


def wait_for_exit(before: set[int], since: int, seconds: float = 3.0) -> set[int]:
    """The sandbox processes that appeared after `before` and are still alive after `seconds` of
    grace (a killed process may take a moment to be reaped); empty when none leaked."""
    deadline = time.monotonic() + seconds
    while True:
        leaked = sandbox_processes(since) - before
        if not leaked or time.monotonic() >= deadline:
            return leaked
        time.sleep(0.05)
