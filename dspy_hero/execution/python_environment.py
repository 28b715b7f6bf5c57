"""The Python test-time environment: run a candidate and the examples its prompt shows, no gold.

HERO-T needs evidence about a candidate without hidden tests. The prompt itself usually carries
some: doctest lines (``>>> task_func([1, 2])`` then the shown result, as in BigCodeBench docstrings),
calls listed under an ``Example:`` heading, or a DSCodeBench-style ``Input:`` block that assigns the
function's arguments. Those are visible to the model anyway, so running them is label-free.

Probes:
- ``run_examples``: run the visible examples against the code (argument: code, default the last
  executed program) and report each output or exception, next to the output the prompt shows.
- ``run_snippet``: run a short snippet after the last executed program and show its output.
"""

from __future__ import annotations

import ast
import doctest
import re
import secrets
import threading
from dataclasses import dataclass
from typing import Any

from dspy_hero.execution.base import EMPTY_PROGRAM, RUNTIME, Execution, ProbeResult, failed
from dspy_hero.execution.python import PythonSandbox
from dspy_hero.text import extract_code

__all__ = ["PythonEnvironment", "VisibleExample", "extract_examples"]

_MAX_EXAMPLES = 12
_MAX_SHOWN = 400


@dataclass(frozen=True)
class VisibleExample:
    """One example the prompt shows: code to run after the program, and the output it shows (if any;
    informative only, never a pass/fail criterion)."""

    source: str
    shown: str | None = None
    mode: str = "single"  # "single": a REPL line (expression values printed); "block": statements + a final call


# ---------------------------------------------------------------------------------------- extraction

_SIGNATURE = re.compile(r"def\s+([A-Za-z_]\w*)\s*\(([^)]*)\)")
_FENCED = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)
_EXAMPLE_HEAD = re.compile(r"^\s*(?:Examples?|Example usage|Usage)\s*:?\s*$", re.IGNORECASE)


def extract_examples(text: str, entry_point: str | None = None) -> list[VisibleExample]:
    """The runnable examples in a prompt, in order: doctest lines first; else calls of the entry
    point under an ``Example:`` heading; else an ``Input:`` code block whose variables name the
    function's parameters."""
    text = text or ""
    found = _doctest_examples(text)
    if not found:
        found = _heading_examples(text, entry_point)
    if not found:
        found = _input_block_examples(text, entry_point)
    return found[:_MAX_EXAMPLES]


def _doctest_examples(text: str) -> list[VisibleExample]:
    try:
        parsed = doctest.DocTestParser().get_examples(text)
    except ValueError:  # inconsistent indentation inside a docstring
        return []
    out = []
    for ex in parsed:
        source = ex.source.rstrip("\n")
        try:
            ast.parse(source)
        except SyntaxError:
            continue
        want = [ln for ln in ex.want.rstrip("\n").splitlines()]
        while want and want[-1].strip() in ('"""', "'''"):  # the docstring's closing quotes
            want.pop()
        out.append(VisibleExample(source=source, shown="\n".join(want) or None, mode="single"))
    return out


def _heading_examples(text: str, entry_point: str | None) -> list[VisibleExample]:
    if not entry_point:
        return []
    call = re.compile(rf"^\s*(?:[A-Za-z_]\w*\s*=\s*)?{re.escape(entry_point)}\(.*\)\s*$")
    out, active = [], False
    for line in text.splitlines():
        if _EXAMPLE_HEAD.match(line):
            active = True
            continue
        if active and call.match(line):
            source = line.strip()
            try:
                ast.parse(source)
            except SyntaxError:
                continue
            out.append(VisibleExample(source=source, mode="single"))
    return out


def _input_block_examples(text: str, entry_point: str | None) -> list[VisibleExample]:
    signature = None
    for name, params in _SIGNATURE.findall(text):
        if entry_point in (None, name):
            signature = (name, params)
    if signature is None:
        return []
    name, params = signature
    names = [p.split("=")[0].split(":")[0].strip().lstrip("*") for p in params.split(",") if p.strip()]
    names = [n for n in names if n and n != "self"]
    match = re.search(r"Input\s*:?\s*\n+" + _FENCED.pattern, text, re.DOTALL)
    if not match:
        return []
    block = match.group(1)
    try:
        tree = ast.parse(block)
    except SyntaxError:
        return []
    assigned = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)}
    if not names or not set(names) & assigned:
        return []
    args = ", ".join(f"{n}={n}" for n in names if n in assigned)
    shown = None
    out_match = re.search(r"Output\s*:?\s*\n+" + _FENCED.pattern, text[match.end():], re.DOTALL)
    if out_match:
        shown = out_match.group(1).strip()
    imports = "\n".join(ln for ln in text.splitlines() if re.match(r"^(import|from)\s+\w", ln.strip()) and ln == ln.lstrip())
    header = _conventional_imports(block) + (imports + "\n" if imports else "")
    return [VisibleExample(source=f"{header}{block.rstrip()}\n{name}({args})", shown=shown, mode="block")]


