"""benchmarks/target_table.py: issue 17's target (a) collected from compare.py results files.

The files are compare.py's own results format, written here by hand: the script reads figures, it
computes none, so what must hold is how runs are merged and how the target is judged.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load():
    if "target_table" in sys.modules:
        return sys.modules["target_table"]
    spec = importlib.util.spec_from_file_location("target_table", ROOT / "benchmarks" / "target_table.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["target_table"] = module
    spec.loader.exec_module(module)
    return module


def _delta(est, low, high, fixes=0, breaks=0):
    return {"estimate": est, "low": low, "high": high, "n": 4, "level": 0.95, "fixes": fixes, "breaks": breaks}


def _file(source, split, methods, seed_scores=(1, 0, 1, 0), task_lm="local/qwen2.5-coder-1.5b-instruct-q4_k_m"):
    ids = ["q0", "q1", "q2", "q3"]
    done = {"status": "done", "outcomes": [{"example_id": i, "score": s} for i, s in zip(ids, seed_scores)]}
    lms = {"task_lm": task_lm, "reflection_lm": "local/qwen2.5-coder-1.5b-instruct-q4_k_m"}
    return {"source": source, "meta": {"task": "spider", "split_seed": split, "budget": 300, "test_ids": ids, **lms},
            "methods": {"seed": done, **{m: {"status": "done"} for m in methods}},
            "summary": {"vs_seed": dict(methods)}}


def test_files_of_one_run_merge_and_the_target_is_judged_per_run_and_on_shared_runs():
    t = _load()
    runs = t.merge_runs([
        _file("a.json", 3, {"hero_o": _delta(0.25, 0.0, 0.5, 1, 0)}),
        _file("b.json", 3, {"gepa": _delta(0.5, 0.25, 0.75, 2, 0)}),  # a GEPA row added later to the same run
        # an exact tie (HERO-O returned the seed) is not below it
        _file("c.json", 1, {"hero_o": _delta(0.0, 0.0, 0.0), "mipro": _delta(-0.5, -0.75, -0.25, 0, 2)}),
    ])
    assert len(runs) == 2 and runs[0]["sources"] == ["a.json", "b.json"]
    result = t.table(runs)
    assert result["never_significantly_below_seed"] == {"hero_o": True, "gepa": True, "mipro": False}
    shared = result["mean_delta_on_shared_runs"]
    assert shared["hero_o_vs_gepa"] == {"runs": 1, "hero_o_mean": 0.25, "gepa_mean": 0.5, "hero_o_at_least": False}
    # means only over the runs both took part in: HERO-O's +25 on split 3 does not count against MIPROv2
    assert shared["hero_o_vs_mipro"] == {"runs": 1, "hero_o_mean": 0.0, "mipro_mean": -0.5, "hero_o_at_least": True}
    text = t.markdown(result)
    assert "mipro NO" in text and "+50.0 [+25.0, +75.0] 2/0" in text


def test_files_whose_seed_rows_disagree_are_not_merged_silently():
    t = _load()
    with pytest.raises(ValueError, match="seed row differs"):
        t.merge_runs([_file("a.json", 3, {}), _file("b.json", 3, {}, seed_scores=(1, 1, 1, 0))])


def test_a_run_with_another_task_lm_on_the_same_questions_is_its_own_run():
    t = _load()
    student = "local/qwen2.5-coder-0.5b-instruct-q4_k_m"
    runs = t.merge_runs([_file("a.json", 3, {"hero_o": _delta(0.0, 0.0, 0.0)}),
                         _file("ts.json", 3, {"hero_o": _delta(-0.25, -0.5, 0.0)}, seed_scores=(0, 0, 1, 0),
                               task_lm=student)])
    assert [r["sources"] for r in runs] == [["a.json"], ["ts.json"]]
    rows = t.table(runs)["rows"]
    assert [r["lms"] for r in rows] == ["1.5b", "task 0.5b / reflection 1.5b"]
    assert "| spider | task 0.5b / reflection 1.5b | 3 | 300 | 4 | not recorded |" in t.markdown(t.table(runs))


def test_a_re_run_with_later_code_on_the_same_questions_is_its_own_run():
    """Since compare.py records the code, the same split re-run later (other prompts, so another seed
    row) is a second run of the target, not a disagreement."""
    t = _load()
    later = _file("s26.json", 3, {"hero_o": _delta(0.25, 0.0, 0.5, 1, 0)}, seed_scores=(0, 0, 1, 0))
    later["meta"]["code"] = "abc1234"
    runs = t.merge_runs([_file("a.json", 3, {"hero_o": _delta(0.0, 0.0, 0.0)}), later])
    assert [r["sources"] for r in runs] == [["a.json"], ["s26.json"]]
    result = t.table(runs)
    assert [r["code"] for r in result["rows"]] == [None, "abc1234"]
    assert "| spider | 1.5b | 3 | 300 | 4 | abc1234 | +25.0 [+0.0, +50.0] 1/0 |" in t.markdown(result)
