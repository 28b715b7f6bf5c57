"""One `evaluate` per meaning: every function of dspy_hero named `evaluate` evaluates a program (it
takes one, as `program`) on a split; scoring prompt variants under the budget is `Rollouts.run`."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def evaluate_functions(tree: ast.AST) -> list[tuple[int, list[str]]]:
    return [(node.lineno, [a.arg for a in node.args.args + node.args.kwonlyargs])
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "evaluate"]


def test_every_evaluate_evaluates_a_program():
    other = {}
    for path in sorted((ROOT / "dspy_hero").rglob("*.py")):
        for line, params in evaluate_functions(ast.parse(path.read_text(encoding="utf-8"))):
            if "program" not in params:
                other[f"{path.relative_to(ROOT).as_posix()}:{line}"] = params
    assert other == {}


def test_the_checker_sees_an_evaluate_of_something_else():
    tree = ast.parse("class R:\n    def evaluate(self, key, instructions, examples): ...\n"
                     "def evaluate(ctx, program, result): ...\n")
    assert sorted((line, "program" in params) for line, params in evaluate_functions(tree)) == [(2, False), (3, True)]
