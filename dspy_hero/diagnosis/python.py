"""Diagnosis of Python programs, against what the task's own prompt shows (no hidden test is read):
the program parses, defines the entry point, loads, and runs the visible examples (docstring
doctests, ``Example:`` calls, DSCodeBench ``Input:`` blocks) without raising and printing what the
prompt shows. An exception is told with its type and where it happened: the line of the program
(number and source) that raised, and in which example.

The program runs in the environment's sandbox, in one process, through a small runner that reports
on a nonce-marked line (the same channel discipline as the environment's own runner: the program
cannot forge a report without knowing the nonce).
"""

from __future__ import annotations

import ast
import secrets
from typing import Any

from dspy_hero.diagnosis.common import error_fact, one_line
from dspy_hero.diagnosis.facts import Category, Diagnosis, Fact
from dspy_hero.execution.base import TIMEOUT, Execution
from dspy_hero.metrics.base import extract_code

__all__ = ["diagnose_python", "static_facts"]

_LIMIT = 300
_RUNNER = r'''
import contextlib as _c, io as _io, ast as _ast, os as _os, sys as _sys, traceback as _tb

def _hero_where(exc):
    frames = [f for f in _tb.extract_tb(exc.__traceback__) if f.filename == "program.py"]
    if not frames:
        if isinstance(exc, SyntaxError) and exc.filename == "program.py":
            return exc.lineno
        return None
    return frames[-1].lineno

def _hero_diagnose(program, examples, nonce, limit):
    ns = {"__name__": "__main__"}
    report = {"load": None, "examples": []}
    def finish():
        _os.write(1, ("\n" + nonce + repr(report) + "\n").encode("utf-8", "replace"))
    out = _io.StringIO()
    try:
        with _c.redirect_stdout(out), _c.redirect_stderr(out):
            exec(compile(program, "program.py", "exec"), ns)
    except BaseException as exc:
        report["load"] = (type(exc).__name__, str(exc)[:limit], _hero_where(exc))
        return finish()
    for i, (source, mode) in enumerate(examples):
        out = _io.StringIO()
        err = None
        try:
            with _c.redirect_stdout(out), _c.redirect_stderr(out):
                if mode == "single":
                    exec(compile(source + "\n", "<example>", "single"), ns)
                else:
                    tree = _ast.parse(source)
                    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], _ast.Expr) else None
                    exec(compile(tree, "<example>", "exec"), ns)
                    if last is not None:
                        value = eval(compile(_ast.Expression(last.value), "<example>", "eval"), ns)
                        if value is not None:
                            print(repr(value))
        except BaseException as exc:
            err = (type(exc).__name__, str(exc)[:limit], _hero_where(exc))
        report["examples"].append({"output": out.getvalue()[:limit], "error": err})
    finish()
'''


def diagnose_python(program: str, execution: Execution | None, environment: Any, *, reference: str | None = None,
                    feedback: str | None = None) -> Diagnosis:
    """Facts about one Python program (see the module docstring). `environment` is a
    `PythonEnvironment` (its sandbox, entry point and visible examples) or None (static facts only).
    `reference` is ignored: a reference solution's diff is not a rule-worthy pattern for code."""
    code = extract_code(program, "python")
    if not code.strip():
        return Diagnosis("python", (Fact(Category.EMPTY_PROGRAM, "the answer contains no code"),))
    entry = getattr(environment, "entry_point", None)
    facts = static_facts(code, entry)
    structure = _structure(code)
    errors: list[str] = []
    if facts and facts[0].category is Category.SYNTAX_ERROR:
        return Diagnosis("python", tuple(facts), structure)
    if execution is not None and execution.error_type == TIMEOUT:
        facts.append(error_fact(execution))  # already timed out once: not re-run
    elif environment is not None and hasattr(environment, "sandbox"):
        examples = tuple(getattr(environment, "examples", ()))
        run = _run(environment.sandbox, code, examples)
        if isinstance(run, Execution):  # timeout, resource limit, crash: the sandbox's own account
            facts.append(error_fact(run, "while loading the program or running the prompt's examples"))
        else:
            facts += _run_facts(run, code, examples)
    elif execution is not None and not execution.ok:
        facts.append(error_fact(execution))
    else:
        errors.append("no Python environment: only static facts")
    if feedback and not facts:
        low = feedback.lower()
        if "fail" in low or "error" in low:
            facts.append(Fact(Category.TESTS_FAILED, "the program runs its visible examples cleanly but fails the "
                              "task's tests: " + one_line(feedback, 160)))
    return Diagnosis("python", tuple(facts), structure, tuple(errors))


