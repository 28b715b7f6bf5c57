"""Evidence: passing and failing cases of the current program, rendered for the reflection LM.

Why both: failing cases say what to revise, passing cases say what a revision must preserve (the
paper's ablation: passing + failing cases give a higher fix-to-break ratio than failures alone).

What the renderer does, and why:
- **Counted failure patterns first.** Every failing case carries a programmatic, LM-free diagnosis
  (`dspy_hero.diagnosis`: "column `name` is not in `singer_in_concert`; tables that have it: ...").
  Their categories are counted across the failing cases and listed at the top, so even a small
  reflector is asked to phrase a rule for a pattern that is already stated rather than to find one.
- **Shared context once.** A database schema, a graph schema or a task prompt that several cases
  share is shown once per group of cases ("Context A"), not once per case: with a schema per case a
  BIRD-sized diagnosis showed 3 failing + 2 passing cases of the 32 + 32 asked for.
- **Cases before contexts when the budget binds.** When not every case fits, each turn of the
  failing/passing alternation takes a case whose context is already shown before one that needs a
  new schema (the failure-pattern counts still cover every failing case).
- **A budget sized from the reflection LM.** By default the token budget follows the reflection
  LM's context window (the local server's ``n_ctx``, litellm's model table, or a `context_window`
  you give), so a 128K-context model sees the paper's 32 + 32 cases and the local 8K model as many as
  fit; an explicit `token_budget` overrides. Failing and passing cases are interleaved (F1, P1, F2,
  ...) so both kinds stay represented when the budget binds; cases that do not fit are left out
  (the returned ids say which were shown).
- **Label-free by default.** `training_references=True` (on both `build_cases` and the renderer: an
  explicit, double opt-in) adds the reference program of these TRAINING cases and its structural
  diff to the diagnosis. It must never be used at test time or in HERO-T.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

import dspy

from dspy_hero.diagnosis import CategoryCount, Diagnoser, Diagnosis, count_categories
from dspy_hero.fields import GROUP_FIELDS, environment_fields, is_locator, language_of, program_text, reference_program
from dspy_hero.text import approx_tokens

logger = logging.getLogger("dspy_hero.optimizer")

DEFAULT_CONTEXT_WINDOW = 8192  # assumed (with a warning) when the reflection LM's window is unknown
MAX_EVIDENCE_TOKENS = 60_000  # 32 + 32 cases fit with room to spare; more only costs
PROMPT_OVERHEAD_TOKENS = 1500  # reflection instructions, current rules, rejected edits, adapter framing
TOKEN_SAFETY = 0.8  # approx_tokens counts 4 characters a token; SQL, DDL and code tokenize denser
_TRUNCATED = " …[truncated]"  # the rollout trace's cut marker (rollout._text)


@dataclass
class Case:
    """One diagnosed example. `case_id` (F1.., P1..) is how reflection cites it; `labels` (gold
    programs, expected outputs) are kept for the memorization guard and never rendered (except a
    TRAINING reference with training_references=True). `environment` holds the raw environment
    references (db_path, graph, ...) the diagnosis used; `diagnosis` is set for failing cases."""

    case_id: str
    example_id: str
    passed: bool
    score: float
    inputs: dict[str, str]
    program: dict[str, str]
    feedback: str
    predictor_inputs: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    language: str | None = None
    diagnosis: Diagnosis | None = None
    environment: dict[str, Any] = field(default_factory=dict, repr=False)
    reference: str | None = None  # only with training_references=True

    def to_dict(self, with_labels: bool = False) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("environment", "diagnosis")}
        data = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
        data["diagnosis"] = self.diagnosis.to_dict() if self.diagnosis is not None else None
        if not with_labels:
            data.pop("labels")
            data.pop("reference")
        return data


def build_cases(
    results: list[Any],
    examples: dict[str, Any],
    predictor: str,
    *,
    pass_threshold: float,
    num_failing: int,
    num_passing: int,
    failure_only: bool = False,
    diagnose: bool | Diagnoser = True,
    training_references: bool = False,
    language: str | None = None,
) -> list[Case]:
    """Cases from rollout results (in the given order): up to `num_failing` failing (score below
    `pass_threshold`) and `num_passing` passing ones (none when `failure_only`).

    `diagnose`: True diagnoses each failing case with a `Diagnoser` made for this call (closed at
    the end); pass a long-lived `Diagnoser` to reuse environments across rounds (a Cypher engine, a
    sandbox); False skips the diagnosis. The program is re-executed in its environment, which costs
    executor time but no metric call and no LM call. `training_references=True` adds the reference
    program (gold_sql / gold_cypher) of these TRAINING cases to the diagnosis (REF_* facts) and to
    `Case.reference`; never use it at test time. `language` overrides the language read from the
    examples' environment references and output fields.
    """
    cases: list[Case] = []
    n_fail = n_pass = 0
    for r in results:
        passed = r.score >= pass_threshold
        if passed and (failure_only or n_pass >= num_passing):
            continue
        if not passed and n_fail >= num_failing:
            continue
        if passed:
            n_pass += 1
            cid = f"P{n_pass}"
        else:
            n_fail += 1
            cid = f"F{n_fail}"
        ex = examples[r.example_id]
        calls = r.traces.get(predictor) or []
        program = dict(calls[-1]["outputs"]) if calls else dict(r.outputs)
        if not calls and "raw_output" in program and len(program) > 1:
            program.pop("raw_output")
        inputs = {k: str(v) for k, v in ex.inputs().items()}
        pred_inputs = _distinct_inputs(dict(calls[-1]["inputs"]) if calls else {}, inputs)
        labels = {k: str(v) for k, v in ex.labels().items()}
        feedback = r.predictor_feedback.get(predictor) or r.feedback
        lang = language or language_of(ex, program)
        reference = reference_program(labels, lang) if training_references else None  # a TRAINING case's
        cases.append(Case(cid, r.example_id, passed, r.score, inputs, program, feedback, pred_inputs, labels, r.error,
                          lang, None, environment_fields(ex), reference))
    if diagnose:
        diagnoser = diagnose if isinstance(diagnose, Diagnoser) else Diagnoser()
        try:
            for case in cases:
                if not case.passed:
                    case.diagnosis = diagnose_case(case, diagnoser)
        finally:
            if diagnoser is not diagnose:
                diagnoser.close()
        _warn_undiagnosed(cases)
    return cases


def diagnose_case(case: Case, diagnoser: Diagnoser) -> Diagnosis:
    """The diagnosis of one case's program in its environment (a diagnosis bug is reported on the
    case and logged, not raised: one broken fact must not stop a round)."""
    lang = case.language or "sql"
    try:
        return diagnoser.diagnose(lang, case.environment, program_text(case.program, lang),
                                  reference=case.reference, feedback=case.feedback)
    except Exception as exc:  # noqa: BLE001 - reported on the case and in the log
        logger.warning("diagnosis of case %s (%s) failed: %s: %s", case.case_id, case.example_id, type(exc).__name__, exc)
        return Diagnosis(lang, (), "", (f"diagnosis failed: {type(exc).__name__}: {str(exc)[:200]}",))


def _warn_undiagnosed(cases: list[Case]) -> None:
    failed = [c for c in cases if c.diagnosis is not None and c.diagnosis.errors]
    if failed:
        logger.warning("%d of %d failing case(s) were diagnosed only in part: %s", len(failed),
                       sum(not c.passed for c in cases), failed[0].diagnosis.errors[0])


def _same(trace_value: str, value: str) -> bool:
    """A predictor input equals the example's (the rollout trace cuts long values with a marker)."""
    if trace_value == value:
        return True
    return trace_value.endswith(_TRUNCATED) and value.startswith(trace_value[: -len(_TRUNCATED)])


