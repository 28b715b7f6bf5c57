"""Write the three example notebooks from the cell sources below, execute them, and save them with
their outputs and plots.

Why a generator: notebooks are JSON, which is hard to review in a diff; the cells live here as plain
Python strings, and the .ipynb files are regenerated from them and then run for real (scripted
simulation LM by default, see `first_cell`) in a fresh `python3` kernel, so a reader sees what the
code prints and draws. Run from the repository root:

    python notebooks/build_notebooks.py            # rewrite and execute notebooks/*.ipynb
    python notebooks/build_notebooks.py --check    # exit 1 if a committed notebook's cells are out of
                                                   # date or it was saved without a full execution

The three notebooks share one structure (task -> metric -> seed -> HERO-O -> HERO-T -> plots); only the
task-specific cells differ. They hold no assertions: tests/test_notebooks.py re-executes them and checks
what they computed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

EXECUTE_TIMEOUT_S = 300  # per cell

HERE = Path(__file__).resolve().parent

SIMULATION_NOTE = """\
**About the default LM.** With `LM = "simulated"` the task and reflection LMs are *scripted*
(`dspy_hero.bench.simulate`): the task LM returns the right program only when the instructions contain
the rule for each skill the gold program needs, and the reflection LM proposes such rules plus a tempting
harmful one. Every program is still executed for real ({engine}) and judged by the real metric, so
HERO-O and HERO-T run their real loops on real execution evidence (the scripted reviser repairs a
program whose execution error it is shown, unless the instance is marked hard). This is a simulation of HERO's
**mechanics** (what gets diagnosed, proposed, accepted, rejected, refined), and it runs in seconds.
**The accuracies below are not model results**; switch `LM` in the first code cell to measure a model."""


@dataclass(frozen=True)
class Spec:
    filename: str
    title: str
    language: str
    engine: str  # how programs are executed, in words
    loader: str  # builtin task loader name
    setup: str  # code: build `task` (and anything to close later)
    example: str  # code: pick `example`, define `right` and `wrong` programs
    gold: str  # code: `gold_of(ex)` -> the gold program text
    optimizer_budget: int
    optimizer_rounds: int
    optimizer_extra: str  # extra HeroOptimizer arguments (code lines, each ending with a comma)
    teardown: str  # code run in the last cell (closing engines)


def first_cell() -> str:
    return '''\
# Switch the LM here, in one line; everything below stays the same.
import dspy
import dspy_hero

LM = "simulated"  # scripted simulation of HERO's mechanics: seconds, no model, NOT model results
# LM = dspy_hero.local_lm(size="1.5b")  # the local model (llama.cpp; downloads the GGUF once)
# LM = dspy.LM("openai/gpt-4o-mini")  # a hosted model (needs OPENAI_API_KEY)'''


def intro(spec: Spec) -> str:
    return f"""\
# {spec.title}

This notebook walks through HERO on the built-in `{spec.loader}` task:

1. the task and one example;
2. the execution metric on a right and a wrong program ({spec.engine});
3. the seed program's evaluation;
4. **HERO-O** (`HeroOptimizer`): rounds, candidate rules, the paired accept/reject decisions with their
   fixes and breaks, the adopted rules and the fix-to-break ratio;
5. **HERO-T** (`HeroRefine`) around the optimized program, with one refinement trace;
6. plots: accuracy per method, cumulative fixes vs breaks per round.

Everything goes through the public API: `dspy.Evaluate` for the evaluations, `dspy_hero.HeroOptimizer`
and `dspy_hero.HeroRefine`. The outputs saved with this notebook come from running it as it stands.

