"""The first code that runs inside a Python sandbox, before any untrusted code.

`PythonSandbox` passes this file's *source text* to ``python -I -S -c``; it is never imported by the
host. It exists so that one interpreter start does everything: read the run's configuration, add
the interpreter's site-packages without running ``.pth`` hooks (``-S`` saves ~20 ms per run), apply
resource limits, drop root to uid 65534, then run the program (``run``) or the program plus its unit
tests (``unittest``). Using a separate process for the drop would double the start-up cost.

It reports how the program ended as one literal line prefixed with a per-run nonce on the original
stdout, so the host can tell the program's own output from the verdict. Like the BigCodeBench
harness, tests and program share one process: a program written to forge a verdict could, so the
sandbox protects the host, not the metric, against a deliberately adversarial model.
"""

# Running untrusted code with exec and turning every exception into a report is this file's job.
# ruff: noqa: BLE001, S102, S110

import os
import sys


def _config():
    """The run configuration: a JSON file in the work dir (deleted before the program starts), or a
    length-prefixed JSON payload on stdin (Docker, where the work dir is a tmpfs)."""
    # the config is a Python literal written by the host (trusted); `json` would cost ~10-20 ms of
    # imports per run (re, enum, collections), a third of the start-up budget
    def literal(text):
        return eval(compile(text, "<hero-config>", "eval"), {"__builtins__": {}})

    if len(sys.argv) > 1 and sys.argv[1] == "--payload":
        size = int(sys.stdin.buffer.readline())
        cfg = literal(sys.stdin.buffer.read(size).decode("utf-8"))
        for name, text in cfg.pop("files").items():
            with open(name, "w", encoding="utf-8") as fh:
                fh.write(text)
        import io

        sys.stdin = io.StringIO(cfg.pop("stdin_text", "") or "")
        return cfg
    with open("_hero_boot.cfg", encoding="utf-8") as fh:
        cfg = literal(fh.read())
    os.unlink("_hero_boot.cfg")
    return cfg


def _limit(cfg):
    import resource

    def cap(which, value):
        if value is None or which is None:
            return
        _soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))

    mb = cfg.get("memory_mb")
    cap(resource.RLIMIT_AS, mb * 1024 * 1024 if mb else None)
    cap(resource.RLIMIT_NPROC, cfg.get("max_processes"))
    cap(resource.RLIMIT_FSIZE, cfg.get("max_file_bytes"))
    cap(resource.RLIMIT_NOFILE, cfg.get("max_open_files"))
    cap(resource.RLIMIT_CPU, cfg.get("cpu_s"))
    cap(resource.RLIMIT_CORE, 0)
    cap(getattr(resource, "RLIMIT_STACK", None), cfg.get("stack_bytes"))


def _drop_root(cfg):
    """Give up root for good: a private network namespace first (rlimit layer only; bwrap and Docker
    already made one), then uid/gid 65534 with no supplementary groups."""
    if os.getuid() != 0:
        return
    if cfg.get("unshare_net"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(0x40000000) != 0:  # CLONE_NEWNET
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed")
    uid = int(cfg.get("uid", 65534))
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if os.getuid() == 0 or os.geteuid() == 0:
        raise OSError("could not drop root")


def _become_reaper():
    """Without a pid namespace (rlimit layer), act as a tiny init: fork, let the child run the
    program, and once it ends kill and reap every process reparented to us (daemons that called
    setsid included), so none outlives the run and no zombie holds the uid's process quota."""
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    child = os.fork()
    if child == 0:
        return
    status = 0
    while True:
        try:
            pid, code = os.waitpid(child, 0)
            status = os.waitstatus_to_exitcode(code)
            break
        except ChildProcessError:
            break
        except InterruptedError:
            continue
    me = str(os.getpid())
    for _ in range(1000):
        orphans = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat", "rb") as fh:
                        fields = fh.read().rsplit(b")", 1)[1].split()
                except OSError:
                    continue
                if fields[1].decode() == me:
                    orphans.append(int(entry))
        for pid in orphans:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        reaped = False
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == 0:
                break
            reaped = True
        if not orphans and not reaped:
            break
    os._exit(status if status >= 0 else 128 - status)


def _emit(nonce, record):
    """Write the verdict as a Python literal of plain str/int/list/dict values (the host parses it
    with ast.literal_eval)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    line = "\n" + nonce + repr(record) + "\n"
    try:
        os.write(1, line.encode("utf-8", "replace"))
    except OSError:
        pass


def _show_error(exc):
    """Print a traceback without the boot's own frame, as `python main.py` would."""
    import traceback

    try:
        sys.stdout.flush()  # keep the program's output before its traceback
    except Exception:
        pass
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)
    sys.stderr.flush()