def _distinct_inputs(pred_inputs: dict[str, str], inputs: dict[str, str]) -> dict[str, str]:
    """The predictor inputs the example's inputs do not already show (field by field: the example also
    holds environment references such as db_id / db_path, so a whole-dict comparison never matched)."""
    return {k: v for k, v in pred_inputs.items() if not (k in inputs and _same(str(v), inputs[k]))}


# ---- budget ------------------------------------------------------------------------------------


def context_window_of(lm: Any) -> int | None:
    """The context window (tokens) of a `dspy.LM`, or None when it cannot be known.

    In order: an explicit ``context_window`` attribute or LM kwarg; the embedded local server's
    ``n_ctx`` (`dspy_hero.lm.local.server_of`); litellm's model table (``max_input_tokens``)."""
    if lm is None:
        return None
    kwargs = getattr(lm, "kwargs", None) or {}
    for value in (getattr(lm, "context_window", None), kwargs.get("context_window")):
        if isinstance(value, int) and value > 0:
            return value
    from dspy_hero.lm.local import server_of

    server = server_of(lm)
    if server is not None:
        return int(server.config.n_ctx)
    model = getattr(lm, "model", None)
    if not isinstance(model, str):
        return None
    try:
        import litellm

        info = litellm.get_model_info(model)
    except Exception:  # noqa: BLE001 - litellm raises for unmapped models; None means unknown
        return None
    window = info.get("max_input_tokens") or info.get("max_tokens")
    return int(window) if window else None