{SIMULATION_NOTE.format(engine=spec.engine)}"""


LMS = '''\
import logging
import warnings

logging.getLogger("dspy").setLevel(logging.ERROR)
warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm's notebook widgets are not needed

def make_lms(lm, language, examples):
    """(task LM, reflection LM): the scripted pair for "simulated", else the one model for both."""
    if lm == "simulated":
        from dspy_hero.bench.simulate import simulated_lms

        task_lm, reflection_lm, _world = simulated_lms(examples, language=language)
        return task_lm, reflection_lm
    return lm, lm'''

TASK_VIEW = '''\
task_lm, reflection_lm = make_lms(LM, task.language, task.train + task.test)
dspy.configure(lm=task_lm)
print(task.split_note)
print(f"train: {len(task.train)}  test: {len(task.test)}  program inputs: {task.extras['program_inputs']}")'''

METRIC = '''\
def show_verdict(label, program):
    result = task.metric(example, dspy.Prediction(**{task.metric.prediction_field: program}))
    print(f"{label}: score {result.score}")
    print("  feedback:", (result.feedback or "").replace("\\n", "\\n  ")[:400])
    return result.score

right_score = show_verdict("right program", right)
wrong_score = show_verdict("wrong program", wrong)
error_score = show_verdict("failing program", failing)'''

GOLD_CHECK = '''\
# Every gold program must pass its own metric (a sanity check of the task and the executor).
gold_scores = [task.metric(ex, dspy.Prediction(**{task.metric.prediction_field: gold_of(ex)})).score for ex in task.test]
print(f"gold programs passing: {sum(s == 1 for s in gold_scores)}/{len(gold_scores)}")'''

SEED_EVAL = '''\
# dspy.Evaluate runs a program on every test example and averages the metric's scores (0-100). The
# examples mark their environment references (database / graph / prompt) as inputs too, so that HERO-T
# reaches the environment; the generator itself passes the LM only its signature's inputs.
test = task.test
evaluate = dspy.Evaluate(devset=test, metric=task.metric, num_threads=2, display_progress=False)

def pass_at_1(evaluation):
    """The share of examples with a full score (dspy.Evaluate's `score` is the mean score, in %)."""
    return sum(float(score) >= 1.0 for _, _, score in evaluation.results) / len(evaluation.results)

seed_program = task.make_program()
seed_eval = evaluate(seed_program)
print(f"seed: pass@1 {pass_at_1(seed_eval):.1%}, mean score {seed_eval.score:.1f}% on {len(test)} test examples")
print("seed instructions:", seed_program.generate.signature.instructions)'''

OPTIMIZE = '''\
from dspy_hero import HeroOptimizer

optimizer = HeroOptimizer(
    metric=task.metric,
    reflection_lm=reflection_lm,
    max_metric_calls={budget},   # rollouts HERO-O may spend (each one program run + metric)
    num_rounds={rounds},
    num_candidates=4,
    group_key=task.group_key,{extra}
    num_threads=2,
    seed=0,
    display_progress=False,
)
optimized = optimizer.compile(task.make_program(), trainset=task.train)
result = optimized.detailed_results
print(f"rollouts used: {{result.total_metric_calls}} of {{result.budget}}")
print("final instructions:\\n" + result.final_instructions["generate"])'''

DECISIONS = '''\
# Each round: a diagnosis of failing (F) and passing (P) cases, candidate rule edits, and a paired
# acceptance test on held-out training examples (fixes = newly passing, breaks = newly failing).
for rnd in result.rounds:
    print(f"round {rnd.round}: {len(rnd.diagnosis_cases)} diagnosis cases, adopted: {rnd.adopted_candidate_id}")
    for cand in rnd.candidates:
        d = cand.decision
        verdict = f"fixes {d.fixes}, breaks {d.breaks} -> {'ACCEPT' if d.accepted else 'reject'} ({d.reason})" if d else ""
        print(f"  {cand.candidate_id} [{cand.status}] {cand.edit[:90]}")
        if verdict:
            print(f"      {verdict}")

adopted_rules = [c.edit for r in result.rounds for c in r.candidates if c.candidate_id == r.adopted_candidate_id]
print("\\nadopted rules:", *adopted_rules, sep="\\n  ")
ratio = result.adopted_fix_break_ratio
print(f"adopted fixes:breaks = {result.adopted_fixes}:{result.adopted_breaks}"
      f" (ratio {'n/a' if ratio is None else f'{ratio:.1f}'}); over all tested candidates "
      f"{result.overall_fixes}:{result.overall_breaks}")'''

HERO_O_EVAL = '''\
hero_o_eval = evaluate(optimized)
print(f"HERO-O: pass@1 {pass_at_1(hero_o_eval):.1%}, mean score {hero_o_eval.score:.1f}%  "
      f"(seed {pass_at_1(seed_eval):.1%})")'''

REFINE = '''\
from dspy_hero import HeroRefine
from dspy_hero.refine import verified_demo_bank

# The task's environments (one per database or graph, on the metric's engine) serve refinement; the
# demos are training examples whose reference program the task metric verifies.
demos = verified_demo_bank(task.train, task.metric)
refined = HeroRefine(generator=optimized, environment=task.environment_for, demos=demos, budget=3)
hero_t_eval = evaluate(refined)
print(f"HERO-O + HERO-T: pass@1 {pass_at_1(hero_t_eval):.1%}, mean score {hero_t_eval.score:.1f}%")
print("refinement usage:", refined.usage.snapshot())'''

TRACE = '''\
# One refinement trace: prefer a test example that refinement turned from failing to passing.
hero_o_scores = [float(score) for _, _, score in hero_o_eval.results]
hero_t_scores = [float(score) for _, _, score in hero_t_eval.results]
failed_first = [i for i, score in enumerate(hero_o_scores) if score < 1] or [0]
changed = [i for i, (before, after) in enumerate(zip(hero_o_scores, hero_t_scores)) if after > before]
pick = (changed or failed_first)[0]
pred = refined(**test[pick].inputs())
trace = pred.refinement
print(f"example {pick}: {trace.actions_used} action(s), {trace.lm_calls} LM call(s), stop: {trace.stop_reason}")
for step in trace.steps:
    print(step.render()[:500])
    print("-" * 60)
print("changed:", trace.changed)
print("final program:\\n" + trace.final_program[:800])'''

PLOTS = '''\
%matplotlib inline
import matplotlib.pyplot as plt

evaluations = [seed_eval, hero_o_eval, hero_t_eval]
labels = ["seed", "HERO-O", "HERO-O + HERO-T"]
rounds = [entry["round"] for entry in result.cumulative_fix_break]
adopted_f = [entry["adopted_fixes"] for entry in result.cumulative_fix_break]
adopted_b = [entry["adopted_breaks"] for entry in result.cumulative_fix_break]
tested_f, tested_b, f_sum, b_sum = [], [], 0, 0
for rnd in result.rounds:
    f_sum += sum(c.decision.fixes for c in rnd.candidates if c.decision)
    b_sum += sum(c.decision.breaks for c in rnd.candidates if c.decision)
    tested_f.append(f_sum)
    tested_b.append(b_sum)

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
values = [100 * pass_at_1(e) for e in evaluations]
bars = ax1.bar(labels, values, color=["#9aa5b1", "#3b7dd8", "#1f9e6e"])
for bar, value in zip(bars, values):
    ax1.text(bar.get_x() + bar.get_width() / 2, value + 1, f"{value:.0f}", ha="center")
ax1.set_ylim(0, 105)
ax1.set_ylabel("pass@1 on test (%)")
ax1.set_title("Accuracy per method" + (" (simulation)" if LM == "simulated" else ""))
ax2.plot(rounds, adopted_f, "o-", color="#1f9e6e", label="fixes (adopted)")
ax2.plot(rounds, adopted_b, "o-", color="#d8593b", label="breaks (adopted)")
ax2.plot([r.round for r in result.rounds], tested_f, "o--", color="#1f9e6e", alpha=0.5, label="fixes (all tested)")
ax2.plot([r.round for r in result.rounds], tested_b, "o--", color="#d8593b", alpha=0.5, label="breaks (all tested)")
ax2.set_xlabel("round")
ax2.set_ylabel("cumulative count")
ax2.set_title("HERO-O: cumulative fixes vs breaks")
ax2.legend(fontsize=8)
fig.tight_layout()
plt.show()'''

SUMMARY = '''\
SUMMARY = {label: round(pass_at_1(e), 4) for label, e in zip(labels, evaluations)}
print("pass@1 on the test split:", SUMMARY)
print(f"HERO-O: {len(result.rounds)} rounds, {result.total_metric_calls} of {result.budget} rollouts, "
      f"final prompt {result.final_entry_id}")'''


SQL = Spec(
    filename="01_quickstart_sql.ipynb",
    title="Quickstart: HERO on text-to-SQL",
    language="sql",
    engine="SQLite",
    loader="builtin-sql",
    setup='''\
from dspy_hero import load_task

task = load_task("builtin-sql")''',
    example='''\
example = next(ex for ex in task.train if ex.example_id == "music_store-02")
print("question:", example.question)
print("database:", example.db_id, "| schema (first lines):")
print("\\n".join(example.db_schema.splitlines()[:8]))
right = example.gold_sql
wrong = "SELECT name FROM artists"  # runs, but forgets the country filter
failing = "SELECT name FROM artist WHERE country = 'USA'"  # no such table
print("gold:", right)''',
    gold='''\
def gold_of(ex):
    return ex.gold_sql''',
    optimizer_budget=300,
    optimizer_rounds=5,
    optimizer_extra="",
    teardown="",
)

CYPHER = Spec(
    filename="02_cypher.ipynb",
    title="HERO on text-to-Cypher (embedded FalkorDB)",
    language="cypher",
    engine="the embedded FalkorDB engine",
    loader="builtin-cypher",
    setup='''\
from dspy_hero import FalkorDBExecutor, load_task

# One embedded engine for the metric and for HERO-T's environment; closed in the last cell.
engine = FalkorDBExecutor()
task = load_task("builtin-cypher", engine=engine)''',
    example='''\
example = next(ex for ex in task.train if ex.example_id == "movies-04")
print("question:", example.question)
print("graph:", example.graph, "| schema:")
print(example.graph_schema)
right = example.gold_cypher
wrong = right.replace("DESC", "ASC")  # runs, but picks the person with the fewest movies
failing = right.replace("RETURN", "RETRUN")  # a syntax error
print("gold:", right)''',
    gold='''\
def gold_of(ex):
    return ex.gold_cypher''',
    optimizer_budget=300,
    optimizer_rounds=5,
    optimizer_extra="""
    # Only 20 training examples: too few for a separate selection pool, so split them into diagnosis
    # and update pools; HERO-O then picks the final prompt on the update pool (and says so in warnings).
    pool_fractions=(0.5, 0.5, 0.0),""",
    teardown='''\
# Stop the embedded engine (no server is left running after the notebook).
engine_pid = engine.pid
engine.close()
task.metric.close()
print(f"embedded engine stopped (pid {engine_pid}); alive: {engine.alive()}")''',
)

PYTHON = Spec(
    filename="03_python.ipynb",
    title="HERO on Python function tasks (sandboxed unit tests)",
    language="python",
    engine="the Python sandbox running each task's unit tests",
    loader="builtin-python",
    setup='''\
from dspy_hero import load_task
from dspy_hero.tasks.builtin.python_reference import reference_solution  # the task's gold solutions

task = load_task("builtin-python")''',
    example='''\
example = next(ex for ex in task.train if ex.entry_point == "parse_duration")
print(example.prompt)
right = reference_solution("parse_duration")
wrong = """\\
import re

def parse_duration(text: str) -> int:
    total = 0
    for amount, unit in re.findall(r"(\\\\d+)([hms])", text):
        total += int(amount) * {"h": 3600, "m": 60, "s": 1}[unit]
    return total
"""  # right on valid input, but misses the edge cases: no ValueError for "", "5x", ...
failing = right.replace("match.groups()", "match.group_list()")  # raises AttributeError
print("reference solution:\\n" + right)''',
    gold='''\
def gold_of(ex):
    return reference_solution(ex.entry_point)''',
    optimizer_budget=150,  # each rollout runs the unit tests in the sandbox (~0.1 s)
    optimizer_rounds=6,
    optimizer_extra="""
    # Only 20 training examples: too few for a separate selection pool, so split them into diagnosis
    # and update pools; HERO-O then picks the final prompt on the update pool (and says so in warnings).
    pool_fractions=(0.5, 0.5, 0.0),""",
    teardown="",
)

SPECS = (SQL, CYPHER, PYTHON)


def build(spec: Spec) -> nbformat.NotebookNode:
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    cells = [
        md(intro(spec)),
        code(first_cell()),
        code(LMS),
        md("## 1. The task and one example"),
        code(spec.setup),
        code(TASK_VIEW),
        code(spec.example),
        md(f"## 2. The metric on a right and a wrong program\n\nReal execution on {spec.engine}; "
           "feedback never reveals the expected answer."),
        code(METRIC),
        code(spec.gold + "\n\n" + GOLD_CHECK),
        md("## 3. The seed program, with `dspy.Evaluate`"),
        code(SEED_EVAL),
        md("## 4. HERO-O: execution-grounded prompt optimization\n\n"
           "`HeroOptimizer` is a DSPy optimizer (`compile(student, trainset=...)`); its record is in "
           "`optimized.detailed_results`."),
        code(OPTIMIZE.format(budget=spec.optimizer_budget, rounds=spec.optimizer_rounds, extra=spec.optimizer_extra)),
        code(DECISIONS),
        code(HERO_O_EVAL),
        md("## 5. HERO-T: test-time refinement\n\n`HeroRefine` wraps the optimized program; a revision "
           "replaces the program only when it runs cleanly and a judge finds it supported by the evidence."),
        code(REFINE),
        code(TRACE),
        md("## 6. Plots"),
        code(PLOTS),
        md("## 7. Summary"),
        code((spec.teardown + "\n\n" if spec.teardown else "") + SUMMARY),
    ]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    for i, cell in enumerate(nb.cells):  # stable ids keep regenerated files diff-free
        cell["id"] = f"{Path(spec.filename).stem[:2]}-{i:02d}"
    return nb


def execute(nb: nbformat.NotebookNode, cwd: Path, timeout_s: int = EXECUTE_TIMEOUT_S) -> nbformat.NotebookNode:
    """Run every cell in a fresh `python3` kernel (this interpreter, via ipykernel), in `cwd`; a cell
    that raises stops the run with its traceback (nbclient's CellExecutionError)."""
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=timeout_s, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def sources(nb: nbformat.NotebookNode) -> list[tuple[str, str, str]]:
    return [(cell.get("id", ""), cell.cell_type, cell.source) for cell in nb.cells]


def execution_problems(nb: nbformat.NotebookNode) -> list[str]:
    """Why a saved notebook is not a complete, clean execution of its cells (empty when it is)."""
    problems = []
    code = [c for c in nb.cells if c.cell_type == "code"]
    counts = [c.execution_count for c in code]
    if counts != list(range(1, len(code) + 1)):
        problems.append(f"execution counts {counts}: not one run of every cell in order")
    for i, cell in enumerate(code):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                problems.append(f"code cell {i} raised {out.get('ename')}: {out.get('evalue')}")
    if not any("image/png" in o.get("data", {}) for c in code for o in c.get("outputs", [])):
        problems.append("no plot in the outputs")
    return problems


def render(spec: Spec) -> str:
    """The notebook's cells, unexecuted (what --check compares the committed cells with)."""
    return nbformat.writes(build(spec)) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only check that the committed notebooks hold the current cells, executed")
    parser.add_argument("--out", type=Path, default=HERE, help="directory to write the notebooks into")
    args = parser.parse_args(argv)
    stale = []
    for spec in SPECS:
        path = args.out / spec.filename
        if args.check:
            saved = nbformat.read(path, as_version=4) if path.exists() else None
            if saved is None or sources(saved) != sources(build(spec)) or execution_problems(saved):
                stale.append(path.name)
            continue
        with tempfile.TemporaryDirectory() as cwd:  # whatever a cell writes stays out of the repository
            nb = execute(build(spec), Path(cwd))
        path.write_text(nbformat.writes(nb) + "\n")
    if stale:
        sys.stderr.write(f"out of date or not executed: {', '.join(stale)}; run python notebooks/build_notebooks.py\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
