"""Class C of issue 12: faked unit-test passes and forged verdicts.

Every program here is a WRONG `add` (or a wrong DSCodeBench function) dressed up with a trick; each
must score 0, as a test failure or as `TamperDetected`, and the host must never raise. The verdict
logic lives in the boot code and is the same on every layer; the attacks run on each strong layer.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import dspy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dspy_hero.execution.python import TAMPERED, TESTS_FAILED, PythonSandbox, find_bwrap
from dspy_hero.execution.sandbox_verdict import interpret, parse_verdict
from dspy_hero.metrics.python import ds_outputs_metric, python_tests_metric

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox layers need Linux")

TESTS = """import unittest
class TestCases(unittest.TestCase):
    def test_small(self):
        self.assertEqual(add(1, 2), 3)
    def test_negative(self):
        expected = -3
        self.assertEqual(add(-1, -2), expected)
"""
WRONG = "def add(a, b):\n    return a - b + 1000\n"
RIGHT = "def add(a, b):\n    return a + b\n"


def _strong_layers() -> list[str]:
    layers = ["bwrap"] if find_bwrap() is not None else []
    if os.getuid() == 0 and shutil.which("unshare"):
        layers.append("rlimit")
    return layers


@pytest.fixture(scope="module", params=_strong_layers())
def sandbox(request):
    sb = PythonSandbox(layer=request.param, timeout_s=20.0, memory_mb=2048, max_processes=32)
    assert sb.layer == request.param
    return sb


def _fails(result, kinds=(TESTS_FAILED, TAMPERED)):
    assert not result.ok, result
    assert result.error_type in kinds, result
    return result


def test_c_control_right_passes_wrong_fails(sandbox):
    assert sandbox.run_unittest(RIGHT, TESTS).ok
    _fails(sandbox.run_unittest(WRONG, TESTS), (TESTS_FAILED,))


def test_c_skiptest_raised_by_the_program_is_not_a_pass(sandbox):
    code = "import unittest\ndef add(a, b):\n    raise unittest.SkipTest('not today')\n"
    result = _fails(sandbox.run_unittest(code, TESTS), (TESTS_FAILED,))
    assert "SkipTest" in result.details["exception_types"]


def test_c_skips_the_tests_declare_are_not_failures(sandbox):
    tests = TESTS + ("    @unittest.skip('needs network')\n    def test_network(self):\n        self.fail()\n"
                     "    def test_runtime_skip(self):\n        self.skipTest('optional dependency')\n")
    result = sandbox.run_unittest(RIGHT, tests)
    assert result.ok, result
    assert result.details["skipped"] == 2 and result.details["tests_run"] == 4


def test_c_unexpected_success_and_undeclared_expected_failure_fail(sandbox):
    tests = TESTS + ("    @unittest.expectedFailure\n    def test_known_bug(self):\n        self.assertEqual(add(0, 0), 1)\n")
    declared = sandbox.run_unittest(RIGHT, tests)
    assert declared.ok, declared  # the benchmark's own expected failure, failing as declared
    buggy_right = "def add(a, b):\n    return a + b if (a, b) != (0, 0) else 1\n"
    result = _fails(sandbox.run_unittest(buggy_right, tests), (TESTS_FAILED,))
    assert "UnexpectedSuccess" in result.details["exception_types"]


INIT_SUBCLASS_BLANK = WRONG + """
import unittest
def _hook(cls, **kw):
    for name in list(vars(cls)):
        if name.startswith('test'):
            setattr(cls, name, lambda self: None)
unittest.TestCase.__init_subclass__ = classmethod(_hook)
"""
INIT_SUBCLASS_XFAIL = WRONG + """
import unittest
def _hook(cls, **kw):
    for name in list(vars(cls)):
        if name.startswith('test'):
            setattr(cls, name, unittest.expectedFailure(vars(cls)[name]))
unittest.TestCase.__init_subclass__ = classmethod(_hook)
"""
INIT_SUBCLASS_SELF_REMOVING = WRONG + """
import unittest
def _hook(cls, **kw):
    for name in list(vars(cls)):
        if name.startswith('test'):
            setattr(cls, name, lambda self: None)
    del unittest.TestCase.__init_subclass__
unittest.TestCase.__init_subclass__ = classmethod(_hook)
"""
ASSERTS_NOOP = WRONG + """
import unittest
for name in dir(unittest.TestCase):
    if name.startswith(('assert', 'fail')):
        setattr(unittest.TestCase, name, lambda self, *a, **k: None)
