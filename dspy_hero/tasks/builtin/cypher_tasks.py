"""The built-in text-to-Cypher task: 30 questions with gold Cypher over the generated movie graph.

Questions cover single- and multi-hop MATCH patterns, aggregation with WITH filtering, ORDER BY/LIMIT,
OPTIONAL MATCH, DISTINCT, relationship-type alternation, pattern predicates and variable-length paths
of at most two hops. Gold queries use only Cypher that FalkorDB and Neo4j both accept.

Examples: ``question``, ``graph_schema`` (inputs), ``graph`` (the graph name), ``graph_source`` (the
Cypher script the engine loads) | ``gold_cypher``. Split: one graph, so questions are split at the
question level: a seeded order of question ids, the last `test_fraction` held out.
"""

from __future__ import annotations

from pathlib import Path

import dspy

from dspy_hero.tasks.base import Task
from dspy_hero.tasks.builtin.cypher_data import GRAPH_NAME, GRAPH_SCHEMA, ensure_graph
from dspy_hero.tasks.splits import split_by_fraction

INPUTS = ("graph_schema", "question")  # shared schema first: its KV is reused across questions
# Environment references are inputs too, so dspy.Evaluate hands them to HERO-T; the program
# itself shows the LM only INPUTS (see dspy_hero.metrics.base).
ENV_INPUTS = ("graph", "graph_source")

# (question, gold Cypher). Ids are "movies-<nn>" in this order; never reorder, only append.
QUESTIONS: tuple[tuple[str, str], ...] = (
    ("How many movies were released after 2010?",
     "MATCH (m:Movie) WHERE m.released > 2010 RETURN count(m)"),
    ("Which movies did Victoria King direct? Return their titles.",
     "MATCH (:Person {name: 'Victoria King'})-[:DIRECTED]->(m:Movie) RETURN m.title"),
    ("Who acted in Northern Signal? Return the actors' names.",
     "MATCH (p:Person)-[:ACTED_IN]->(:Movie {title: 'Northern Signal'}) RETURN p.name"),
    ("Which person has acted in the most movies? Return the name and the number of movies.",
     "MATCH (p:Person)-[:ACTED_IN]->(m:Movie) RETURN p.name, count(m) AS movies ORDER BY movies DESC LIMIT 1"),
    ("What is the average movie rating in each genre? Return the genre name and the average rating, highest "
     "average first.",
     "MATCH (m:Movie)-[:IN_GENRE]->(g:Genre) RETURN g.name, avg(m.rating) AS rating ORDER BY rating DESC"),
    ("Which Sci-Fi movies have a rating above 7.5? Return their titles and ratings.",
     "MATCH (m:Movie)-[:IN_GENRE]->(:Genre {name: 'Sci-Fi'}) WHERE m.rating > 7.5 RETURN m.title, m.rating"),
    ("Which people acted in a movie that they also directed? Return the person's name and the movie title.",
     "MATCH (p:Person)-[:DIRECTED]->(m:Movie)<-[:ACTED_IN]-(p) RETURN p.name, m.title"),
    ("Who has acted in a movie together with Amelia Nguyen? Return each co-actor's name once.",
     "MATCH (:Person {name: 'Amelia Nguyen'})-[:ACTED_IN]->(m:Movie)<-[:ACTED_IN]-(co:Person) "
     "RETURN DISTINCT co.name"),
    ("Which studios produced more than 8 movies? Return the studio name and its number of movies.",
     "MATCH (s:Studio)-[:PRODUCED]->(m:Movie) WITH s, count(m) AS movies WHERE movies > 8 RETURN s.name, movies"),
    ("For every studio, how many Horror movies did it produce? Include studios that produced none, with 0.",
     "MATCH (s:Studio) OPTIONAL MATCH (s)-[:PRODUCED]->(m:Movie)-[:IN_GENRE]->(:Genre {name: 'Horror'}) "
     "RETURN s.name, count(m)"),
    ("Who is the oldest person (earliest birth year) in the cast of Northern Signal? Return the name and birth "
     "year.",
     "MATCH (p:Person)-[:ACTED_IN]->(:Movie {title: 'Northern Signal'}) RETURN p.name, p.born ORDER BY p.born LIMIT 1"),
    ("How many movies were released in each decade? Return the decade as its first year (for example 1990) and "
     "the number of movies, in chronological order.",
     "MATCH (m:Movie) RETURN m.released - m.released % 10 AS decade, count(m) ORDER BY decade"),
    ("Which movies are the sequel of a sequel, that is, two SEQUEL_OF steps away from an original? Return their "
     "titles.",
     "MATCH (m:Movie)-[:SEQUEL_OF*2]->(:Movie) RETURN m.title"),
    ("Which people can be reached from Owen Clark by following one or two FOLLOWS relationships? Return each "
     "name once, not including Owen Clark.",
     "MATCH (p:Person {name: 'Owen Clark'})-[:FOLLOWS*1..2]->(q:Person) WHERE q <> p RETURN DISTINCT q.name"),
    ("Which actors have only appeared in movies released in 2000 or later? Return their names.",
     "MATCH (p:Person)-[:ACTED_IN]->(m:Movie) WITH p, min(m.released) AS first WHERE first >= 2000 RETURN p.name"),
    ("Which other movies share at least one genre with The Glass Detective? Return each title once.",
     "MATCH (:Movie {title: 'The Glass Detective'})-[:IN_GENRE]->(:Genre)<-[:IN_GENRE]-(o:Movie) "
     "WHERE o.title <> 'The Glass Detective' RETURN DISTINCT o.title"),
    ("Which writers have also acted in at least one movie? Return their names.",
     "MATCH (p:Person)-[:WROTE]->(:Movie) WHERE (p)-[:ACTED_IN]->(:Movie) RETURN DISTINCT p.name"),
    ("What is the total runtime in minutes of all movies produced by Studio Kestrel?",
     "MATCH (:Studio {name: 'Studio Kestrel'})-[:PRODUCED]->(m:Movie) RETURN sum(m.runtime)"),
    ("Which studio was founded first? Return its name and country.",
     "MATCH (s:Studio) RETURN s.name, s.country ORDER BY s.founded LIMIT 1"),
    ("Which genres have no movie rated below 6? Return the genre names.",
     "MATCH (g:Genre)<-[:IN_GENRE]-(m:Movie) WITH g, min(m.rating) AS lowest WHERE lowest >= 6 RETURN g.name"),
    ("What role did Levi Johnson play in Northern Signal?",
     "MATCH (:Person {name: 'Levi Johnson'})-[r:ACTED_IN]->(:Movie {title: 'Northern Signal'}) RETURN r.role"),
    ("What was the average age of the Northern Signal cast in the year the movie was released (release year "
     "minus birth year)?",
     "MATCH (p:Person)-[:ACTED_IN]->(m:Movie {title: 'Northern Signal'}) RETURN avg(m.released - p.born)"),
    ("Which movies have more than 6 actors? Return the title and the number of actors.",
     "MATCH (p:Person)-[:ACTED_IN]->(m:Movie) WITH m, count(p) AS cast WHERE cast > 6 RETURN m.title, cast"),
    ("Which directors were born in the 1960s? Return their names and birth years.",
     "MATCH (p:Person)-[:DIRECTED]->(:Movie) WHERE p.born >= 1960 AND p.born < 1970 RETURN DISTINCT p.name, p.born"),
    ("How many studios are there in each country? Return the country and the number of studios.",
     "MATCH (s:Studio) RETURN s.country, count(s)"),
    ("Who directed the highest-rated movie? Return the movie title, its rating and the director's name.",
     "MATCH (d:Person)-[:DIRECTED]->(m:Movie) RETURN m.title, m.rating, d.name ORDER BY m.rating DESC LIMIT 1"),
    ("Which actors have appeared in movies of at least 7 different genres? Return the name and the number of "
     "genres.",
     "MATCH (p:Person)-[:ACTED_IN]->(:Movie)-[:IN_GENRE]->(g:Genre) WITH p, count(DISTINCT g) AS genres "
     "WHERE genres >= 7 RETURN p.name, genres"),
    ("How many different people worked on Deep Orbit as an actor, director or writer?",
     "MATCH (p:Person)-[:ACTED_IN|DIRECTED|WROTE]->(:Movie {title: 'Deep Orbit'}) RETURN count(DISTINCT p)"),
    ("Which pairs of people follow each other? Return both names, each pair once with the alphabetically first "
     "name first.",
     "MATCH (a:Person)-[:FOLLOWS]->(b:Person)-[:FOLLOWS]->(a) WHERE a.name < b.name RETURN a.name, b.name"),
    ("List the Deep Orbit franchise: Deep Orbit itself and every movie that is a sequel of it, directly or "
     "through another sequel, with release years, in release order.",
     "MATCH (m:Movie)-[:SEQUEL_OF*0..2]->(:Movie {title: 'Deep Orbit'}) RETURN m.title, m.released ORDER BY m.released"),
)


