"""Class A of issue 12: code execution as root, and reach beyond the run, through the root boot.

Each attack is run on every strong layer this machine offers (bwrap; rlimit with namespaces as
root) and must be stopped: no process, file, signal, socket or read outside its own run. The layers
are required, not optional: when their prerequisites exist here a failing probe fails the test.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from dspy_hero.execution.leaks import now_ticks, sandbox_processes, wait_for_exit
from dspy_hero.execution.python import PythonSandbox, find_bwrap, is_sandbox_uid

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox layers need Linux")


def _strong_layers() -> list[str]:
    layers = ["bwrap"] if find_bwrap() is not None else []
    if os.getuid() == 0 and shutil.which("unshare"):
        layers.append("rlimit")
    return layers


@pytest.fixture(scope="module", params=_strong_layers())
def sandbox(request):
    sb = PythonSandbox(layer=request.param, timeout_s=6.0, memory_mb=1024, max_processes=32)
    assert sb.layer == request.param
    assert sb.isolates_processes, "a strong layer must give each run its own pid namespace"
    return sb


@pytest.fixture()
def no_leftovers():
    since = now_ticks()
    before = sandbox_processes(since)
    yield
    assert wait_for_exit(before, since) == set(), "a sandboxed process outlived its run"


@pytest.fixture()
def open_dir():
    """A world-writable host dir outside any run (an attacker's drop box if the sandbox leaked)."""
    d = tempfile.mkdtemp(prefix="hero-attack-a-")
    os.chmod(d, 0o777)
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


def _concurrently(sandbox: PythonSandbox, victim: str, attacker: str, delay: float = 0.3):
    results = {}

    def run(name, code):
        results[name] = sandbox.run(code)

    t = threading.Thread(target=run, args=("victim", victim))
    t.start()
    time.sleep(delay)
    run("attacker", attacker)
    t.join()
    return results["victim"], results["attacker"]


PLANT = r"""
import os, glob
planted = []
for top in ['/tmp', '/var/tmp', '/dev/shm', '/sandbox', '/tmp/sandbox'] + glob.glob('/tmp/hero-sbx-*') + glob.glob('/proc/[0-9]*/cwd'):
    for name in ('_hero_boot.cfg', 'resource.py', 'ctypes.py'):
        path = os.path.join(top, name)
        try:
            with open(path, 'w') as fh:
                fh.write("import os\nos.system('id > {flag}')\n" if name.endswith('.py') else "{{'token': 'x'}}")
            planted.append(path)
        except OSError:
            pass
print('planted', len(planted))
"""


def test_a1_a2_a_concurrent_run_cannot_reach_another_runs_boot(sandbox, open_dir, no_leftovers):
    """A run plants a boot config and `resource.py` wherever it can while another run is starting
    and running; the victim's boot neither reads nor imports them, and never runs anything as root."""
    flag = open_dir / "root_was_here"
    victim = "import time, os\ntime.sleep(1.0)\nimport resource\nprint('victim', os.getuid(), resource.__file__)\n"
    for _ in range(2):
        v, a = _concurrently(sandbox, victim, PLANT.format(flag=flag), delay=0.05)
        assert a.ok, a
        assert v.ok, v
        uid = int(v.output.split()[1])
        assert is_sandbox_uid(uid) and uid != 0
        assert "/sandbox" not in v.output.split()[2]  # the stdlib's resource module, not a planted one
    after = sandbox.run("import resource, os\nprint(os.getuid(), resource.__file__)")
    assert after.ok and "sandbox" not in after.output.split()[1]
    assert not flag.exists()


def test_a3_setsid_daemon_reexecuting_with_a_clear_environment_dies_with_its_run(sandbox, open_dir, no_leftovers):
    """fork, setsid, fork, execve(python3, env={}) then kill the parent: the daemon must not survive
    to plant files into the next run."""
    flag = open_dir / "daemon_planted"
    code = (
        "import os, signal, sys\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.execve(sys.executable, [sys.executable, '-c', "
        f"\"import time, glob\\ntime.sleep(1.5)\\nopen({str(flag)!r}, 'w').write('x')\\n"
        "for d in glob.glob('/tmp/*') + ['/sandbox', '/tmp/sandbox']:\\n"
        "    try: open(d + '/resource.py', 'w').write('import os')\\n"
        "    except OSError: pass\\n\"], {})\n"
        "    os._exit(0)\n"
        "os.kill(os.getppid(), signal.SIGKILL)\n"
        "print('parent done')\n"
    )
    sandbox.run(code)
    time.sleep(2.0)
    assert not flag.exists()
    nxt = sandbox.run("import os, resource\nprint(sorted(os.listdir('.')), resource.__file__)")
    assert nxt.ok and "resource.py" not in nxt.output.split("]")[0]


def test_a_runs_cannot_signal_each_other(sandbox, no_leftovers):
    """A run kills everything it can see (kill(-1), every pid in /proc); a concurrent run finishes."""
    victim = "import time\ntime.sleep(1.5)\nprint('victim finished')\n"
    attacker = (
        "import os, signal\n"
        "for pid in [int(p) for p in os.listdir('/proc') if p.isdigit()]:\n"
        "    try: os.kill(pid, signal.SIGKILL)\n"
        "    except OSError: pass\n"
        "try: os.kill(-1, signal.SIGKILL)\n"
        "except OSError: pass\n"
    )
    v, _a = _concurrently(sandbox, victim, attacker)
    assert v.ok and "victim finished" in v.output, v


def test_a_host_processes_are_invisible(sandbox, no_leftovers):
    marker = "hero-host-marker-5521"
    host = subprocess.Popen(["/bin/sh", "-c", f"sleep 20; : {marker}"])
    try:
        code = (
            "import os\nseen = []\n"
            "for p in os.listdir('/proc'):\n"
            "    if p.isdigit():\n"
            "        try: seen.append(open(f'/proc/{p}/cmdline', 'rb').read())\n"
            "        except OSError: pass\n"
            f"print(len(seen), any(b{marker!r} in c for c in seen))\n"
        )
        result = sandbox.run(code)
        assert result.ok, result
        count, found = result.output.split()
        assert found == "False" and int(count) < 10  # only the run's own processes
    finally:
        host.kill()
        host.wait()


def test_a_host_files_are_invisible(sandbox, no_leftovers):
    """Project sources, shared benchmark data and a world-readable file under /root stay out."""
    here = Path(__file__).resolve()
    root_file = Path("/root/hero_world_readable_secret.txt") if os.getuid() == 0 else None
    if root_file is not None:
        root_file.write_text("hero-secret")
        root_file.chmod(0o644)
    paths = [str(here), str(here.parents[1] / "README.md"), "/work/shared/benchmarks/README.md",
             str(root_file or here)]
    try:
        code = ("out = []\n"
                f"for p in {paths!r}:\n"
                "    try:\n        open(p).read(1)\n        out.append('READ ' + p)\n"
                "    except OSError:\n        out.append('denied')\n"
                "print(out)\n")
        result = sandbox.run(code)
        assert result.ok, result
        assert "READ" not in result.output, result.output
    finally:
        if root_file is not None:
            root_file.unlink()


def test_a_host_unix_sockets_are_unreachable(sandbox, no_leftovers):
    d = tempfile.mkdtemp(prefix="hero-sock-")
    os.chmod(d, 0o777)
    path = os.path.join(d, "s")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o777)
    server.listen(4)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind("\0hero-abstract-7781")
    abstract.listen(4)
    server.settimeout(0.3)
    abstract.settimeout(0.3)
    try:
        code = ("import socket\nout = []\n"
                f"for addr in ({path!r}, '\\0hero-abstract-7781'):\n"
                "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
                "    try:\n        s.connect(addr)\n        out.append('connected')\n"
                "    except OSError as exc:\n        out.append(type(exc).__name__)\n"
                "print(out)\n")
        result = sandbox.run(code)
        assert result.ok, result
        assert "connected" not in result.output
        for s in (server, abstract):
            with pytest.raises(socket.timeout):
                s.accept()
    finally:
        server.close()
        abstract.close()
        shutil.rmtree(d, ignore_errors=True)


