"""Turning what a sandboxed run left behind into an `Execution`, without trusting any of it.

The boot writes its verdict on a channel of its own (the process's original stdout; the program's
stdout and stderr both go to the output pipe): exactly one line, the run's token followed by a
Python literal. Anything else on that channel (a second line, a wrong token, a literal that does not
parse, a field of the wrong type) means the program wrote there itself: the run is
`TAMPERED` and scores 0. Nothing here raises on malformed input.
"""

from __future__ import annotations

import ast
import hmac
import signal
from typing import Any

from dspy_hero.execution.base import RESOURCE, RUNTIME, SYNTAX, TIMEOUT, Execution

__all__ = ["TAMPERED", "TESTS_FAILED", "interpret", "parse_verdict"]

TESTS_FAILED = "TestFailure"  # unit tests ran and some failed or errored
TAMPERED = "TamperDetected"  # the program forged, altered or bypassed the harness's verdict
MAX_VERDICT_BYTES = 8 << 20
_MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "Unable to allocate")
_TEST_ENTRY = {"test": str, "id": str, "exc_type": str, "trace": str}


def parse_verdict(raw: bytes, token: str) -> tuple[dict[str, Any] | None, str | None]:
    """(record, None) for one valid verdict line; (None, None) for an empty channel (the run ended
    before its verdict); (None, why) when the channel holds anything else."""
    if not raw:
        return None, None
    if len(raw) > MAX_VERDICT_BYTES:
        return None, "the verdict channel overflowed"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "the verdict channel holds bytes that are not UTF-8"
    if text.count("\n") != 1 or not text.endswith("\n"):
        return None, "the verdict channel holds more (or less) than one record"
    if not hmac.compare_digest(text[: len(token)].encode(), token.encode()):
        return None, "a verdict record carries the wrong token"
    try:
        record = ast.literal_eval(text[len(token):-1])
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None, "a verdict record does not parse"
    problem = _validate(record)
    return (None, problem) if problem else (record, None)


def _validate(record: Any) -> str | None:
    if not isinstance(record, dict) or not isinstance(record.get("status"), str):
        return "a verdict record is not a dict with a status"
    status = record["status"]
    if status == "ok":
        return None
    if status == "exit":
        return None if type(record.get("code")) is int else "an exit record without an int code"
    if status == "error":
        if not isinstance(record.get("exc_type"), str) or not isinstance(record.get("message"), str):
            return "an error record without exc_type/message strings"
        return None if isinstance(record.get("phase", ""), str) else "an error record with a bad phase"
    if status == "tamper":
        reasons = record.get("reasons")
        ok = isinstance(reasons, list) and all(isinstance(r, str) for r in reasons)
        return None if ok else "a tamper record without reasons"
    if status == "tests":
        for key in ("tests_run", "skipped", "passed"):
            if type(record.get(key)) is not int or record[key] < 0:
                return f"a test record with a bad {key!r}"
        for key in ("failures", "errors"):
            entries = record.get(key)
            if not isinstance(entries, list) or not all(
                    isinstance(e, dict) and all(isinstance(e.get(f), t) for f, t in _TEST_ENTRY.items())
                    for e in entries):
                return f"a test record with malformed {key!r}"
        if not isinstance(record.get("report", ""), str):
            return "a test record with a bad report"
        return None
    return f"an unknown verdict status {status[:40]!r}"


