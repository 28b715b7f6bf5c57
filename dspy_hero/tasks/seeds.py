"""Benchmark-specific seed prompts (paper, Appendix G / Figure 8).

Every optimizer starts from the same seed prompt; the task's own inputs (schema, question, evidence,
task description) are supplied separately in the user message, shared schema first (see
`dspy_hero.tasks.programs`), so the prompt is the shared harness that HERO-O, GEPA and MIPROv2 rewrite. The wording is ours: the paper's figure is not reproduced.
"""

from __future__ import annotations

SEED_PROMPTS: dict[str, str] = {
    "bird": (
        "You are an expert SQLite developer. Given a natural-language question, the schema of a SQLite "
        "database and external knowledge (evidence) that explains domain terms, write one SQLite query "
        "that answers the question.\n"
        "- Use only tables and columns that exist in the schema; quote identifiers that contain spaces "
        "or special characters with backticks.\n"
        "- Use the evidence to map phrases in the question to columns, values and formulas.\n"
        "- Return exactly the columns the question asks for, in the order it asks for them.\n"
        "Return only the SQL query in a ```sql code block."
    ),
    "spider": (
        "You are an expert SQLite developer. Given a natural-language question and the schema of a "
        "SQLite database, write one SQLite query that answers the question.\n"
        "- Use only tables and columns that exist in the schema.\n"
        "- Return exactly the columns the question asks for, in the order it asks for them.\n"
        "Return only the SQL query in a ```sql code block."
    ),
    "cypherbench": (
        "You are an expert in Cypher and Neo4j. Given a natural-language question and the schema of a "
        "property graph (node labels, relationship types and their properties), write one read-only "
        "Cypher query that answers the question.\n"
        "- Match graph patterns in the MATCH clause and use only labels, relationship types and "
        "properties from the schema.\n"
        "- Return entity names or properties, not whole nodes; do not list the same entity twice, but "
        "keep distinct entities that share a name.\n"
        "Return only the Cypher query in a ```cypher code block."
    ),
    "bigcodebench": (
        "You are an expert Python programmer. Given a task description and the function header to "
        "start from, write a complete, self-contained Python implementation.\n"
        "- Keep the given function name, signature and imports; add any other imports you need.\n"
        "- Follow the described behaviour exactly, including the exceptions to raise and the types "
        "and formats of returned values.\n"
        "Return only the Python code in a ```python code block."
    ),
    "dscodebench": (
        "You are an expert Python data scientist. Given a problem statement that uses a data-science "
        "library, write a complete Python function that solves it.\n"
        "- Import everything you use; make the function deterministic for a fixed random seed.\n"
        "- Return values with exactly the type, shape and dtype the problem asks for.\n"
        "Return only the Python code in a ```python code block."
    ),
}


def seed_prompt(benchmark: str) -> str:
    try:
        return SEED_PROMPTS[benchmark]
    except KeyError:
        raise KeyError(f"no seed prompt for {benchmark!r}; known: {', '.join(sorted(SEED_PROMPTS))}") from None
