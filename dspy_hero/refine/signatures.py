"""The DSPy signatures of HERO-T's four predictors.

Each is a separate predictor so its instruction can be optimized on its own (HeroOptimizer and GEPA
see them through `named_predictors()`). Every field is a string the refiner renders itself, which
keeps the prompts identical across SQL, Cypher and Python and lets small models answer in plain text.
"""

from __future__ import annotations

import dspy


class ChooseAction(dspy.Signature):
    """You are improving one generated program for the task below, using only evidence from running it
    in its environment and from verified examples of similar tasks. The expected answer is unknown:
    never guess it. Choose the single most useful next action:
    - diagnose: write down, in the argument, what the evidence shows is wrong or uncertain (no tool call);
    - probe: inspect the environment; the argument is the probe name, a colon, and its argument;
    - retrieve: fetch verified examples of similar tasks (argument: what to look for, may be empty);
    - revise: ask for a revised program (argument: the change the evidence calls for);
    - stop: the current program is consistent with all evidence, or nothing more can be learned.
    Prefer checking the schema or the data before revising, and stop early when the program already
    runs cleanly and nothing in the evidence questions it."""

    task: str = dspy.InputField(desc="the task inputs, as the program generator saw them")
    program: str = dspy.InputField(desc="the current program")
    evidence: str = dspy.InputField(desc="numbered evidence gathered so far, newest last")
    examples: str = dspy.InputField(desc="solved examples of other, similar tasks (patterns only; at most three)")
    actions: str = dspy.InputField(desc="the actions available now, and how many remain")
    action: str = dspy.OutputField(desc="one of: diagnose, probe, retrieve, revise, stop")
    argument: str = dspy.OutputField(desc="the action's argument (see the instructions)")


class SelectDemos(dspy.Signature):
    """Retrieved verified examples of other tasks are listed by number. Choose the ones whose
    solution pattern is most likely to help with the current task: at most three, fewer if only a
    few are relevant, none if none is."""

    task: str = dspy.InputField(desc="the current task inputs")
    candidates: str = dspy.InputField(desc="numbered candidate tasks")
    chosen: str = dspy.OutputField(desc="the chosen numbers, comma-separated (may be empty)")


class ReviseProgram(dspy.Signature):
    """Revise the current program so that it solves the task, changing only what the evidence shows
    to be wrong: wrong names, wrong values, errors, an empty or implausible result, or missing logic
    that the diagnosis, probes, execution results or verified examples reveal. Keep everything the
    evidence does not question. The revised program must differ from the current one and from every
    rejected revision (their rejection reasons say what to avoid), and must answer this task, not one
    of the examples. State the evidence behind each change in the reason, then give the complete
    revised program."""

    task: str = dspy.InputField(desc="the task inputs")
    program: str = dspy.InputField(desc="the current program")
    diagnosis: str = dspy.InputField(desc="programmatic facts about the current program's execution, one per line")
    evidence: str = dspy.InputField(desc="numbered evidence gathered so far")
    examples: str = dspy.InputField(desc="verified programs of other, similar tasks: reuse patterns, not answers")
    rejected: str = dspy.InputField(desc="earlier revisions the gate rejected, each with the reason")
    request: str = dspy.InputField(desc="what the refiner asked to change")
    reason: str = dspy.OutputField(desc="the evidence items that motivate each change")
    revised_program: str = dspy.OutputField(desc="the complete revised program")


class JudgeRevision(dspy.Signature):
    """Decide whether a proposed revision of a program is supported by the evidence. Supported means
    each change is motivated by something shown here (an error, a diagnosis line, a schema or data
    fact, a probe result, or a pattern in one of the verified examples) and the revision's own
    execution is consistent with the task. Changes that rest on guesses about the expected answer, or
    that alter parts the evidence does not question, are not supported. The revision already runs
    without error; that alone is not support."""

    task: str = dspy.InputField(desc="the task inputs")
    evidence: str = dspy.InputField(desc="numbered evidence gathered so far, and the diagnosis of the current program")
    examples: str = dspy.InputField(desc="the verified examples (other tasks, with their programs) the reviser was shown")
    old_program: str = dspy.InputField(desc="the current program")
    new_program: str = dspy.InputField(desc="the proposed revision")
    claimed_reason: str = dspy.InputField(desc="the reviser's stated reason")
    new_execution: str = dspy.InputField(desc="what running the proposed revision showed")
    reason: str = dspy.OutputField(desc="which evidence supports or contradicts the change")
    supported: bool = dspy.OutputField(desc="True only if the change is supported by the evidence")