def _conventional_imports(block: str) -> str:
    """DSCodeBench inputs use ``np.``/``pd.`` without importing them."""
    lines = []
    if re.search(r"\bnp\.", block) and "import numpy" not in block:
        lines.append("import numpy as np")
    if re.search(r"\bpd\.", block) and "import pandas" not in block:
        lines.append("import pandas as pd")
    return "".join(line + "\n" for line in lines)


# ---------------------------------------------------------------------------------------- running

_RUNNER = r'''
import contextlib as _hero_contextlib, io as _hero_io, ast as _hero_ast, os as _hero_os

def _hero_examples(program, examples, nonce, limit):
    namespace = {"__name__": "__main__"}
    out = _hero_io.StringIO()
    report = {"program_error": None, "program_output": "", "examples": []}

    def finish():
        _hero_os.write(1, ("\n" + nonce + repr(report) + "\n").encode("utf-8", "replace"))

    try:
        with _hero_contextlib.redirect_stdout(out), _hero_contextlib.redirect_stderr(out):
            exec(compile(program, "program.py", "exec"), namespace)
    except BaseException as exc:
        report["program_error"] = (type(exc).__name__ + ": " + str(exc))[:limit]
    report["program_output"] = out.getvalue()[-limit:]
    if report["program_error"] is not None:
        return finish()
    for index, (source, mode) in enumerate(examples):
        out = _hero_io.StringIO()
        error = None
        try:
            with _hero_contextlib.redirect_stdout(out), _hero_contextlib.redirect_stderr(out):
                if mode == "single":
                    exec(compile(source + "\n", "<example %d>" % (index + 1), "single"), namespace)
                else:
                    tree = _hero_ast.parse(source)
                    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], _hero_ast.Expr) else None
                    exec(compile(tree, "<example %d>" % (index + 1), "exec"), namespace)
                    if last is not None:
                        value = eval(compile(_hero_ast.Expression(last.value), "<example %d>" % (index + 1), "eval"), namespace)
                        if value is not None:
                            print(repr(value))
        except BaseException as exc:
            error = (type(exc).__name__ + ": " + str(exc))[:limit]
        report["examples"].append({"output": out.getvalue()[:limit], "error": error})
    finish()
'''