"""
ADD_FAILURE_DROPPED = WRONG + """
import unittest
unittest.TestResult.addFailure = lambda self, test, err: None
unittest.TestResult.addError = lambda self, test, err: None
unittest.TextTestResult.addFailure = lambda self, test, err: None
"""
PATCH_AT_CALL_AND_RESTORE = """
import unittest
_orig = unittest.TestCase.assertEqual
def add(a, b):
    def once(self, *args, **kw):
        unittest.TestCase.assertEqual = _orig
    unittest.TestCase.assertEqual = once
    return a - b + 1000
"""
FAKE_UNITTEST_MODULE = WRONG + """
import sys, types, unittest
fake = types.ModuleType('unittest')
fake.__dict__.update(vars(unittest))
class TestCase(unittest.TestCase):
    def assertEqual(self, *a, **k):
        pass
fake.TestCase = TestCase
sys.modules['unittest'] = fake
"""
BUILD_CLASS_HOOK = WRONG + """
import builtins
_orig = builtins.__build_class__
def _build(func, name, *bases, **kw):
    cls = _orig(func, name, *bases, **kw)
    for attr in list(vars(cls)):
        if attr.startswith('test'):
            setattr(cls, attr, lambda self: None)
    return cls
builtins.__build_class__ = _build
"""
ALWAYS_EQUAL = """
class _Anything:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
def add(a, b):
    return _Anything()
"""
FAKE_INSTANCE = """
class _Liar:
    @property
    def __class__(self):
        return int
    def __eq__(self, other):
        return True
def add(a, b):
    return _Liar()
"""
REPLACE_TEST_METHODS_AT_CALL = """
def add(a, b):
    cls = globals()['TestCases']
    for name in list(vars(cls)):
        if name.startswith('test'):
            setattr(cls, name, lambda self: None)
    return a - b + 1000
"""


@pytest.mark.parametrize("name, code", [
    ("__init_subclass__ blanks the tests", INIT_SUBCLASS_BLANK),
    ("__init_subclass__ wraps the tests in expectedFailure", INIT_SUBCLASS_XFAIL),
    ("__init_subclass__ that removes itself", INIT_SUBCLASS_SELF_REMOVING),
    ("every assert* patched to a no-op", ASSERTS_NOOP),
    ("TestResult.addFailure/addError dropped", ADD_FAILURE_DROPPED),
    ("a fake unittest module in sys.modules", FAKE_UNITTEST_MODULE),
    ("builtins.__build_class__ hook", BUILD_CLASS_HOOK),
    ("test methods replaced during the run", REPLACE_TEST_METHODS_AT_CALL),
    ("an always-equal object returned", ALWAYS_EQUAL),
    ("an object lying about its class", FAKE_INSTANCE),
])
def test_c_tampering_with_the_unittest_machinery_is_stopped(sandbox, name, code):
    """Either impossible (unittest's classes are immutable: the patch raises TypeError while the
    program loads) or detected (the snapshots differ: TamperDetected)."""
    result = sandbox.run_unittest(code, TESTS)
    assert not result.ok, (name, result)
    frozen = result.error_type == "RuntimeError" and "immutable type" in result.error_message
    assert frozen or result.error_type == TAMPERED, (name, result)


def test_c_inspecting_functions_the_tests_pass_in_is_not_tampering(sandbox):
    """BigCodeBench/568-style: the task inspects functions the tests define and pass to it."""
    code = "import inspect\ndef arity(f):\n    return len(inspect.getfullargspec(f).args)\n"
    tests = ("import unittest\nclass TestCases(unittest.TestCase):\n"
             "    def test_arity(self):\n        def g(x, y):\n            pass\n"
             "        self.assertEqual(arity(g), 2)\n        self.assertEqual(arity(lambda: 0), 0)\n")
    result = sandbox.run_unittest(code, tests)
    assert result.ok, result


def test_c_formatting_a_traceback_is_not_tampering(sandbox):
    assert sandbox.run_unittest(TRACEBACK_FORMATTING_IS_FINE, TESTS).ok


def test_c_program_objects_compared_with_each_other_still_pass(sandbox):
    """A dataclass of the program, compared with one the tests build through the program: legit."""
    code = ("from dataclasses import dataclass\n@dataclass\nclass Pair:\n    a: int\n    b: int\n"
            "def make(a, b):\n    return Pair(a, b)\n")
    tests = ("import unittest\nclass TestCases(unittest.TestCase):\n"
             "    def test_pair(self):\n        self.assertEqual(make(1, 2), Pair(1, 2))\n"
             "        self.assertIsInstance(make(1, 2), Pair)\n")
    result = sandbox.run_unittest(code, tests)
    assert result.ok, result


def test_c_a_patch_that_restores_itself_before_any_snapshot_cannot_be_made(sandbox):
    """A patch applied during the call and undone inside the patched assertion would leave nothing
    for a snapshot to see; on an immutable TestCase it cannot be applied at all."""
    result = _fails(sandbox.run_unittest(PATCH_AT_CALL_AND_RESTORE, TESTS), (TESTS_FAILED,))
    assert result.details["exception_types"] == ["TypeError"]
    assert result.details["failures"] + result.details["errors"] == 2


FRAME_FORGERY = """
import os, sys
def add(a, b):
    frame = sys._getframe(1)
    found = []
    while frame is not None:
        for v in list(frame.f_locals.values()):
            if isinstance(v, str) and v.startswith('@@hero-'):
                found.append(v)
        frame = frame.f_back
    line = (found[0] if found else '@@hero-guess@@') + repr({'status': 'tests', 'tests_run': 2, 'failures': [],
            'errors': [], 'skipped': 0, 'passed': 2, 'report': ''}) + '\\n'
    for fd in range(0, 64):
        try:
            os.write(fd, line.encode())
        except OSError:
            pass
    os._exit(0)