def _exc_record(exc):
    message = str(exc)
    if isinstance(exc, SyntaxError):
        message = f"{exc.msg} (line {exc.lineno})"
    return {"status": "error", "exc_type": type(exc).__name__, "message": message[:2000]}


def _run(cfg, nonce):
    path = cfg["main"]
    with open(path, encoding="utf-8") as fh:
        source = fh.read()
    try:
        code = compile(source, path, "exec")
    except (SyntaxError, ValueError) as exc:
        _show_error(exc)
        _emit(nonce, _exc_record(exc))
        return 1
    namespace = {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__}
    try:
        exec(code, namespace)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
        _emit(nonce, {"status": "exit", "code": status})
        return status
    except BaseException as exc:  # the program's failure is data, not a boot failure
        _show_error(exc)
        _emit(nonce, _exc_record(exc))
        return 1
    _emit(nonce, {"status": "ok"})
    return 0


def _unittest(cfg, nonce):
    import io
    import types
    import unittest

    path = cfg["main"]
    with open(path, encoding="utf-8") as fh:
        source = fh.read()
    module = types.ModuleType("__test__")
    # the names BigCodeBench's harness puts in the test module: code written for it may use them unimported
    module.__dict__.update({"__file__": path, "sys": sys, "os": os, "environ": os.environ})
    sys.modules["__test__"] = module
    try:
        exec(compile(source, path, "exec"), module.__dict__)
    except BaseException as exc:  # program or test module failed to load
        _show_error(exc)
        record = _exc_record(exc)
        record["phase"] = "load"
        _emit(nonce, record)
        return 1
    cases = getattr(module, cfg.get("test_class") or "TestCases", None)
    loader = unittest.TestLoader()
    if isinstance(cases, type) and issubclass(cases, unittest.TestCase):
        suite = loader.loadTestsFromTestCase(cases)
    else:
        suite = unittest.TestSuite()
        for value in list(module.__dict__.values()):
            if isinstance(value, type) and issubclass(value, unittest.TestCase) and value.__module__ == "__test__":
                suite.addTests(loader.loadTestsFromTestCase(value))
    report = io.StringIO()
    result = unittest.TextTestRunner(stream=report, verbosity=0).run(suite)

    def describe(pairs):
        out = []
        for test, trace in pairs:
            exc_type = _exception_type(trace)
            name = getattr(test, "_testMethodName", None) or str(test)
            out.append({"test": name, "id": test.id(), "exc_type": exc_type, "trace": trace})
        return out

    _emit(
        nonce,
        {
            "status": "tests",
            "tests_run": result.testsRun,
            "failures": describe(result.failures),
            "errors": describe(result.errors),
            "skipped": len(result.skipped),
            "report": report.getvalue()[-20000:],
        },
    )
    return 0


def _exception_type(trace):
    """The exception's type name from a formatted traceback: the first unindented line after the
    last frame (the message below it may span many lines, e.g. an assertEqual diff)."""
    lines = trace.rstrip().splitlines()
    frames = [i for i, ln in enumerate(lines) if ln.startswith("  File ")]
    for ln in lines[(frames[-1] + 1) if frames else 0:]:
        if ln and not ln.startswith(" ") and not ln.startswith("Traceback"):
            head = ln.split(":", 1)[0].strip()
            return head if head and " " not in head else "Error"
    return "Error"


def _main():
    cfg = _config()
    nonce = cfg["nonce"]
    sys.argv = [cfg["main"]]
    sys.dont_write_bytecode = True
    for entry in cfg.get("sys_path", []):
        if entry not in sys.path:
            sys.path.append(entry)
    sys.path.insert(0, os.getcwd())
    _limit(cfg)
    _drop_root(cfg)
    if cfg.get("reaper"):
        _become_reaper()
    if cfg.get("mode") == "unittest":
        return _unittest(cfg, nonce)
    return _run(cfg, nonce)


if __name__ == "__main__":
    sys.exit(_main())
