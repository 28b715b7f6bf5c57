"""Hostile programs through the real Python sandbox: each must be stopped with a clear Execution error
and leave the host untouched (no file written, no secret read, no connection made, no process or temp
dir left behind). Runs every attack on each isolation layer available here."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from dspy_hero.execution.base import RESOURCE, RUNTIME, TIMEOUT
from dspy_hero.execution.leaks import now_ticks, sandbox_processes, wait_for_exit
from dspy_hero.execution.python import SANDBOX_UID, TEMP_PREFIX, PythonSandbox, find_bwrap

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox layers need Linux")

SECRET = "hero-host-secret-7731"
TALLY: dict[str, list[str]] = {"tried": [], "stopped": []}


def _layers() -> list[str]:
    layers = ["bwrap"] if find_bwrap() is not None else []
    if os.getuid() == 0 and shutil.which("unshare"):  # rlimit with namespaces: the strong variant
        layers.append("rlimit")
    return layers


@pytest.fixture(scope="module")
def temp_root():
    """A private parent for the runs' temp dirs, so leftovers are ours to count (traversable by 65534)."""
    root = tempfile.mkdtemp(prefix="hero-attack-tests-")
    os.chmod(root, 0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module", params=_layers())
def sandbox(request, temp_root):
    sb = PythonSandbox(layer=request.param, timeout_s=3.0, memory_mb=1024, max_processes=32,
                       max_output_bytes=200_000, temp_dir=temp_root)
    assert sb.layer == request.param  # its prerequisites exist here: it must work, not skip
    assert sb.isolates_processes
    return sb


@pytest.fixture()
def clean_host(temp_root):
    """Assert that the attack left no sandbox process and no temp dir behind."""
    since = now_ticks()
    procs = sandbox_processes(since)
    yield
    assert wait_for_exit(procs, since) == set(), "a sandboxed process outlived its run"
    left = [n for n in os.listdir(temp_root) if n.startswith(TEMP_PREFIX)]
    assert left == [], "a sandbox temp dir was left behind"


def _attack(name: str, sandbox: PythonSandbox, code: str, **kw):
    TALLY["tried"].append(f"{sandbox.layer}:{name}")
    start = time.perf_counter()
    result = sandbox.run(code, **kw)
    return result, time.perf_counter() - start


def _stopped(name: str, sandbox: PythonSandbox) -> None:
    TALLY["stopped"].append(f"{sandbox.layer}:{name}")


def test_infinite_loop(sandbox, clean_host):
    result, took = _attack("infinite loop", sandbox, "while True:\n    pass\n")
    assert not result.ok and result.error_type == TIMEOUT and "killed" in result.error_message
    assert took < 10
    _stopped("infinite loop", sandbox)


def test_ten_gigabyte_allocation(sandbox, clean_host):
    result, _ = _attack("10 GB allocation", sandbox, "x = bytearray(10 * 1024 ** 3)\nprint(len(x))\n")
    assert not result.ok and result.error_type == RESOURCE and "memory" in result.error_message.lower()
    _stopped("10 GB allocation", sandbox)


def test_fork_bomb(sandbox, clean_host):
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result, took = _attack("fork bomb", sandbox, code)
    assert not result.ok and result.error_type in (TIMEOUT, RESOURCE)
    assert took < 15
    # the host can still start processes and the sandbox still works afterwards
    after = sandbox.run("print('alive')")
    assert after.ok and after.output.strip() == "alive", after
    _stopped("fork bomb", sandbox)


def test_fork_bomb_without_retry_hits_the_process_limit(sandbox, clean_host):
    result, _ = _attack("fork bomb (no retry)", sandbox, "import os\nwhile True:\n    os.fork()\n")
    assert not result.ok and result.error_type in (RESOURCE, TIMEOUT)
    _stopped("fork bomb (no retry)", sandbox)


def test_socket_to_localhost(sandbox, clean_host):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.3)
    port = server.getsockname()[1]
    try:
        code = (f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                "s.sendall(b'stolen')\nprint('connected')\n")
        result, _ = _attack("socket to 127.0.0.1", sandbox, code)
        assert not result.ok and result.error_type == RUNTIME
        assert "connected" not in (result.output or "")
        assert any(e in result.error_message for e in ("ConnectionRefused", "Network is unreachable", "OSError"))
        with pytest.raises(socket.timeout):
            server.accept()  # nothing ever connected
    finally:
        server.close()
    _stopped("socket to 127.0.0.1", sandbox)