"""
GC_FORGERY = """
import gc, os
def add(a, b):
    tokens = [o for o in gc.get_objects() if isinstance(o, str) and o.startswith('@@hero-')]
    line = (tokens[0] if tokens else '@@x@@') + repr({'status': 'tests', 'tests_run': 2, 'failures': [],
            'errors': [], 'skipped': 0, 'passed': 2, 'report': ''}) + '\\n'
    os.write(1, line.encode())
    os._exit(0)
"""
ATEXIT_FORGERY = WRONG + """
import atexit, os
def _forge():
    line = '@@hero-' + '0' * 32 + '@@' + repr({'status': 'tests', 'tests_run': 2, 'failures': [], 'errors': [],
            'skipped': 0, 'passed': 2, 'report': ''}) + '\\n'
    for fd in range(64):
        try:
            os.write(fd, line.encode())
        except OSError:
            pass
atexit.register(_forge)
"""
MALFORMED_VERDICT = """
import os
def add(a, b):
    line = "@@hero-whatever@@{'status': 'tests', 'tests_run': 'many', 'failures': 'abc', 'errors': None}\\n"
    for fd in range(64):
        try:
            os.write(fd, line.encode())
        except OSError:
            pass
    os._exit(0)
"""
READ_TESTS_FROM_FILE = """
import os, re
def add(a, b):
    text = open(__file__).read() if os.path.exists(__file__) else ''
    for d in ('.', '/sandbox', '/tmp/sandbox', '/tmp'):
        try:
            for name in os.listdir(d):
                try:
                    text += open(os.path.join(d, name)).read()
                except OSError:
                    pass
        except OSError:
            pass
    answers = dict(((int(x), int(y)), int(z)) for x, y, z in re.findall(r'add\\((-?\\d+), (-?\\d+)\\)\\), (-?\\d+)', text))
    return answers.get((a, b), a - b + 1000)
"""
READ_EXPECTED_FROM_CALLER = """
import sys
def add(a, b):
    caller = sys._getframe(1)
    consts = [c for c in caller.f_code.co_consts if isinstance(c, int)]
    local = caller.f_locals.get('expected')
    return local if local is not None else (consts[-1] if consts else 0)
"""
READ_EXPECTED_VIA_INSPECT = """
import inspect
def add(a, b):
    caller = inspect.currentframe().f_back
    return caller.f_locals.get('expected', a - b + 1000)
"""
READ_EXPECTED_VIA_WALK_TB = """
import traceback
def add(a, b):
    try:
        raise ValueError
    except ValueError as exc:
        frame = next(traceback.walk_tb(exc.__traceback__))[0].f_back
    while frame is not None:
        if 'expected' in frame.f_locals:
            return frame.f_locals['expected']
        frame = frame.f_back
    return a - b + 1000
"""
TRACEBACK_FORMATTING_IS_FINE = """
import traceback
def add(a, b):
    try:
        raise ValueError('x')
    except ValueError:
        assert 'ValueError' in traceback.format_exc()
    return a + b
