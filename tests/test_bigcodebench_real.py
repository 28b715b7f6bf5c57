"""BigCodeBench on the real shared data: canonical solutions of standard-library-only tasks pass
`python_tests_metric` in the real sandbox, and a broken body fails. Skips when the data is absent."""

from __future__ import annotations

import ast
import gzip
import json
import random
import sys
from concurrent.futures import ThreadPoolExecutor

import dspy
import pytest

from dspy_hero.metrics.python import python_tests_metric
from dspy_hero.tasks.hub import shared_benchmarks_dir as _bench

DATA = sorted((_bench() / "bigcodebench").glob("*.jsonl.gz"))
pytestmark = pytest.mark.skipif(not DATA, reason="shared BigCodeBench data absent")

# the sandbox has no network: tasks whose tests resolve names or open connections cannot pass
NETWORK = {"socket", "urllib", "http", "smtplib", "ftplib", "ssl", "webbrowser", "requests", "email", "ipaddress"}
# canonical solutions that take tens of seconds on two busy cores (e.g. 3.6M permutations)
SLOW = {"BigCodeBench/0", "BigCodeBench/195", "BigCodeBench/220"}
SAMPLE = 15


def _imports(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _stdlib_tasks() -> list[dict]:
    tasks = []
    for path in DATA:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            tasks += [json.loads(line) for line in fh if line.strip()]
    chosen = []
    for task in tasks:
        libs = task["libs"] if isinstance(task["libs"], list) else ast.literal_eval(task["libs"])
        used = _imports(task["code_prompt"] + task["canonical_solution"] + "\n" + task["test"]) | set(libs)
        if used <= set(sys.stdlib_module_names) and not used & NETWORK and task["task_id"] not in SLOW:
            chosen.append(task)
    return chosen


@pytest.fixture(scope="module")
def sample() -> list[dict]:
    tasks = _stdlib_tasks()
    assert len(tasks) >= SAMPLE
    return random.Random(2024).sample(tasks, SAMPLE)


@pytest.fixture(scope="module")
def metric():
    return python_tests_metric(calibrated=True, timeout_s=60.0)


def _example(task: dict) -> dspy.Example:
    return dspy.Example(prompt=task["complete_prompt"], code_prompt=task["code_prompt"], entry_point=task["entry_point"],
                        test_code=task["test"]).with_inputs("prompt", "code_prompt", "entry_point")


def test_canonical_solutions_pass(sample, metric):
    def judge(task):
        code = "```python\n" + task["code_prompt"] + task["canonical_solution"] + "\n```"
        return task["task_id"], metric(_example(task), dspy.Prediction(code=code))

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(judge, sample))
    failed = [(tid, r.feedback) for tid, r in results if r.score != 1.0]
    assert not failed, failed
    assert all(r.feedback.startswith("passed") for _, r in results)


def test_broken_bodies_fail(sample, metric):
    def judge(task):
        broken = task["code_prompt"] + "    raise NotImplementedError('broken body')\n"
        return metric(_example(task), dspy.Prediction(code=broken))

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(judge, sample[:6]))
    for result in results:
        assert result.score == 0.0
        assert result.feedback.startswith("failed")
        assert "NotImplementedError" in result.feedback