def test_reading_host_secrets(sandbox, clean_host, monkeypatch, tmp_path):
    monkeypatch.setenv("HERO_SECRET", SECRET)
    secret_file = tmp_path / "secret.txt"  # outside the sandbox dir (pytest's tmp, mode 0700 parents)
    secret_file.write_text(SECRET)
    root_file = Path("/root/.hero_attack_secret") if os.getuid() == 0 else None
    if root_file is not None:
        root_file.write_text(SECRET)
        root_file.chmod(0o600)
    try:
        code = (
            "import os\n"
            "print(os.environ.get('HERO_SECRET'))\n"
            f"for path in {[str(secret_file)] + ([str(root_file)] if root_file else [])!r}:\n"
            "    try:\n        print(open(path).read())\n    except OSError as exc:\n        print(type(exc).__name__)\n"
            f"print(open({str(secret_file)!r}).read())\n"
        )
        result, _ = _attack("read host secrets", sandbox, code)
        assert SECRET not in (result.output or "")
        assert not result.ok and result.error_type == RUNTIME
        assert "Error" in result.error_message  # FileNotFoundError (bwrap) or PermissionError (rlimit)
    finally:
        if root_file is not None:
            root_file.unlink()
    _stopped("read host secrets", sandbox)


def test_write_outside_the_temp_dir(sandbox, clean_host, tmp_path):
    target_dir = tmp_path / "open"
    target_dir.mkdir()
    target_dir.chmod(0o777)  # even a world-writable host dir must stay untouched
    targets = [target_dir / "pwned.txt", Path("/root/.hero_pwned") if os.getuid() == 0 else tmp_path / "pwned2"]
    code = "".join(f"open({str(t)!r}, 'w').write('x')\n" for t in targets)
    result, _ = _attack("write outside the temp dir", sandbox, code)
    assert not result.ok and result.error_type == RUNTIME
    assert not any(t.exists() for t in targets)
    _stopped("write outside the temp dir", sandbox)


def test_killing_the_parent(sandbox, clean_host):
    """kill(parent) and kill(-1) from inside a run reach only the run's own processes: it runs only on
    layers that give each run its own pid namespace, and a bystander process with a sandbox uid,
    outside any run, must survive it."""
    assert sandbox.isolates_processes, "kill(-1) is only safe to try where the run has its own pid namespace"
    bystander = subprocess.Popen(["/bin/sleep", "30"], user=SANDBOX_UID if os.getuid() == 0 else None)
    try:
        code = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(-1, signal.SIGKILL)\nprint('survived')\n"
        result, _ = _attack("kill the parent", sandbox, code)
        assert os.getpid() > 0  # we are still here
        assert not result.ok and result.error_type in (RUNTIME, RESOURCE)
        assert bystander.poll() is None, "a process outside the run was killed"
        assert sandbox.run("print('next run works')").ok
    finally:
        bystander.kill()
        bystander.wait()
    _stopped("kill the parent", sandbox)


def test_setsid_daemon(sandbox, clean_host, tmp_path):
    flag_dir = tmp_path / "flag"
    flag_dir.mkdir()
    flag_dir.chmod(0o777)
    os.chmod(tmp_path, 0o755)
    flag = flag_dir / "daemon_was_here"
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(1.0)\n"
        f"        open({str(flag)!r}, 'w').write('x')\n"
        "    os._exit(0)\n"
        "print('parent done')\n"
        "raise SystemExit(7)\n"
    )
    result, _ = _attack("setsid daemon", sandbox, code)
    assert not result.ok and "exit(7)" in result.error_message
    time.sleep(1.5)
    assert not flag.exists()
    _stopped("setsid daemon", sandbox)


def test_huge_output(sandbox, clean_host):
    result, took = _attack("huge output", sandbox, "while True:\n    print('x' * 10000)\n")
    assert not result.ok and result.error_type == RESOURCE and result.truncated
    assert len(result.output.encode()) <= sandbox.max_output_bytes
    assert took < 10
    _stopped("huge output", sandbox)


def test_zz_every_attack_tried_was_stopped():
    """Report the tally (pytest -s shows it); runs last in this module."""
    tried, stopped = TALLY["tried"], TALLY["stopped"]
    print(f"\nPython sandbox attacks: tried {len(tried)}, stopped {len(stopped)}")
    assert tried, "no attack ran"
    assert sorted(tried) == sorted(stopped)
