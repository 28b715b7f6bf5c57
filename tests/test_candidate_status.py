"""Candidate statuses are an enum with the reason apart; result JSON keeps its plain words and old
files (reason after a colon in the status) still load."""

from __future__ import annotations

import json

import pytest

from dspy_hero.optimizer.acceptance import Decision
from dspy_hero.optimizer.result import CandidateRecord, CandidateStatus, HeroResult, RoundRecord


def _record(**kw) -> CandidateRecord:
    return CandidateRecord("r1c1", "edit", "add rule", "instr", ["c1"], **kw)


def test_status_and_reason_round_trip_through_result_json(tmp_path):
    dropped, adopted = _record(), _record()
    dropped.mark(CandidateStatus.DROPPED, "not a rule: reads as code")
    adopted.mark(CandidateStatus.ADOPTED)
    res = HeroResult(rounds=[RoundRecord(1, "generate", candidates=[dropped, adopted])])
    res.save_json(tmp_path / "r.json")
    raw = json.loads((tmp_path / "r.json").read_text())
    assert [c["status"] for c in raw["rounds"][0]["candidates"]] == ["dropped", "adopted"]
    assert raw["rounds"][0]["candidates"][0]["reason"] == "not a rule: reads as code"
    back = HeroResult.load_json(tmp_path / "r.json").rounds[0].candidates
    assert [c.status for c in back] == [CandidateStatus.DROPPED, CandidateStatus.ADOPTED]
    assert all(type(c.status) is CandidateStatus for c in back)
    assert back[0].reason == "not a rule: reads as code" and back[1].reason == ""


def test_old_result_files_with_reasons_in_the_status_load():
    old = {"candidate_id": "r2c1", "kind": "edit", "edit": "e", "instructions": "i",
           "status": "duplicate: already rejected against the current prompt",
           "decision": {"candidate_id": "r2c1", "accepted": False, "fixes": 0, "breaks": 1, "n": 4, "reason": "r"}}
    rec = CandidateRecord.from_dict(old)
    assert rec.status is CandidateStatus.DUPLICATE and rec.reason == "already rejected against the current prompt"
    assert isinstance(rec.decision, Decision)
    assert CandidateRecord.from_dict({**old, "status": "", "decision": None}).status is CandidateStatus.PROPOSED
    with pytest.raises(ValueError):
        CandidateRecord.from_dict({**old, "status": "maybe"})