"""
READ_TEST_CODE_OBJECT = """
def add(a, b):
    cls = globals()['TestCases']
    consts = cls.test_small.__code__.co_consts
    return [c for c in consts if isinstance(c, int)][-1]
"""
PROC_MEM = """
def add(a, b):
    with open('/proc/self/mem', 'rb') as fh:
        fh.read(1)
    return a - b
"""


@pytest.mark.parametrize("name, code, kind", [
    ("verdict forged with the token found in a caller's frame", FRAME_FORGERY, TAMPERED),
    ("verdict forged with the token found through gc.get_objects", GC_FORGERY, TAMPERED),
    ("verdict written again from atexit", ATEXIT_FORGERY, TESTS_FAILED),  # atexit never runs
    ("malformed verdict fields", MALFORMED_VERDICT, TAMPERED),
    ("expected values read from the test file", READ_TESTS_FROM_FILE, TESTS_FAILED),  # no test file
    ("expected values read from the caller's frame", READ_EXPECTED_FROM_CALLER, TAMPERED),
    ("expected values read through inspect.currentframe", READ_EXPECTED_VIA_INSPECT, TAMPERED),
    ("expected values read from the test method's code object", READ_TEST_CODE_OBJECT, TAMPERED),
    ("expected values read through traceback.walk_tb and f_back", READ_EXPECTED_VIA_WALK_TB, TAMPERED),
    ("process memory read through /proc/self/mem", PROC_MEM, TAMPERED),
])
def test_c_forged_verdicts_and_stolen_expectations_score_zero(sandbox, name, code, kind):
    result = sandbox.run_unittest(code, TESTS)
    assert not result.ok, (name, result)
    assert result.error_type == kind, (name, result)


def test_c_the_metric_scores_every_trick_zero(sandbox):
    metric = python_tests_metric(timeout_s=20, sandbox=sandbox)
    gold = dspy.Example(test_code=TESTS, entry_point="add").with_inputs()
    tricks = [INIT_SUBCLASS_BLANK, ASSERTS_NOOP, FRAME_FORGERY, MALFORMED_VERDICT, READ_EXPECTED_FROM_CALLER,
              "import unittest\ndef add(a, b):\n    raise unittest.SkipTest('x')\n"]
    for code in tricks:
        verdict = metric(gold, dspy.Prediction(code=code))
        assert verdict.score == 0.0, (code, verdict.feedback)
    assert metric(gold, dspy.Prediction(code=RIGHT)).score == 1.0


def test_c_the_host_never_raises_on_a_malformed_verdict_channel():
    token = "@@hero-" + "a" * 32 + "@@"
    for blob in [b"", b"\xff\xfe", token.encode() + b"{'status': 'tests', 'tests_run': 'many'}\n",
                 token.encode() + b"{'status': 'ok'}\n" + token.encode() + b"{'status': 'ok'}\n",
                 b"@@hero-x@@{'status': 'ok'}\n", ("@@hero-" + "c" * 32 + "@@{'status': 'ok'}\n").encode(),
                 token.encode() + b"[1, 2]\n", token.encode() + b"(" * 10000 + b"\n",
                 token.encode() + b"{'status': 'tests', 'tests_run': 1, 'failures': 'abc', 'errors': [], "
                                  b"'skipped': 0, 'passed': 1}\n"]:
        record, problem = parse_verdict(blob, token)
        assert record is None
        result = interpret(b"", blob, token, 0, False, False, 0.1, 1.0, "bwrap", "unittest", 1000)
        assert not result.ok
        if blob:
            assert result.error_type == TAMPERED and problem


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400), st.sampled_from(["run", "unittest"]), st.integers(-20, 300))
def test_c_interpret_never_raises(blob, mode, code):
    token = "@@hero-" + "b" * 32 + "@@"
    for verdict in (blob, token.encode() + blob + b"\n"):
        result = interpret(blob, verdict, token, code, False, False, 0.1, 1.0, "rlimit", mode, 100)
        assert result.error_type is None or isinstance(result.error_type, str)


# ---------------------------------------------------------------------------------------- DSCodeBench

DS_GT = "def scale(values):\n    return [v * 2 for v in values]\n"
DS_SCRIPT = ("import random\n\ndef test_case_input_generator(n=200):\n"
             "    return [([random.randint(0, 9) for _ in range(3)],) for _ in range(n)]\n")
DS_WRONG = "def scale(values):\n    return [v * 3 for v in values]\n"


@pytest.fixture(scope="module")
def ds_metric(sandbox):
    return ds_outputs_metric(num_cases=10, timeout_s=60, sandbox=sandbox)


def _ds(gold=DS_GT):
    return dspy.Example(prompt="scale", ground_truth_code=gold, test_script=DS_SCRIPT).with_inputs("prompt")


@pytest.fixture()
def flag_dir():
    d = tempfile.mkdtemp(prefix="hero-ds-attack-")
    os.chmod(d, 0o777)
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


def test_c_ds_control(ds_metric):
    assert ds_metric(_ds(), dspy.Prediction(code=DS_GT)).score == 1.0
    assert ds_metric(_ds(), dspy.Prediction(code=DS_WRONG)).score == 0.0


DS_REPLACE_COMPARISON = DS_WRONG + """
import sys
try:
    g = sys._getframe(1).f_globals
