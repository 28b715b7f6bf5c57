"""Python execution metrics: BigCodeBench unit tests and DSCodeBench output comparison.

Both run the candidate in `PythonSandbox` (never in this process) and return a `Verdict` through
`ExecutionMetric`, so they plug into `dspy.Evaluate`, GEPA, MIPROv2 and HERO unchanged.

Feedback names what is observable (pass/fail, how many tests failed, exception types, failing test
names, output types and shapes) and never the expected values unless ``reveal_expected=True``:
assertion messages usually print the expected output, so they stay out by default.
"""

from __future__ import annotations

import ast
import secrets
from pathlib import Path
from typing import Any

from dspy_hero.execution.base import EMPTY_PROGRAM, TIMEOUT, Execution
from dspy_hero.execution.python import TAMPERED, PythonSandbox
from dspy_hero.fields import get_field
from dspy_hero.metrics.base import (
    ExecutionMetric,
    Verdict,
    extract_code,
    prediction_text,
    require_fields,
)

_DRIVER_PATH = Path(__file__).with_name("ds_driver.py")
_MAX_RAW = 2000
_DS_OUTPUT_BYTES = 256 << 20  # the candidate's outputs travel as one blob on its output


def _candidate(pred: Any) -> str:
    return extract_code(prediction_text(pred, "code"), "python")


def calibrated_program(code: str, code_prompt: str | None) -> str:
    """BigCodeBench's calibrated mode: the code prompt (imports + signature) with a ``pass`` body,
    then the candidate, so a candidate that omits the imports or signature is not punished."""
    if not code_prompt:
        return code
    if not code_prompt.endswith("\n"):  # BigCodeBench's prompts all end with one; user data may not
        code_prompt += "\n"
    return code_prompt + "    pass\n" + code


