"""CypherBench as a task: text-to-Cypher over property graphs, CypherBench execution semantics.

Official layout (the Hugging Face dataset repository ``megagonlabs/cypherbench`` cloned to ``<dir>``):
``test.json`` / ``train.json`` (``{qid, graph, nl_question, gold_cypher, ...}``),
``graphs/schemas/<graph>_schema.json`` (entities and relations with typed properties) and the graph
dumps under ``graphs/``. The shared copy has ``cypherbench_test_subset_192.json`` and the official
``graph_info.json`` (relation types with their endpoint labels, no property types) but no graphs.

Examples carry ``graph`` (the graph name) and, when a dump file for it is present, ``graph_source``
(its path) for the metric's engine to load; without either a loaded engine or a Neo4j server holding
the graph, the metric reports an environment error for every example (stated in the split note).
Split: the paper optimizes on TRAIN and evaluates on the fixed question-level TEST split (graphs may
overlap). Without TRAIN, the test questions are split at the question level (seeded).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import dspy

from dspy_hero.tasks.base import Task
from dspy_hero.tasks.benchmarks import build_task, read_json
from dspy_hero.tasks.hub import find_data_dir, load_hub_rows
from dspy_hero.tasks.splits import Split, cap, split_by_fraction, stable_key

INPUTS = ("question", "graph_schema", "graph", "graph_source")
PROGRAM_INPUTS = ("graph_schema", "question")  # shared schema first: its KV is reused
HUB_REPO = "megagonlabs/cypherbench"
_TEST_FILES = ("test.json", "benchmark/test.json", "cypherbench_test_subset_192.json")
_TRAIN_FILES = ("train.json", "benchmark/train.json")


def schema_text(schema: dict[str, Any]) -> str:
    """A compact, sorted rendering of an official ``<graph>_schema.json`` (name is always a property)."""
    lines = ["Node labels and properties:"]
    for ent in sorted(schema.get("entities", []), key=lambda e: e["label"]):
        props = {"name": "str", **(ent.get("properties") or {})}
        lines.append(f"  (:{ent['label']} {{{', '.join(f'{k}: {v}' for k, v in sorted(props.items()))}}})")
    lines.append("Relationship types:")
    for rel in sorted(schema.get("relations", []), key=lambda r: (r["label"], r["subj_label"], r["obj_label"])):
        props = rel.get("properties") or {}
        body = f" {{{', '.join(f'{k}: {v}' for k, v in sorted(props.items()))}}}" if props else ""
        lines.append(f"  (:{rel['subj_label']})-[:{rel['label']}{body}]->(:{rel['obj_label']})")
    return "\n".join(lines)


def graph_info_text(info: dict[str, Any]) -> str:
    """Schema text from ``graph_info.json`` (relations only: labels come from the relation variants)."""
    labels: set[str] = set()
    lines = []
    for rel in sorted(info.get("relations", []), key=lambda r: r["label"]):
        for variant in rel.get("variants", []):
            name, subj, obj = variant.split("#")
            labels.update((subj, obj))
            lines.append(f"  (:{subj})-[:{name}]->(:{obj})")
    head = ["Node labels (each has a `name` property): " + ", ".join(sorted(labels)), "Relationship types:"]
    return "\n".join(head + lines)


def graph_schemas(root: Path) -> tuple[dict[str, str], str]:
    """Graph name -> schema text, and which source it came from."""
    schema_dir = next((root / d for d in ("graphs/schemas", "benchmark/graphs/schemas") if (root / d).is_dir()), None)
    if schema_dir is not None:
        found = {p.name[: -len("_schema.json")]: schema_text(read_json(p)) for p in sorted(schema_dir.glob("*_schema.json"))}
        if found:
            return found, f"official schemas ({schema_dir})"
    info = next((root / f for f in ("graph_info.json", "official_configs/graph_info.json") if (root / f).is_file()), None)
    if info is not None:
        return {g: graph_info_text(v) for g, v in read_json(info).items()}, f"relation types only ({info}; property types absent)"
    return {}, "no schema files"


def graph_dump(root: Path, graph: str) -> Path | None:
    """A graph dump file for `graph` if the layout holds one (``graphs/**/<graph>*.{json,dump,cypher}``)."""
    for folder in ("graphs", "benchmark/graphs"):
        base = root / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob(f"{graph}*")):
            stem = path.name.split(".")[0]
            if (path.is_file() and "schemas" not in path.parts and (stem == graph or stem.startswith(graph + "_"))
                    and path.suffix in {".json", ".dump", ".cypher", ".gz"}):
                return path
    return None


def simplekg_to_graph(kg: dict[str, Any]) -> dict[str, Any]:
    """CypherBench's SimpleKG dump (``entities``/``relations``) as the engine's nodes/edges document.

    Nodes get their label and ``name`` plus their typed properties (what the official schemas list);
    relations keep their properties. Endpoints missing from the entity list are an error, not a drop.
    """
    nodes = [{"id": e["eid"], "labels": [e["label"]], "properties": {"name": e.get("name"), **(e.get("properties") or {})}}
             for e in kg.get("entities", [])]
    ids = {n["id"] for n in nodes}
    edges = []
    for r in kg.get("relations", []):
        for end in ("subj_id", "obj_id"):
            if r[end] not in ids:
                raise ValueError(f"SimpleKG relation {r.get('rid')!r}: {end} {r[end]!r} is not an entity")
        edges.append({"source": r["subj_id"], "target": r["obj_id"], "type": r["label"], "properties": r.get("properties") or {}})
    for n in nodes:
        n["properties"] = {k: v for k, v in n["properties"].items() if v is not None}
    return {"nodes": nodes, "edges": edges}


def _is_simplekg(path: Path) -> bool:
    with open(path, encoding="utf-8") as fh:
        head = fh.read(4096)
    return '"entities"' in head and '"nodes"' not in head


def engine_source(dump: Path, cache_dir: Path | None = None) -> Path:
    """A file the engine loads: the dump itself, or its SimpleKG conversion cached by (path, size, mtime)."""
    if dump.suffix != ".json" or not _is_simplekg(dump):
        return dump
    st = dump.stat()
    key = stable_key(f"{dump.resolve()}|{st.st_size}|{st.st_mtime_ns}", 0)[:16]
    base = cache_dir or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dspy-hero" / "cypherbench"
    target = base / f"{dump.name.split('.')[0]}-{key}.json"
    if not target.is_file():
        base.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(simplekg_to_graph(read_json(dump))), encoding="utf-8")
        os.replace(tmp, target)
    return target


def to_example(row: dict[str, Any], schemas: dict[str, str], root: Path | None,
               sources: dict[str, str] | None = None) -> dspy.Example:
    graph = row["graph"]
    dump = None
    if sources is not None and graph in sources:
        dump = sources[graph]
    elif root is not None:
        dump = graph_dump(root, graph)
    fields = {
        "example_id": f"cypherbench/{row.get('qid')}",
        "question": row.get("nl_question") or row["question"],
        "graph_schema": schemas.get(graph, ""),
        "graph": graph,
        "graph_source": str(dump) if dump else "",
        "gold_cypher": row["gold_cypher"],
    }
    return dspy.Example(**fields).with_inputs(*INPUTS)


def cypherbench_split(
    data_dir=None, split_seed: int = 0, limit: int | None = None, test_fraction: float = 0.5, engine: Any = None,
    cache_dir=None, **_: object
) -> Split:
    """CypherBench TRAIN/TEST when both are present, else a seeded question-level split of what is."""
    root = find_data_dir("cypherbench", data_dir)
    if root is not None:
        test_file = next((root / f for f in _TEST_FILES if (root / f).is_file()), None)
        if test_file is None:
            raise FileNotFoundError(f"cypherbench: none of {_TEST_FILES} under {root}")
        test_rows = read_json(test_file)
        train_file = next((root / f for f in _TRAIN_FILES if (root / f).is_file()), None)
        train_rows = read_json(train_file) if train_file else []
        schemas, schema_source = graph_schemas(root)
        source = str(test_file)
    else:
        test_rows = load_hub_rows("cypherbench", HUB_REPO, "train", data_files={"train": "test.json"})
        train_rows = load_hub_rows("cypherbench", HUB_REPO, "train", data_files={"train": "train.json"})
        schemas, schema_source, source = {}, "none (hub rows only; clone the dataset repo for schemas)", HUB_REPO
    if not isinstance(test_rows, list) or not test_rows:
        raise ValueError(f"cypherbench: no questions in {source}")
    sources: dict[str, str] = {}
    for graph in sorted({r["graph"] for r in [*test_rows, *train_rows]}) if root is not None else ():
        dump = graph_dump(root, graph)
        if dump is not None:
            sources[graph] = str(engine_source(dump, Path(cache_dir) if cache_dir else None))
    test_all = [to_example(r, schemas, root, sources) for r in test_rows]
    if train_rows:
        train = [to_example(r, schemas, root, sources) for r in train_rows]
        test = test_all
        how = f"paper split: TRAIN ({len(train)}) for optimization, question-level TEST ({len(test)}) for evaluation"
    else:
        train, test = split_by_fraction(test_all, 1.0 - test_fraction, seed=split_seed)
        how = (f"TRAIN absent, so the {len(test_all)} TEST questions of {source} are split at the question level "
               f"(seed {split_seed}, evaluation fraction {test_fraction}); graphs overlap across pools, as in the "
               "paper's question-level split")
    train, test = cap(train, limit, split_seed, "graph"), cap(test, limit, split_seed, "graph")
    with_dump = sorted({ex.graph for ex in train + test if ex.graph_source})
    note = (
        f"CypherBench: {how}. Optimization {len(train)}, evaluation {len(test)}"
        + (f", each pool capped at {limit}" if limit is not None else "")
        + f". Schemas: {schema_source}. Graph dumps present for: {', '.join(with_dump) or 'none'}"
        + ("" if with_dump else " (the metric needs a Neo4j server holding the graphs, see official neo4j_info.json,"
           " or graph dumps for the embedded engine; otherwise every execution is an environment error)")
        + ". Semantics: CypherBench EX (multiset, column permutation, order only with ORDER BY, 120 s timeout)."
    )

    return Split(train, test, note, {"source": source, "graphs_with_dump": with_dump, "schema_source": schema_source})


def load_cypherbench(
    data_dir=None, split_seed: int = 0, limit: int | None = None, test_fraction: float = 0.5, engine: Any = None,
    cache_dir=None, **_: object
) -> Task:
    """The CypherBench Task: the pools of `cypherbench_split`, the official metric and the paper-style seed program."""
    split = cypherbench_split(data_dir=data_dir, split_seed=split_seed, limit=limit, test_fraction=test_fraction,
                              engine=engine, cache_dir=cache_dir)

    def metric():
        from dspy_hero.metrics.cypher import cypher_execution_metric

        return cypher_execution_metric(engine=engine)

    return build_task(
        name="cypherbench", language="cypher", train=split.train, test=split.test, metric_factory=metric,
        program_inputs=PROGRAM_INPUTS, group_key="graph", split_note=split.note,
        extras=split.extras, environment_options={"engine": engine} if engine is not None else None,
    )