class PythonEnvironment:
    """One Python task as HERO-T's environment (language ``"python"``): its sandbox, its prompt and
    the examples the prompt shows. It holds no tests and no reference solution.

    `sandbox` may be None (a default `PythonSandbox` with `timeout_s`). `visible_tests` is optional
    extra example code the user chose to make visible (e.g. a few asserts), run like a block.
    The last program passed to `execute` is what ``run_snippet`` runs after, so probes follow the
    candidate being refined. One environment serves one instance; calls are serialized per instance.
    """

    language = "python"

    def __init__(
        self,
        sandbox: PythonSandbox | None = None,
        prompt: str = "",
        code_prompt: str | None = None,
        entry_point: str | None = None,
        visible_tests: str | None = None,
        timeout_s: float = 30.0,
    ):
        self.sandbox = sandbox if sandbox is not None else PythonSandbox(timeout_s=timeout_s)
        self.prompt = prompt or ""
        self.code_prompt = code_prompt or ""
        self.entry_point = entry_point
        self.visible_tests = visible_tests
        examples = extract_examples(self.prompt + "\n" + self.code_prompt, entry_point)
        if not examples and self.code_prompt:
            examples = extract_examples(self.code_prompt, entry_point)
        if visible_tests and visible_tests.strip():
            examples.append(VisibleExample(source=visible_tests.strip(), mode="block"))
        self.examples: tuple[VisibleExample, ...] = tuple(examples)
        self._last_program: str | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PythonEnvironment(entry_point={self.entry_point!r}, examples={len(self.examples)})"

    # -- Environment protocol ------------------------------------------------------------------------

    def execute(self, program: str) -> Execution:
        """Run the program (it defines the function) and then the visible examples, in one sandboxed
        process. ok only when the program loads and no example raises."""
        code = extract_code(program, "python")
        if not code.strip():
            return failed(EMPTY_PROGRAM, "the program is empty")
        with self._lock:
            self._last_program = code
        return self._run(code, self.examples)

    def probes(self) -> dict[str, str]:
        return {
            "run_examples": "no argument (or code): runs the examples shown in the prompt against the last "
                            "executed program and reports each output or exception",
            "run_snippet": "a short Python snippet: runs it after the last executed program and shows its output",
        }

    def probe(self, name: str, argument: str = "") -> ProbeResult:
        argument = (argument or "").strip()
        if name == "run_examples":
            return self._probe_examples(argument)
        if name == "run_snippet":
            return self._probe_snippet(argument)
        return ProbeResult(name, argument, f"unknown probe {name!r}; available: {sorted(self.probes())}", ok=False)

    def check(self, program: str, execution: Execution) -> tuple[bool, str]:
        """Gate: the program executed, defines the entry point, and every visible example ran
        without an exception (outputs are not compared: that would need a label)."""
        if not execution.ok:
            return False, f"execution failed: {execution.describe()}"
        if self.entry_point and _defines(program, self.entry_point) is False:
            return False, f"the program does not define `{self.entry_point}`"
        ran = execution.details.get("examples_run", 0)
        if not self.examples:
            return True, "executed without error (the prompt shows no runnable examples)"
        return True, f"executed without error; {ran} visible example(s) ran without an exception"

    # -- probes --------------------------------------------------------------------------------------

    def _probe_examples(self, argument: str) -> ProbeResult:
        code = extract_code(argument, "python") if argument else self._last_program
        if not self.examples:
            return ProbeResult("run_examples", argument, "the prompt shows no runnable examples", ok=True)
        if not code:
            listing = "\n".join(f"example {i + 1}: {ex.source}" for i, ex in enumerate(self.examples))
            return ProbeResult("run_examples", argument, "no program executed yet; examples:\n" + listing, ok=True)
        execution = self._run(code, self.examples)
        return ProbeResult("run_examples", argument, execution.output or execution.describe(), ok=True)

    def _probe_snippet(self, argument: str) -> ProbeResult:
        snippet = extract_code(argument, "python")
        if not snippet.strip():
            return ProbeResult("run_snippet", argument, "give a snippet to run, e.g. print(task_func([1, 2]))", ok=False)
        with self._lock:
            program = self._last_program or ""
        execution = self._run(program or "pass", (VisibleExample(source=snippet, mode="block"),), label="snippet")
        text = execution.output or execution.describe()
        if not program:
            text = "(no program executed yet; ran the snippet alone)\n" + text
        return ProbeResult("run_snippet", argument, text, ok=True)

    # -- running -------------------------------------------------------------------------------------

    def _run(self, code: str, examples: tuple[VisibleExample, ...] | list[VisibleExample], label: str = "example") -> Execution:
        nonce = "@@hero-ex-" + secrets.token_hex(12) + "@@"
        pairs = [(ex.source, ex.mode) for ex in examples]
        script = _RUNNER + f"\n_hero_examples({code!r}, {pairs!r}, {nonce!r}, {_MAX_SHOWN})\n"
        raw = self.sandbox.run(script)
        report = _report(raw.output or "", nonce)
        if report is None:
            return raw  # timeout, resource limit or a crash: the sandbox's account is the evidence
        lines, details = [], dict(raw.details)
        if report["program_output"].strip():
            lines.append("program output: " + report["program_output"].strip())
        if report["program_error"]:
            lines.append("the program failed to load: " + report["program_error"])
            return Execution(ok=False, output="\n".join(lines), error_type=RUNTIME, error_message=report["program_error"],
                             runtime_s=raw.runtime_s, details=details)
        errors = []
        for i, (ex, res) in enumerate(zip(examples, report["examples"])):
            head = f"{label} {i + 1}: {ex.source if len(ex.source) < 200 else ex.source[:200] + '...'}"
            if res["error"]:
                errors.append(f"{label} {i + 1} raised {res['error']}")
                lines.append(f"{head}\n  raised {res['error']}")
            else:
                lines.append(f"{head}\n  output: {res['output'].strip() or '(none)'}")
            if ex.shown:
                lines.append(f"  the prompt shows: {ex.shown[:_MAX_SHOWN]}")
        details.update(examples_run=len(report["examples"]), example_errors=len(errors))
        if errors:
            return Execution(ok=False, output="\n".join(lines), error_type=RUNTIME, error_message="; ".join(errors)[:1000],
                             runtime_s=raw.runtime_s, details=details)
        return Execution(ok=True, output="\n".join(lines), runtime_s=raw.runtime_s, details=details)


def _report(output: str, nonce: str) -> dict[str, Any] | None:
    at = output.rfind(nonce)
    if at < 0:
        return None
    try:
        value = ast.literal_eval(output[at + len(nonce):].split("\n", 1)[0])
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, dict) else None


def _defines(code: str, name: str) -> bool | None:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name for n in ast.walk(tree))
