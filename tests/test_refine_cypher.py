"""HeroRefine on the embedded Cypher engine (a real FalkorDB server), with scripted LMs."""

from __future__ import annotations

import functools

import dspy
import pytest

cypher = pytest.importorskip("dspy_hero.execution.falkordb_executor", reason="dspy_hero.execution.falkordb_executor (Cypher helper) missing")

from refine_scripts import RoleScript

from dspy_hero.execution.environments import environment_for
from dspy_hero.refine.demos import DemoBank
from dspy_hero.refine.module import HeroRefine
from dspy_hero.refine.trace import EXECUTE, PROBE, REVISE, STOP
from dspy_hero.tasks.programs import GenerateProgram

SCRIPT = """
CREATE (a:Person {name: 'Ann', born: 1970}), (b:Person {name: 'Bob', born: 1980}),
       (c:Person {name: 'Cid', born: 1990}),
       (m:Movie {title: 'Deep Orbit', released: 2001}), (n:Movie {title: 'Paper Dragons', released: 2010}),
       (a)-[:ACTED_IN]->(m), (b)-[:ACTED_IN]->(m), (c)-[:ACTED_IN]->(n), (b)-[:DIRECTED]->(n);
"""
WRONG = "MATCH (p:Person)-[:ACTS_IN]->(m:Movie {title: 'Deep Orbit'}) RETURN p.name"
FIXED = "MATCH (p:Person)-[:ACTED_IN]->(m:Movie {title: 'Deep Orbit'}) RETURN p.name"


@pytest.fixture(scope="module")
def engine():
    executor = cypher.FalkorDBExecutor(timeout_s=20.0)
    yield executor
    executor.close()


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("graph") / "films.cypher"
    path.write_text(SCRIPT, encoding="utf-8")
    return str(path)


def test_wrong_relationship_type_is_fixed_on_the_embedded_engine(engine, graph_file):
    script = RoleScript(
        generator={"cypher": WRONG},
        refiner=[{"action": "probe", "argument": "relationship_types"}, {"action": "revise", "argument": "use ACTED_IN"},
                 {"action": "stop", "argument": ""}],
        reviser={"reason": "[0] returned no rows; [1] the graph's type is ACTED_IN", "revised_program": FIXED},
        judge={"reason": "the probe lists ACTED_IN, not ACTS_IN", "supported": True},
    )
    gen = GenerateProgram("cypher", ["question", "graph_schema"])
    refiner = HeroRefine(gen, environment=functools.partial(environment_for, engine=engine))
    with dspy.context(lm=script.lm()):
        pred = refiner(question="Who acted in Deep Orbit?", graph_schema="(:Person)-[:ACTED_IN]->(:Movie)",
                       graph="films", graph_source=graph_file)
    trace = pred.refinement
    assert [s.action for s in trace.steps] == [EXECUTE, PROBE, REVISE, STOP]
    assert "returned 0 row(s)" in trace.steps[0].evidence
    # the empty result makes the program suspect; the revision returns rows: the checks accept it
    assert "SUSPECT" in trace.steps[0].evidence and trace.steps[2].verdict.stage == "checks"
    assert script.count("judge") == 0
    assert "ACTED_IN" in trace.steps[1].evidence and "DIRECTED" in trace.steps[1].evidence
    assert trace.steps[2].verdict.accepted and "2 row(s)" in trace.steps[2].verdict.execution
    assert pred.cypher == FIXED and pred.changed
    assert trace.stop_reason == "refiner stopped" and script.seen["refiner"][2].inputs["program"] == FIXED
    # the generator saw only its own inputs, never the environment references
    assert "graph_source" not in script.seen["generator"][0].inputs


def test_demo_bank_from_cypher_examples_verifies_on_the_engine(engine, graph_file):
    examples = [
        dspy.Example(question="Who directed Paper Dragons?", graph="films", graph_source=graph_file,
                     gold_cypher="MATCH (p:Person)-[:DIRECTED]->(:Movie {title: 'Paper Dragons'}) RETURN p.name"),
        dspy.Example(question="Broken", graph="films", graph_source=graph_file, gold_cypher="MATCH (n RETURN n"),
    ]
    bank = DemoBank.from_examples(examples, environment=functools.partial(environment_for, engine=engine))
    assert len(bank) == 1 and bank.demos[0].language == "cypher" and bank.stats["failed_execution"] == 1