def cypher_examples(directory: Path | None = None) -> list[dspy.Example]:
    """All built-in Cypher examples (graph files written on demand), in the order of `QUESTIONS`."""
    files = ensure_graph(directory)
    return [
        dspy.Example(
            example_id=f"movies-{i:02d}",
            question=question,
            graph_schema=GRAPH_SCHEMA,
            graph=GRAPH_NAME,
            graph_source=str(files.script),
            gold_cypher=gold,
        ).with_inputs(*INPUTS, *ENV_INPUTS)
        for i, (question, gold) in enumerate(QUESTIONS, 1)
    ]


def builtin_cypher_task(
    split_seed: int = 0, test_fraction: float = 1 / 3, directory: Path | None = None, engine=None, **_: object
) -> Task:
    """The built-in Cypher Task (CypherBench execution accuracy on the embedded FalkorDB by default).

    `engine` (an executor such as `Neo4jExecutor`) is passed to the metric; None lets the metric start
    its default engine.
    """
    from dspy_hero.metrics.cypher import cypher_execution_metric
    from dspy_hero.tasks.builtin.task_builder import make_task

    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    examples = cypher_examples(directory)
    train, test = split_by_fraction(examples, 1.0 - test_fraction, seed=split_seed)
    note = (
        f"builtin-cypher: {len(examples)} questions over one generated movie graph ({GRAPH_NAME}); a seeded order "
        f"of question ids (seed {split_seed}) holds out {len(test)} for test, {len(train)} train (same graph on "
        "both sides). Semantics: CypherBench execution accuracy."
    )
    return make_task(
        name="builtin-cypher", language="cypher", train=train, test=test,
        metric=cypher_execution_metric(engine=engine), inputs=INPUTS, group_key=None, split_note=note,
        environment_options={"engine": engine} if engine is not None else None,
    )