def interpret(raw: bytes, verdict: bytes, token: str, returncode: int | None, timed_out: bool, capped: bool,
              runtime: float, timeout: float, layer: str, mode: str, cap: int, oom: bool = False) -> Execution:
    """The run's Execution from its output, its verdict channel and its exit status."""
    text = raw.decode("utf-8", "replace")
    truncated = capped or len(text.encode("utf-8", "replace")) > cap
    if truncated:
        text = text.encode("utf-8", "replace")[:cap].decode("utf-8", "ignore")
    details: dict[str, Any] = {"layer": layer, "exit_code": returncode}
    record, problem = parse_verdict(verdict, token)

    def fail(kind: str, message: str, **extra: Any) -> Execution:
        details.update(extra)
        return Execution(ok=False, output=text, error_type=kind, error_message=message, runtime_s=runtime,
                         truncated=truncated, details=details)

    if timed_out:
        return fail(TIMEOUT, f"the program did not finish within {timeout:g} s and was killed")
    if capped:
        return fail(RESOURCE, f"the program's output passed the {cap} byte cap; it was stopped")
    if problem is not None:
        return fail(TAMPERED, f"the verdict was tampered with: {problem}", tamper=[problem])
    if record is None:
        if oom:
            return fail(RESOURCE, "the run passed its memory budget (cgroup) and was killed")
        if returncode is not None and returncode < 0:
            sig = -returncode
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
            kind = RESOURCE if sig in (signal.SIGKILL, signal.SIGXCPU, signal.SIGXFSZ, signal.SIGSEGV) else RUNTIME
            return fail(kind, f"the program was killed by signal {name} (a resource limit or a crash)")
        if any(m in text for m in _MEMORY_MARKERS):
            return fail(RESOURCE, "MemoryError: the program passed the memory limit")
        if returncode == 0:
            # os._exit(0) or a closed stdout: the program ended normally without the boot's report
            if mode == "run":
                return Execution(ok=True, output=text, runtime_s=runtime, truncated=truncated, details=details)
            return fail(RUNTIME, "the test run ended without a report (the program exited early)")
        return fail(RUNTIME, f"the program exited with status {returncode} without a report: {_last_line(text)}")
    status = record["status"]
    if status == "tamper":
        return fail(TAMPERED, "the test harness detected tampering: " + "; ".join(record["reasons"])[:1000],
                    tamper=list(record["reasons"]))
    if returncode not in (0, None) and status in ("ok", "tests") or (
        status == "exit" and returncode != _exit_status(record.get("code"))
    ):
        # the program reported success but its process tree did not end cleanly: do not trust it
        return fail(RUNTIME, f"the sandbox's supervising process ended with status {returncode}")
    if status == "ok" or (status == "exit" and record["code"] == 0):
        return Execution(ok=True, output=text, runtime_s=runtime, truncated=truncated, details=details)
    if status == "exit":
        return fail(RUNTIME, f"the program called exit({record['code']})")
    if status == "error":
        exc_type, message = record["exc_type"], f"{record['exc_type']}: {record['message']}".strip()
        details["exception_type"] = exc_type
        if record.get("phase"):
            details["phase"] = record["phase"]
        if exc_type in ("SyntaxError", "IndentationError", "TabError"):
            return fail(SYNTAX, message)
        if exc_type == "MemoryError":
            return fail(RESOURCE, "MemoryError: the program passed the memory limit")
        if exc_type == "BlockingIOError" and "temporarily unavailable" in message:
            return fail(RESOURCE, f"{message} (the process limit was reached)")
        return fail(RUNTIME, message)
    return _test_execution(record, text, runtime, truncated, details)


def _test_execution(record: dict[str, Any], text: str, runtime: float, truncated: bool,
                    details: dict[str, Any]) -> Execution:
    bad = list(record["failures"]) + list(record["errors"])
    run = record["tests_run"]
    names = [b["test"] for b in bad]
    types = sorted({b["exc_type"] for b in bad})
    raw = "\n".join(f"{b['id']}\n{b['trace']}" for b in bad)
    if record.get("report"):
        raw = (raw + "\n" + record["report"]).strip()
    details.update(
        tests_run=run, failures=len(record["failures"]), errors=len(record["errors"]),
        skipped=record["skipped"], failed_tests=names, exception_types=types, raw_report=raw,
    )
    if run == 0:
        return Execution(ok=False, output=text, error_type=TESTS_FAILED, error_message="no tests were found or run",
                         runtime_s=runtime, truncated=truncated, details=details)
    if not bad and record["passed"] + record["skipped"] == run and record["passed"] > 0:
        return Execution(ok=True, output=text, runtime_s=runtime, truncated=truncated, details=details)
    if not bad:
        return Execution(ok=False, output=text, error_type=TESTS_FAILED,
                         error_message=f"only {record['passed']} of {run} test(s) passed (the rest were skipped)",
                         runtime_s=runtime, truncated=truncated, details=details)
    kind = RESOURCE if "MemoryError" in types else TESTS_FAILED
    shown = ", ".join(names[:8]) + (f", ... ({len(names) - 8} more)" if len(names) > 8 else "")
    message = f"{len(bad)} of {run} test(s) failed ({', '.join(types)}): {shown}"
    return Execution(ok=False, output=text, error_type=kind, error_message=message, runtime_s=runtime,
                     truncated=truncated, details=details)


def _exit_status(code: Any) -> int | None:
    """The status the OS reports for ``sys.exit(code)``: the low byte (exit(-1) ends with 255)."""
    return code % 256 if isinstance(code, int) else None


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "(no output)"