def test_a_scratch_files_never_persist_into_later_runs(sandbox, no_leftovers):
    write = ("import os\n"
             "for d in ('/tmp', '/dev/shm', '/var/tmp', os.environ['MPLCONFIGDIR'], os.environ['HOME']):\n"
             "    os.makedirs(d, exist_ok=True)\n"
             "    open(os.path.join(d, 'hero-persist-marker'), 'w').write('x')\n"
             "print('written')\n")
    first = sandbox.run(write)
    assert first.ok and "written" in first.output, first
    check = ("import os\n"
             "print([d for d in ('/tmp', '/dev/shm', '/var/tmp', os.environ['MPLCONFIGDIR'], os.environ['HOME'])"
             " if os.path.exists(os.path.join(d, 'hero-persist-marker'))])\n")
    second = sandbox.run(check)
    assert second.ok and second.output.strip() == "[]", second
    for d in ("/tmp", "/dev/shm", "/var/tmp"):
        assert not os.path.exists(os.path.join(d, "hero-persist-marker"))


def test_a_no_new_privs_and_no_capabilities(sandbox, no_leftovers):
    code = ("status = dict(line.split(':\\t', 1) for line in open('/proc/self/status').read().splitlines() if ':\\t' in line)\n"
            "print(status['NoNewPrivs'].strip(), status['CapEff'].strip(), status['CapPrm'].strip())\n")
    result = sandbox.run(code)
    assert result.ok, result
    assert result.output.split() == ["1", "0000000000000000", "0000000000000000"]


def test_a_no_new_user_namespaces_and_no_vsock(sandbox, no_leftovers):
    """A user namespace would hand the program every capability inside it (mounts, raw sockets), and
    AF_VSOCK reaches a VM's host past any network namespace: the seccomp filter refuses both, and
    ordinary threads, forks and sockets still work."""
    code = (
        "import ctypes, os, socket, threading\nout = []\n"
        "try:\n    socket.socket(40, socket.SOCK_STREAM)\n    out.append('vsock-open')\n"
        "except OSError as exc:\n    out.append(f'vsock-{exc.errno}')\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "out.append(f'userns-{libc.unshare(0x10000000)}-{ctypes.get_errno()}')\n"
        "socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()\n"
        "t = threading.Thread(target=out.append, args=('thread',))\nt.start()\nt.join()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n    os._exit(0)\n"
        "out.append(f'fork-{os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}')\n"
        "print(' '.join(out))\n"
    )
    result = sandbox.run(code)
    assert result.ok, result
    assert result.output.split() == ["vsock-97", "userns--1-1", "thread", "fork-0"]
