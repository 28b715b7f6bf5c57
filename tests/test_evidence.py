"""The evidence a reflection LM sees, on a Spider-shaped diagnosis batch built from the shared Spider
data with the real SQLite executor and the real Spider metric (skipped when the data is absent).

The batch is the one `benchmarks/evidence.py` measures (loaded from that script, so the test checks
exactly what the benchmark prints): 32 failing cases (gold queries changed the way small models get
them wrong, kept only when the metric scores them 0) and 32 passing ones (gold queries).
"""

from __future__ import annotations

import importlib.util
import logging
import re
from pathlib import Path

import dspy
import pytest

from dspy_hero.diagnosis import Category, Diagnosis, count_categories
from dspy_hero.optimizer.evidence import (
    Case,
    DefaultEvidenceRenderer,
    approx_tokens,
    build_cases,
    context_window_of,
    diagnose_case,
    evidence_budget,
)
from dspy_hero.optimizer.rollout import RolloutResult
from dspy_hero.tasks.hub import shared_benchmarks_dir

SPIDER = shared_benchmarks_dir() / "spider"
SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "evidence.py"
needs_spider = pytest.mark.skipif(not (SPIDER / "dev.json").is_file(), reason="shared Spider data absent")


def _bench():
    spec = importlib.util.spec_from_file_location("evidence_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return _bench()


@pytest.fixture(scope="module")
def batch(bench):
    if not (SPIDER / "dev.json").is_file():
        pytest.skip("shared Spider data absent")
    results, examples, mutations = bench.spider_batch(SPIDER)
    assert sum(r.score < 1 for r in results) == 32 and sum(r.score == 1 for r in results) == 32
    return results, examples, mutations


@pytest.fixture(scope="module")
def cases(batch):
    results, examples, _ = batch
    return build_cases(results, examples, "generate", pass_threshold=1.0, num_failing=32, num_passing=32)


def blocks(text: str) -> dict[str, str]:
    """Case id -> its rendered block."""
    parts = re.split(r"(?m)^### Case ", text)[1:]
    return {p.split(" ", 1)[0]: p.split("\n\n## ", 1)[0] for p in parts}


def local_renderer(bench) -> DefaultEvidenceRenderer:
    n_ctx, max_tokens = bench.local_context()  # local_lm's defaults (8192, 1024); no model is started
    return DefaultEvidenceRenderer(context_window=n_ctx, max_output_tokens=max_tokens)


@needs_spider
def test_local_8k_reflector_sees_at_least_12_cases_each_failing_one_with_a_diagnosis_line(bench, cases):
    renderer = local_renderer(bench)
    assert bench.local_context()[0] == 8192
    text, shown = renderer.render(cases)
    assert len(shown) >= 12 and approx_tokens(text) <= renderer.budget()
    failing = [s for s in shown if s.startswith("F")]
    assert failing and [s for s in shown if s.startswith("P")]
    rendered = blocks(text)
    assert set(rendered) == set(shown)
    for cid in failing:
        line = next((ln for ln in rendered[cid].splitlines() if ln.startswith("Diagnosis: ")), "")
        assert len(line) > len("Diagnosis: ") + 10, rendered[cid]
    # the old fixed 3000-token budget with a schema per case showed far fewer
    _, old = DefaultEvidenceRenderer(token_budget=3000).render(cases)
    assert len(old) < len(shown)


@pytest.mark.skipif(not (shared_benchmarks_dir() / "bird" / "mini_dev").is_dir(), reason="shared BIRD data absent")
def test_bird_shaped_batch_at_8k_and_128k(bench):
    results, examples, _ = bench.bird_batch(shared_benchmarks_dir() / "bird")
    cases = build_cases(results, examples, "generate", pass_threshold=1.0, num_failing=32, num_passing=32)
    text, shown = local_renderer(bench).render(cases)
    assert len(shown) >= 12 and any(s.startswith("P") for s in shown)
    assert all("\nDiagnosis: " in blocks(text)[s] for s in shown if s.startswith("F"))
    assert "evidence: " in text  # BIRD's per-question hint is a case input, not a shared context
    _, shown = DefaultEvidenceRenderer(context_window=128_000).render(cases)
    assert len(shown) == 64


@needs_spider
def test_128k_reflector_sees_the_papers_32_plus_32(cases):
    lm = dspy.LM("openai/gpt-4o-mini")  # constructed, never called: its window comes from litellm's table
    assert context_window_of(lm) == 128_000
    for renderer in (DefaultEvidenceRenderer(reflection_lm=lm), DefaultEvidenceRenderer(context_window=128_000)):
        text, shown = renderer.render(cases)
        assert sum(s.startswith("F") for s in shown) == 32 and sum(s.startswith("P") for s in shown) == 32
        assert all("Diagnosis: " in blocks(text)[c.case_id] for c in cases if not c.passed)


@needs_spider
def test_each_shared_schema_is_shown_once_per_group(cases):
    text, shown = DefaultEvidenceRenderer(context_window=128_000).render(cases)
    by_db: dict[str, list[str]] = {}
    for c in cases:
        by_db.setdefault(c.inputs["db_id"], []).append(c.case_id)
    assert text.count("## Context ") == len(by_db)
    for c in cases:
        first_table = c.inputs["db_schema"].splitlines()[0]
        assert text.count(first_table) == 1, first_table
        assert "db_schema" not in blocks(text)[c.case_id]
    for db_id, ids in by_db.items():
        head = next(ln for ln in text.splitlines() if ln.startswith("## Context ") and f"(db_id: {db_id})" in ln)
        assert head.endswith("shared by case(s) " + ", ".join(i for i in shown if i in ids))


@needs_spider
def test_the_step_inputs_that_repeat_the_example_are_not_rendered_again(batch, cases):
    results, examples, _ = batch
    text, _ = DefaultEvidenceRenderer(context_window=128_000).render(cases)
    assert "Inputs to this step" not in text and all(c.predictor_inputs == {} for c in cases)
    for c in cases:
        assert text.count("question: " + c.inputs["question"]) == 1
        assert "db_path" not in blocks(text)[c.case_id] and "db_id:" not in blocks(text)[c.case_id]
    # a step input the example does not hold (an intermediate field) is still shown, once
    r = results[0]
    extra = RolloutResult(r.example_id, r.score, r.feedback, r.outputs,
                          {"generate": [{"inputs": {**r.traces["generate"][0]["inputs"], "plan": "join the tables"},
                                         "outputs": r.outputs}]})
    (case,) = build_cases([extra], examples, "generate", pass_threshold=1.0, num_failing=1, num_passing=1, diagnose=False)
    assert case.predictor_inputs == {"plan": "join the tables"}
    # a schema cut by the rollout trace's 4000-character cap is still the example's schema
    long = "CREATE TABLE t (" + ", ".join(f"c{i} INTEGER" for i in range(800)) + ");"
    ex = dspy.Example(question="q?", db_schema=long, db_id="x", db_path="/nonexistent.sqlite").with_inputs(
        "question", "db_schema", "db_id", "db_path")
    from dspy_hero.optimizer.rollout import _fields

    cut = RolloutResult("e", 1.0, "ok", {"sql": "SELECT 1"},
                        {"generate": [{"inputs": _fields({"question": "q?", "db_schema": long}), "outputs": {"sql": "SELECT 1"}}]})
    assert len(cut.traces["generate"][0]["inputs"]["db_schema"]) < len(long)
    (case,) = build_cases([cut], {"e": ex}, "generate", pass_threshold=1.0, num_failing=1, num_passing=1)
    assert case.predictor_inputs == {}


@needs_spider
def test_counted_categories_head_the_evidence_and_cite_only_shown_cases(bench, cases):
    text, shown = local_renderer(bench).render(cases)
    failing = [c for c in cases if not c.passed]
    head = text.split("\n\n", 1)[0].splitlines()
    assert head[0] == "## Failure patterns found by program analysis (over 32 failing case(s))"
    counts = count_categories([(c.case_id, c.diagnosis.label_free_only()) for c in failing])
    top = counts[0]
    assert head[1].startswith(f"- {top.count} of 32 failing case(s): {top.category.describe()} [{top.category.value}]")
    cited = set(re.findall(r"\b[FP]\d+\b", "\n".join(head[1:])))
    assert cited and cited <= set(shown)
    # the top pattern is the one the batch was built around: a column that no (or not that) table has
    assert top.category in (Category.UNKNOWN_COLUMN, Category.COLUMN_NOT_IN_TABLE)


@needs_spider
def test_training_references_are_shown_only_when_asked_for_on_both_sides(batch, cases):
    results, examples, _ = batch
    plain, _ = DefaultEvidenceRenderer(context_window=128_000).render(cases)
    ref_names = [c.value for c in Category if c.from_reference]
    assert "Reference program" not in plain and not any(n in plain for n in ref_names)
    assert all(c.reference is None for c in cases)
    gold = {ex_id: ex.gold_sql for ex_id, ex in examples.items()}
    assert not any(g in plain for g in gold.values() if g not in {c.program["sql"] for c in cases})
    ref_cases = build_cases(results, examples, "generate", pass_threshold=1.0, num_failing=32, num_passing=32,
                            training_references=True)
    hidden, _ = DefaultEvidenceRenderer(context_window=128_000).render(ref_cases)  # renderer not asked: stripped
    assert "Reference program" not in hidden and not any(n in hidden for n in ref_names)
    shown, _ = DefaultEvidenceRenderer(context_window=128_000, training_references=True).render(ref_cases)
    assert shown.count("Reference program (training case): ") == 32
    assert any(n in shown for n in ref_names)
    f1 = next(c for c in ref_cases if c.case_id == "F1")
    assert f1.reference == gold[f1.example_id] and f1.to_dict()["diagnosis"]["facts"]
    assert "reference" not in f1.to_dict() and f1.to_dict(with_labels=True)["reference"] == f1.reference


@needs_spider
def test_failure_only_shows_no_passing_case(batch):
    results, examples, _ = batch
    cases = build_cases(results, examples, "generate", pass_threshold=1.0, num_failing=32, num_passing=32,
                        failure_only=True)
    assert cases and all(not c.passed for c in cases)
    _, shown = DefaultEvidenceRenderer(context_window=128_000).render(cases)
    assert shown and all(s.startswith("F") for s in shown)


def test_budget_follows_the_context_window_and_an_explicit_budget_wins(caplog):
    assert evidence_budget(8192, 1024) == int((8192 - 1024 - 1500) * 0.8)
    assert evidence_budget(128_000, 4000) == 60_000  # capped
    assert evidence_budget(4096, 4096) < evidence_budget(4096, 512)
    assert DefaultEvidenceRenderer(3000, context_window=128_000).budget() == 3000
    assert DefaultEvidenceRenderer(context_window=8192, max_output_tokens=1024).budget() == evidence_budget(8192, 1024)
    assert context_window_of(dspy.LM("openai/some-local-model", context_window=32_768)) == 32_768
    assert context_window_of(dspy.LM("openai/not-a-mapped-model-xyz")) is None
    with caplog.at_level(logging.WARNING, logger="dspy_hero.optimizer"):
        budget = DefaultEvidenceRenderer(reflection_lm=dspy.LM("openai/not-a-mapped-model-xyz")).budget()
    assert budget == evidence_budget(8192, None) and "context window" in caplog.text
    with dspy.context(lm=dspy.LM("openai/gpt-4o-mini")):  # no reflection_lm given: the configured LM
        assert DefaultEvidenceRenderer().budget() == 60_000


def test_a_failing_diagnosis_is_reported_on_the_case_not_raised(caplog):
    class Broken:
        def diagnose(self, *a, **k):
            raise RuntimeError("boom")

    case = Case("F1", "e1", False, 0.0, {"question": "q"}, {"sql": "SELECT 1"}, "fb", language="sql")
    with caplog.at_level(logging.WARNING, logger="dspy_hero.optimizer"):
        d = diagnose_case(case, Broken())
    assert isinstance(d, Diagnosis) and d.errors == ("diagnosis failed: RuntimeError: boom",)
    assert "diagnosis of case F1" in caplog.text


def test_one_case_always_shows_and_fields_are_cut():
    big = Case("F1", "e", False, 0.0, {"question": "word " * 2000}, {"sql": "SELECT 1"}, "fb")
    text, shown = DefaultEvidenceRenderer(token_budget=100, max_field_chars=100).render([big])
    assert shown == ["F1"] and len(text) <= 400


def _ctx_case(cid: str, db: int) -> Case:
    schema = f"CREATE TABLE t{db} (" + ", ".join(f"col{db}_{i} INTEGER" for i in range(40)) + ");"
    return Case(cid, cid.lower(), cid.startswith("P"), float(cid.startswith("P")),
                {"question": f"question {cid}?", "db_schema": schema, "db_id": f"db{db}"}, {"sql": "SELECT 1"}, "fb")


def test_when_the_budget_binds_cases_of_shown_contexts_come_first():
    cases = [_ctx_case(f"F{i}", i % 4) for i in range(1, 9)] + [_ctx_case(f"P{i}", (i + 1) % 4) for i in range(1, 9)]
    everything = DefaultEvidenceRenderer(token_budget=10**6)
    text, shown = everything.render(cases)
    assert shown[:4] == ["F1", "P1", "F2", "P2"] and len(shown) == 16 and text.count("## Context ") == 4
    tight = DefaultEvidenceRenderer(token_budget=900)
    text, shown = tight.render(cases)
    contexts = text.count("## Context ")
    assert contexts < 4 and len(shown) >= 8, (contexts, shown)
    assert shown[:4] == ["F1", "P4", "F5", "P8"]  # F1 opens db1; its other cases follow before db2 opens
    assert shown[0] == "F1" and {s[0] for s in shown} == {"F", "P"}
    # without the preference, the same budget opens a context per case and shows fewer
    in_order = [c for i in range(8) for c in (cases[i], cases[8 + i])]
    cost = 0
    count = 0
    for c in in_order:
        block = approx_tokens(tight._block(c, None, [])) + approx_tokens(c.inputs["db_schema"])
        if cost + block > 900:
            break
        cost, count = cost + block, count + 1
    assert count < len(shown)