def static_facts(code: str, entry_point: str | None) -> list[Fact]:
    """Facts read from the text alone: a syntax error with its line, a missing entry point."""
    try:
        tree = ast.parse(code, filename="program.py")
    except SyntaxError as exc:
        line = (exc.text or "").strip()
        return [Fact(Category.SYNTAX_ERROR, f"SyntaxError at line {exc.lineno}: {exc.msg}"
                     + (f" (`{one_line(line, 80)}`)" if line else ""))]
    if entry_point:
        defined = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        assigned = [t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]
        if entry_point not in defined + assigned:
            shown = ", ".join(f"`{d}`" for d in defined[:4]) or "nothing"
            return [Fact(Category.MISSING_ENTRY_POINT, f"the program does not define `{entry_point}` (it defines {shown})")]
    return []


def _structure(code: str) -> str:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return ""
    funcs = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    imports = sorted({a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                      for a in (n.names if isinstance(n, ast.Import) else [ast.alias(n.module or "")])})
    return (f"defines {', '.join(f'`{f}`' for f in funcs) or 'no function'}"
            + (f"; imports {', '.join(i for i in imports if i)}" if any(imports) else ""))


def _run(sandbox: Any, code: str, examples: tuple) -> dict[str, Any] | Execution:
    nonce = "@@hero-diag-" + secrets.token_hex(12) + "@@"
    pairs = [(ex.source, ex.mode) for ex in examples]
    script = _RUNNER + f"\n_hero_diagnose({code!r}, {pairs!r}, {nonce!r}, {_LIMIT})\n"
    raw = sandbox.run(script)
    text = raw.output or ""
    at = text.rfind(nonce)
    if at < 0:
        return raw
    try:
        report = ast.literal_eval(text[at + len(nonce):].split("\n", 1)[0])
    except (ValueError, SyntaxError):
        return raw
    return report if isinstance(report, dict) else raw


def _where(code: str, line: int | None) -> str:
    if not line:
        return ""
    lines = code.splitlines()
    source = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return f" at line {line}" + (f" (`{one_line(source, 80)}`)" if source else "")


def _run_facts(report: dict[str, Any], code: str, examples: tuple) -> list[Fact]:
    if report.get("load"):
        kind, message, line = report["load"]
        return [Fact(Category.LOAD_ERROR, f"{kind}{_where(code, line)} while loading the program: {one_line(message, 120)}")]
    facts = []
    for i, (ex, res) in enumerate(zip(examples, report.get("examples", ()))):
        call = one_line(ex.source.strip().splitlines()[-1] if ex.source.strip() else ex.source, 70)
        if res.get("error"):
            kind, message, line = res["error"]
            place = _where(code, line) or " in the example itself"
            facts.append(Fact(Category.EXAMPLE_RAISES, f"visible example {i + 1} (`{call}`) raises {kind}{place}: "
                              f"{one_line(message, 100)}"))
        elif ex.shown is not None and _norm(res.get("output", "")) != _norm(ex.shown):
            got = one_line(res.get("output", "").strip() or "(nothing)", 60)
            facts.append(Fact(Category.EXAMPLE_OUTPUT_DIFFERS, f"visible example {i + 1} (`{call}`) prints `{got}`; "
                              f"the prompt shows `{one_line(ex.shown, 60)}`"))
    # an exception says more than a differing output: raised examples first (stable otherwise)
    return sorted(facts, key=lambda f: f.category is not Category.EXAMPLE_RAISES)


def _norm(text: str) -> str:
    return " ".join(str(text).split())
