"""Class D of issue 12: resources bounded per run, not per process.

Several children that each stay under the per-process limit, many files in the work dir, and a
large file in /dev/shm must all hit one budget for the whole run. As root the budget is a per-run
cgroup (memory + pids); the work dir, /tmp and /dev/shm are size-limited tmpfs mounts on every
strong layer.
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from dspy_hero.execution.base import RESOURCE
from dspy_hero.execution.leaks import now_ticks, sandbox_processes, wait_for_exit
from dspy_hero.execution.python import PythonSandbox, find_bwrap

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox layers need Linux")


def _strong_layers() -> list[str]:
    layers = ["bwrap"] if find_bwrap() is not None else []
    if os.getuid() == 0 and shutil.which("unshare"):
        layers.append("rlimit")
    return layers


@pytest.fixture(scope="module", params=_strong_layers())
def sandbox(request):
    sb = PythonSandbox(layer=request.param, timeout_s=20.0, memory_mb=512, max_processes=16, tmpfs_mb=64,
                       max_file_mb=200)
    assert sb.layer == request.param
    if os.getuid() == 0:
        assert sb.per_run_cgroup, f"as root the run's memory must be bounded per run: {sb.probe_log}"
    return sb


@pytest.fixture()
def no_leftovers():
    since = now_ticks()
    before = sandbox_processes(since)
    yield
    assert wait_for_exit(before, since) == set(), "a sandboxed process outlived its run"


def test_d_children_share_one_memory_budget(sandbox, no_leftovers):
    """4 children x 200 MB stay under RLIMIT_AS (512 MB each) but not under a 512 MB run budget."""
    if not sandbox.per_run_cgroup:
        pytest.skip("no per-run cgroup without root: RLIMIT_AS bounds each process only")
    code = (
        "import os, time\n"
        "kids = []\n"
        "for _ in range(4):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        block = bytearray(200 * 1024 * 1024)\n"
        "        for i in range(0, len(block), 4096):\n"
        "            block[i] = 1\n"
        "        time.sleep(3)\n"
        "        os._exit(0)\n"
        "    kids.append(pid)\n"
        "codes = [os.waitstatus_to_exitcode(os.waitpid(k, 0)[1]) for k in kids]\n"
        "print('children', codes)\n"
        "assert all(c == 0 for c in codes), 'a child was killed'\n"
    )
    result = sandbox.run(code)
    assert not result.ok, result
    assert result.error_type in (RESOURCE, "RuntimeError"), result
    assert "children [0, 0, 0, 0]" not in (result.output or "")


def test_d_work_dir_is_size_limited(sandbox, no_leftovers):
    """6 x 200 MB files into the work dir: the run's tmpfs (64 MB here) stops it."""
    code = (
        "import os\nwritten = 0\nchunk = b'x' * (1 << 20)\n"
        "try:\n"
        "    for n in range(6):\n"
        "        with open(f'big{n}.bin', 'wb') as fh:\n"
        "            for _ in range(200):\n"
        "                fh.write(chunk)\n"
        "                written += len(chunk)\n"
        "except OSError as exc:\n"
        "    print('stopped', type(exc).__name__, exc.errno)\n"
        "print('written_mb', written >> 20)\n"
    )
    result = sandbox.run(code)
    assert "stopped OSError 28" in result.output, result  # ENOSPC
    written = int(result.output.split("written_mb")[1].split()[0])
    assert written <= 64


def test_d_dev_shm_is_size_limited(sandbox, no_leftovers):
    code = (
        "written = 0\nchunk = b'x' * (1 << 20)\n"
        "try:\n"
        "    with open('/dev/shm/hero-fill', 'wb') as fh:\n"
        "        for _ in range(1024):\n"
        "            fh.write(chunk)\n"
        "            written += len(chunk)\n"
        "except OSError as exc:\n"
        "    print('stopped', exc.errno)\n"
        "print('written_mb', written >> 20)\n"
    )
    result = sandbox.run(code)
    assert "stopped 28" in result.output, result
    assert int(result.output.split("written_mb")[1].split()[0]) <= 64
    assert not os.path.exists("/dev/shm/hero-fill")


def test_d_process_count_is_bounded_per_run(sandbox, no_leftovers):
    code = (
        "import os, time\nkids = 0\n"
        "try:\n"
        "    for _ in range(200):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(5)\n"
        "            os._exit(0)\n"
        "        kids += 1\n"
        "except OSError as exc:\n"
        "    print('stopped', type(exc).__name__)\n"
        "print('kids', kids)\n"
    )
    result = sandbox.run(code, timeout_s=10)
    assert "stopped" in result.output, result
    assert int(result.output.split("kids")[1].split()[0]) < 16