def evidence_budget(context_window: int, max_output_tokens: int | None = None) -> int:
    """Approximate evidence tokens for a reflection LM with `context_window` tokens: the window less
    the answer (`max_output_tokens`, at most a quarter of the window) and the prompt's other parts,
    times a safety factor for dense tokenization, capped at MAX_EVIDENCE_TOKENS."""
    reserve = min(int(max_output_tokens or 1024), context_window // 4)
    room = context_window - reserve - PROMPT_OVERHEAD_TOKENS
    return max(200, min(MAX_EVIDENCE_TOKENS, int(room * TOKEN_SAFETY)))


def shared_context_names(cases: list[Any], min_chars: int = 80, always: Any = ()) -> list[str]:
    """Input fields that are context shared by several cases (a database schema, a library context):
    a value at least `min_chars` long that repeats across cases, or a field named in `always`; in the
    order first seen. Locators (db_path, ...) are never context."""
    names: list[str] = []
    seen: dict[str, set[str]] = {}
    repeated: set[str] = set()
    for case in cases:
        for name, value in case.inputs.items():
            if is_locator(name):
                continue
            if value in seen.setdefault(name, set()) and len(value) >= min_chars:
                repeated.add(name)
            seen[name].add(value)
            if name not in names:
                names.append(name)
    return [n for n in names if n in repeated or n in always]


def _group_name(index: int) -> str:
    return chr(ord("A") + index) if index < 26 else f"A{index}"


# ---- rendering ---------------------------------------------------------------------------------


class EvidenceRenderer(Protocol):
    def render(self, cases: list[Case]) -> tuple[str, list[str]]:
        """(text for the reflection LM, ids of the cases the text shows)."""
        ...


@dataclass
class _Group:
    name: str
    fields: tuple[tuple[str, str], ...]
    label: str


class DefaultEvidenceRenderer:
    """Counted failure patterns, then shared contexts each followed by their case blocks, failing and
    passing chosen interleaved (F1, P1, F2, P2, ...) until the token budget.

    `token_budget`: approximate tokens of evidence; None (default) sizes it from `context_window`, else
    from `reflection_lm`'s window, else from the LM in `dspy.settings` at render time, else from
    DEFAULT_CONTEXT_WINDOW with a warning; the answer's room is `max_output_tokens`, else the LM's
    ``max_tokens``. Every case field is cut to `max_field_chars`; a shared
    context to `max_context_chars`. A field is a shared context when its value is at least
    `context_min_chars` long and repeats across cases, or when it is named in `context_fields`.
    `training_references=True` shows TRAINING cases' reference programs and REF_* facts (see module
    docstring); otherwise reference facts are stripped even if a case carries them.
    """

    def __init__(
        self,
        token_budget: int | None = None,
        max_field_chars: int = 600,
        *,
        reflection_lm: Any = None,
        context_window: int | None = None,
        max_output_tokens: int | None = None,
        training_references: bool = False,
        max_context_chars: int = 6000,
        context_min_chars: int = 80,
        context_fields: Sequence[str] = ("db_schema", "graph_schema"),
        max_categories: int = 8,
    ):
        self.token_budget = None if token_budget is None else int(token_budget)
        self.max_field_chars = int(max_field_chars)
        self.reflection_lm = reflection_lm
        self.context_window = context_window
        self.max_output_tokens = max_output_tokens
        self.training_references = bool(training_references)
        self.max_context_chars = int(max_context_chars)
        self.context_min_chars = int(context_min_chars)
        self.context_fields = tuple(context_fields)
        self.max_categories = int(max_categories)
        self._warned = False  # the unknown-window warning is given once per renderer, not every round

    # -- budget --

    def budget(self) -> int:
        """The evidence token budget this render uses (see the class docstring)."""
        if self.token_budget is not None:
            return self.token_budget
        lm = self.reflection_lm if self.reflection_lm is not None else dspy.settings.lm
        window = self.context_window or context_window_of(lm)
        if window is None and not self._warned:
            self._warned = True
            logger.warning("evidence: the context window of reflection LM %r is unknown; sizing the evidence for "
                           "%d tokens. Pass evidence_token_budget=..., or context_window=... to the renderer.",
                           getattr(lm, "model", lm), DEFAULT_CONTEXT_WINDOW)
        window = window or DEFAULT_CONTEXT_WINDOW
        max_tokens = self.max_output_tokens
        if max_tokens is None and lm is not None:
            max_tokens = (getattr(lm, "kwargs", None) or {}).get("max_tokens")
        return evidence_budget(int(window), max_tokens)

    # -- render --

    def render(self, cases: list[Case]) -> tuple[str, list[str]]:
        budget = self.budget()
        failing = [c for c in cases if not c.passed]
        passing = [c for c in cases if c.passed]
        order: list[Case] = []
        for i in range(max(len(failing), len(passing))):
            order += failing[i : i + 1] + passing[i : i + 1]
        context_names = self._context_names(cases)
        groups: dict[tuple, _Group] = {}
        header_cost = approx_tokens(self._header(failing, {c.case_id for c in failing}))
        used = header_cost
        chosen: list[tuple[Case, _Group | None]] = []
        opened: set[tuple] = set()
        keys = {id(c): tuple((n, c.inputs[n]) for n in context_names if n in c.inputs) for c in order}
        if self._cost(order, keys, context_names) + header_cost > budget:
            order = self._group_first(order, keys)
        for case in order:
            key = keys[id(case)]
            group = None
            if key:
                group = groups.setdefault(key, _Group("?", key, self._group_label(case)))
            cost = approx_tokens(self._block(case, group, context_names))
            if group is not None and key not in opened:
                cost += approx_tokens(self._context_block(group, []))
            if used + cost > budget and chosen:
                continue
            chosen.append((case, group))
            used += cost
            if group is not None and key not in opened:
                group.name = _group_name(len(opened))
                opened.add(key)
        text = self._compose(chosen, failing, context_names)
        while approx_tokens(text) > budget and len(chosen) > 1:  # the estimate above missed a few ids
            chosen.pop()
            text = self._compose(chosen, failing, context_names)
        if approx_tokens(text) > budget and len(chosen) == 1:  # one case is always shown, cut to the budget
            text = text[: max(200, budget * 4)]
        return text, [c.case_id for c, _ in chosen]

    def _cost(self, order: list[Case], keys: dict[int, tuple], context_names: list[str]) -> int:
        """Approximate tokens of rendering every case (each context once)."""
        contexts = {keys[id(c)] for c in order if keys[id(c)]}
        dummy = _Group("A", (), "")
        return (sum(approx_tokens(self._block(c, dummy if keys[id(c)] else None, context_names)) for c in order)
                + sum(approx_tokens("\n".join(f"{n}:\n{self._cut(v, self.max_context_chars, True)}" for n, v in k))
                      for k in contexts))

    @staticmethod
    def _group_first(order: list[Case], keys: dict[int, tuple]) -> list[Case]:
        """When not every case fits: the same alternation of failing and passing, but each turn takes
        the first remaining case of its kind whose context is already open (it costs no second
        schema), else the first remaining one. A BIRD-sized schema per database otherwise uses the
        budget on contexts instead of cases."""
        remaining = {True: [c for c in order if c.passed], False: [c for c in order if not c.passed]}
        opened: set[tuple] = set()
        out: list[Case] = []
        turn = not remaining[False]
        while remaining[True] or remaining[False]:
            pool = remaining[turn] or remaining[not turn]
            pick = next((c for c in pool if not keys[id(c)] or keys[id(c)] in opened), pool[0])
            pool.remove(pick)
            out.append(pick)
            if keys[id(pick)]:
                opened.add(keys[id(pick)])
            turn = not turn
        return out

    def _compose(self, chosen: list[tuple[Case, _Group | None]], failing: list[Case], context_names: list[str]) -> str:
        shown = {c.case_id for c, _ in chosen}
        parts = []
        header = self._header(failing, shown)
        if header:
            parts.append(header)
        seen: list[_Group | None] = []
        for _, group in chosen:
            if group not in seen:
                seen.append(group)
        for group in seen:
            members = [c for c, g in chosen if g is group]
            if group is not None:
                parts.append(self._context_block(group, [c.case_id for c in members]))
            parts += [self._block(c, group, context_names) for c in members]
        return "\n\n".join(parts)

    def _context_names(self, cases: list[Case]) -> list[str]:
        return shared_context_names(cases, self.context_min_chars, self.context_fields)

    def _group_label(self, case: Case) -> str:
        for ref in GROUP_FIELDS:
            value = case.inputs.get(ref) or case.environment.get(ref)
            if value:
                return f"{ref}: {value}"
        return ""

    def _context_block(self, group: _Group, case_ids: list[str]) -> str:
        head = f"## Context {group.name}" + (f" ({group.label})" if group.label else "")
        if case_ids:
            head += f", shared by case(s) {', '.join(case_ids)}"
        lines = [head]
        for name, value in group.fields:
            lines.append(f"{name}:\n{self._cut(value, self.max_context_chars, keep_lines=True)}")
        return "\n".join(lines)

    def _header(self, failing: list[Case], shown: set[str]) -> str:
        diagnosed = [(c.case_id, self._diagnosis(c)) for c in failing if c.diagnosis is not None]
        diagnosed = [(cid, d) for cid, d in diagnosed if d is not None]
        if not diagnosed:
            return ""
        counts = count_categories(diagnosed)
        total = len(failing)
        lines = [f"## Failure patterns found by program analysis (over {total} failing case(s))"]
        for cc in counts[: self.max_categories]:
            ids = tuple(i for i in cc.case_ids if i in shown)
            lines.append(CategoryCount(cc.category, cc.count, ids).line(total))
        unexplained = total - len({cid for cid, d in diagnosed if d.facts})
        if unexplained:
            lines.append(f"- {unexplained} of {total} failing case(s): no programmatic finding (see their feedback)")
        lines.append("Write general rules that prevent the most frequent patterns above.")
        return "\n".join(lines)

    def _diagnosis(self, case: Case) -> Diagnosis | None:
        if case.diagnosis is None:
            return None
        return case.diagnosis if self.training_references else case.diagnosis.label_free_only()

    def _block(self, case: Case, group: _Group | None, context_names: list[str]) -> str:
        status = "PASSED" if case.passed else "FAILED"
        where = f"; context {group.name}" if group is not None else ""
        lines = [f"### Case {case.case_id} ({status}, score {case.score:.2f}{where})", "Inputs:"]
        shared = {n for n, _ in group.fields} if group is not None else set()
        lines += [f"  {k}: {self._cut(v)}" for k, v in case.inputs.items()
                  if not is_locator(k) and k not in shared]
        step = {k: v for k, v in case.predictor_inputs.items() if k not in shared}
        if step:
            lines.append("Inputs to this step:")
            lines += [f"  {k}: {self._cut(v)}" for k, v in step.items()]
        lines.append("Generated output:")
        lines += [f"  {k}: {self._cut(v)}" for k, v in case.program.items()]
        lines.append(f"Execution feedback: {self._cut(case.feedback)}")
        diag = self._diagnosis(case)
        if diag is not None and diag.facts:
            lines.append(f"Diagnosis: {diag.line()}")
            if diag.structure:
                lines.append(f"Program structure: {diag.structure}")
        if self.training_references and case.reference and not case.passed:
            lines.append(f"Reference program (training case): {self._cut(case.reference)}")
        return "\n".join(lines)

    def _cut(self, text: str, limit: int | None = None, keep_lines: bool = False) -> str:
        limit = self.max_field_chars if limit is None else limit
        text = str(text)
        if len(text) > limit and not keep_lines:
            text = " ".join(text.split())
        return text if len(text) <= limit else text[:limit] + " …"