def _defines(code: str, name: str) -> bool | None:
    """Whether the code defines `name`; None when it cannot tell (the code does not parse, or is too
    deeply nested or too large for the parser: a huge literal raises MemoryError or RecursionError)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError):
        return None
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name
               for n in ast.walk(tree))


def python_tests_metric(
    calibrated: bool = True,
    timeout_s: float = 240.0,
    sandbox: PythonSandbox | None = None,
    reveal_expected: bool = False,
    prediction_field: str | None = None,
) -> ExecutionMetric:
    """BigCodeBench semantics: run ``code + "\\n" + test_code`` with unittest ``TestCases`` in a
    fresh sandboxed process; score 1 only with no failures and no errors; a timeout scores 0.

    Example fields: ``test_code`` (required), ``code_prompt`` and ``entry_point`` (optional);
    prediction field ``code`` (fenced blocks are extracted).
    """
    sb = sandbox or PythonSandbox(timeout_s=timeout_s, memory_mb=8192, max_processes=256)

    def judge(gold: Any, pred: Any) -> Verdict:
        require_fields(gold, ("test_code",), "python_tests_metric")
        try:
            code = _candidate(pred)
            if not code.strip():
                return Verdict(0.0, f"{EMPTY_PROGRAM}: the prediction contains no code")
            code_prompt = get_field(gold, "code_prompt")
            program = calibrated_program(code, code_prompt) if calibrated else code
            execution = sb.run_unittest(program, get_field(gold, "test_code"), timeout_s=timeout_s)
            return Verdict(1.0 if execution.ok else 0.0,
                           tests_feedback(execution, code, get_field(gold, "entry_point"), reveal_expected))
        except Exception as exc:  # noqa: BLE001 - a metric returns a score for any prediction text
            return _unjudgeable(exc)

    return ExecutionMetric(judge, "python_tests_metric", "python", prediction_field=prediction_field)


def _unjudgeable(exc: BaseException) -> Verdict:
    return Verdict(0.0, f"failed: the prediction could not be evaluated ({type(exc).__name__}: {str(exc)[:200]})")


def tests_feedback(execution: Execution, code: str, entry_point: str | None, reveal_expected: bool) -> str:
    """Feedback for a unit-test run: counts, exception types and test names; no expected values."""
    d = execution.details
    if execution.ok:
        return f"passed: all {d.get('tests_run', 0)} unit test(s) passed"
    parts = []
    if execution.error_type == TAMPERED:
        parts.append(f"failed: {TAMPERED}: {execution.error_message} (tampering with the tests scores 0)")
    elif execution.error_type == TIMEOUT:
        parts.append(f"failed: {execution.error_type}: {execution.error_message} (a timeout scores 0)")
    elif "tests_run" in d:
        parts.append(
            f"failed: {len(d.get('failed_tests', []))} of {d['tests_run']} unit test(s) failed "
            f"({d.get('failures', 0)} assertion failure(s), {d.get('errors', 0)} error(s)); "
            f"exception types: {', '.join(d.get('exception_types', [])) or 'none'}; "
            f"failing tests: {', '.join(d.get('failed_tests', [])[:10]) or 'none'}"
        )
    else:
        where = " while loading the program and tests" if d.get("phase") == "load" else ""
        parts.append(f"failed{where}: {execution.error_type}: {execution.error_message}")
    if entry_point and _defines(code, entry_point) is False:
        parts.append(f"note: the program does not define `{entry_point}`")
    if execution.truncated:
        parts.append("the output was truncated at the sandbox's cap")
    if reveal_expected and d.get("raw_report"):
        parts.append("test report:\n" + d["raw_report"][-_MAX_RAW:])
    return "\n".join(parts)


def ds_outputs_metric(
    num_cases: int = 200,
    timeout_s: float = 600.0,
    sandbox: PythonSandbox | None = None,
    reveal_expected: bool = False,
    prediction_field: str | None = None,
) -> ExecutionMetric:
    """DSCodeBench semantics: generate ``num_cases`` inputs with the test script's
    ``test_case_input_generator`` (seeds fixed at 42), apply the last top-level function of the
    ground truth and of the candidate to each, compare outputs by type (numpy allclose with NaN
    equal, pandas frame/series equality with tolerance, nested containers, floats with tolerance,
    written files); score 1 only if every case matches.

    Example fields: ``ground_truth_code``, ``test_script``; prediction field ``code``. Two sandboxed
    processes per evaluation (see `ds_driver`): the candidate's, which only reports its own outputs,
    and the judge's, which holds the ground truth and the comparison and never runs candidate code.
    """
    if num_cases <= 0:
        raise ValueError("num_cases must be positive")
    sb = sandbox or PythonSandbox(timeout_s=timeout_s, memory_mb=8192, max_processes=256)
    driver = _DRIVER_PATH.read_text(encoding="utf-8")

    def judge(gold: Any, pred: Any) -> Verdict:
        require_fields(gold, ("ground_truth_code", "test_script"), "ds_outputs_metric")
        try:
            code = _candidate(pred)
            if not code.strip():
                return Verdict(0.0, f"{EMPTY_PROGRAM}: the prediction contains no code")
            test_script = get_field(gold, "test_script")
            marker = "@@hero-ds-outputs@@"
            seed = secrets.randbelow(2**32)  # both processes hash alike: sets iterate in the same order
            run = sb.run(driver + f"\ncandidate_main({code!r}, {test_script!r}, {num_cases:d}, {marker!r})\n",
                         timeout_s=timeout_s, max_output_bytes=_DS_OUTPUT_BYTES, hash_seed=seed)
            blob = _last_payload(run.output or "", marker)
            if blob is None or run.truncated:
                return _ds_verdict(run, None, reveal_expected, side="program")
            token = "@@hero-ds-" + secrets.token_hex(12) + "@@"
            judged = sb.run(driver + "\njudge_main({!r}, {!r}, {:d}, {!r})\n".format(
                get_field(gold, "ground_truth_code"), test_script, num_cases, token), stdin=blob, timeout_s=timeout_s,
                hash_seed=seed)
            return _ds_verdict(judged, _ds_report(judged, token), reveal_expected, side="judge")
        except Exception as exc:  # noqa: BLE001 - a metric returns a score for any prediction text
            return _unjudgeable(exc)

    return ExecutionMetric(judge, "ds_outputs_metric", "python", prediction_field=prediction_field)


def _last_payload(text: str, marker: str) -> str | None:
    at = text.rfind(marker)
    if at < 0:
        return None
    return text[at + len(marker):].split("\n", 1)[0].strip().strip("'") or None


def _ds_report(execution: Execution, token: str) -> dict[str, Any] | None:
    text = execution.output or ""
    at = text.rfind(token)
    if at < 0:
        return None
    line = text[at + len(token):].split("\n", 1)[0]
    try:
        report = ast.literal_eval(line)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return report if isinstance(report, dict) else None


def _ds_verdict(execution: Execution, report: dict[str, Any] | None, reveal_expected: bool,
                side: str = "judge") -> Verdict:
    if report is None:
        if execution.error_type == TIMEOUT:
            return Verdict(0.0, f"failed: {TIMEOUT}: {execution.error_message} (a timeout scores 0)")
        if execution.truncated:
            return Verdict(0.0, "failed: the program's outputs passed the sandbox's output cap")
        where = "the program's run" if side == "program" else "the comparison"
        return Verdict(0.0, f"failed: {where} did not complete: {execution.describe()}")
    if report.get("fatal"):
        side = "the reference solution" if report.get("fatal_side") == "gold" else "the program"
        return Verdict(0.0, f"failed: {side} could not be evaluated: {report['fatal']}")
    try:
        cases, matched = int(report.get("cases", 0)), int(report.get("matched", 0))
    except (TypeError, ValueError):
        return Verdict(0.0, "failed: the comparison's report is malformed")
    if cases == 0:
        return Verdict(0.0, "failed: the test input generator produced no cases")
    if matched == cases:
        return Verdict(1.0, f"passed: outputs matched the reference on all {cases} generated input(s)")
    lines = [f"failed: outputs matched the reference on {matched} of {cases} generated input(s)"]
    if report.get("candidate_errors"):
        lines.append(f"the program raised on {report['candidate_errors']} input(s): "
                     f"{', '.join(report.get('error_types', []))}")
    if report.get("first_mismatch") is not None:
        lines.append(f"first mismatch at input #{report['first_mismatch']}: {report.get('reason', '')}")
    if reveal_expected and report.get("detail"):
        lines.append(f"expected output there: {report['detail']}")
    return Verdict(0.0, "\n".join(lines))