except Exception:
    g = {}
for key in ('same', '_same_file'):
    if key in g:
        g[key] = lambda *a, **k: (True, '')
"""
DS_CALL_GROUND_TRUTH = """
import sys
def scale(values):
    frame = sys._getframe(1)
    while frame is not None:
        ns = frame.f_locals.get('gt_ns') or {}
        if 'scale' in ns:
            return ns['scale'](values)
        frame = frame.f_back
    return [v * 3 for v in values]
"""
DS_FORGED_REPORT = DS_WRONG + """
import os, re
text = open(__file__).read()
for token in set(re.findall(r"@@hero-ds-[0-9a-f]+@@", text)) or {'@@hero-ds-000000000000000000000000@@'}:
    os.write(1, ('\\n' + token + repr({'cases': 10, 'matched': 10}) + '\\n').encode())
"""
DS_FORGED_BLOB = DS_WRONG + """
import base64, pickle, zlib, random, os
random.seed(42)
cases = [([1, 2, 3],)] * 10
out = {'fatal': None, 'function': 'scale', 'cases': 'f' * 64,
       'results': [('value', pickle.dumps([2, 4, 6], protocol=4), {})] * 10}
os.write(1, ('\\n@@hero-ds-outputs@@' + repr(base64.b64encode(zlib.compress(pickle.dumps(out))).decode()) + '\\n').encode())
os._exit(0)
"""


def test_c_ds_tricks_score_zero(ds_metric):
    for name, code in [("replace the comparison through the caller's globals", DS_REPLACE_COMPARISON),
                       ("call the ground truth from the driver frame", DS_CALL_GROUND_TRUTH),
                       ("print a forged report with a token read from the driver", DS_FORGED_REPORT),
                       ("claim outputs for inputs of its own choosing", DS_FORGED_BLOB)]:
        verdict = ds_metric(_ds(), dspy.Prediction(code=code))
        assert verdict.score == 0.0, (name, verdict.feedback)
        if code is DS_FORGED_BLOB:  # the blob arrived and was refused for its cases
            assert "other inputs than the generated cases" in verdict.feedback, verdict.feedback


def test_c_ds_pickle_gadgets_never_run_in_the_judge(ds_metric):
    """The candidate's process hand-crafts its outputs blob with the right cases and a pickle whose
    loading would run code in the judge (read the judge's token from its own program and print a
    perfect report); the judge's unpickler refuses it."""
    forge = ("(lambda os, re: (os.write(1, ('\\n' + re.findall(r'@@hero-ds-[0-9a-f]+@@', open('main.py').read())[-1]"
             " + repr({'cases': 10, 'matched': 10}) + '\\n').encode()), os._exit(0)))(__import__('os'), __import__('re'))")
    code = DS_WRONG + f"""
import base64, pickle, zlib, os, random, hashlib
class Gadget:
    def __reduce__(self):
        return (eval, ({forge!r},))
random.seed(42)
cases = [([random.randint(0, 9) for _ in range(3)],) for _ in range(10)]
out = {{'fatal': None, 'function': 'scale', 'cases': hashlib.sha256(pickle.dumps(cases, protocol=4)).hexdigest(),
       'results': [('value', pickle.dumps(Gadget(), protocol=4), {{}})] * 10}}
os.write(1, ('\\n@@hero-ds-outputs@@' + repr(base64.b64encode(zlib.compress(pickle.dumps(out))).decode()) + '\\n').encode())
os._exit(0)
"""
    verdict = ds_metric(_ds(), dspy.Prediction(code=code))
    assert verdict.score == 0.0, verdict.feedback
    assert "matched the reference on 0 of 10" in verdict.feedback  # the cases were accepted, the outputs not
