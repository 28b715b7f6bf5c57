"""DSCodeBench-style output comparison, run INSIDE the Python sandbox (never imported by the host
metric; `ds_outputs_metric` sends this file's source with a call appended), in two processes so that
the candidate never shares a process with the ground truth or the comparison:

1. `candidate_main` (with the candidate, never the ground truth): generate the cases with
   `test_case_input_generator(n)` (Python's and numpy's seeds fixed at 42), apply the candidate's LAST
   top-level function to a deep copy of each (seeds reset to 42 before each call), and print the cases
   and the outputs (values, raised exception types, files written) as one pickled, base64 blob.
2. `judge_main` (ground truth and comparison, no candidate code): generate the cases again, refuse
   the blob unless its fingerprint of the cases equals theirs, apply the ground truth, load the candidate's outputs with a
   restricted unpickler (data classes of numpy/pandas/the standard library only: no callable a pickle
   could use to run code) and compare by type. Its report is the metric's verdict.

Whatever the candidate's process prints is therefore only a claim about its own outputs: it cannot
see the expected outputs, replace the comparison or forge the report. Files a call writes (e.g. a
saved figure) are compared too: each call runs in its own empty directory.

Semantics chosen where the benchmark leaves room: a case on which the ground truth raises matches
when the candidate raises the same exception type; dtypes of numbers are not compared (values are,
with tolerance); tuples and lists compare as sequences; an output that cannot travel as data (a
generator, a plot object) is compared by its type and repr.
"""

# Executing the programs and treating any exception as a compared result is this file's job.
# ruff: noqa: BLE001, S102, S110

import ast
import base64
import contextlib
import copy
import io
import math
import os
import pickle
import random
import sys
import zlib

RTOL = 1e-5
ATOL = 1e-8
MAX_DEPTH = 6


def _seed():
    random.seed(42)
    try:
        import numpy as np

        np.random.seed(42)
    except ImportError:
        pass


def _last_function(source):
    names = [node.name for node in ast.parse(source).body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return names[-1] if names else None


def _describe(value):
    """Type and shape, never the values (feedback must not leak expected outputs)."""
    kind = type(value).__name__
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"{kind} of shape {tuple(shape)}"
    if isinstance(value, (list, tuple, dict, set)):
        return f"{kind} of length {len(value)}"
    return kind


def _is_number(value):
    import numbers

    return isinstance(value, numbers.Number) and not isinstance(value, bool)


def same(a, b, depth=0):
    """Typed comparison of two outputs; returns (equal, reason)."""
    if depth > MAX_DEPTH:
        return (repr(a) == repr(b), "values differ")
    if a is None or b is None:
        return (a is None and b is None, "one output is None")
    np = sys.modules.get("numpy")
    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(a, (pd.DataFrame, pd.Series, pd.Index)):
        if type(a) is not type(b):
            return (False, f"type differs ({_describe(b)} vs expected {_describe(a)})")
        try:
            if isinstance(a, pd.DataFrame):
                pd.testing.assert_frame_equal(a, b, check_dtype=False, check_exact=False, rtol=RTOL, atol=ATOL)
            elif isinstance(a, pd.Series):
                pd.testing.assert_series_equal(a, b, check_dtype=False, check_exact=False, rtol=RTOL, atol=ATOL)
            else:
                pd.testing.assert_index_equal(a, b, exact=False, check_exact=False, rtol=RTOL, atol=ATOL)
        except AssertionError:
            return (False, f"{type(a).__name__} differs ({_describe(b)} vs expected {_describe(a)})")
        return (True, "")
    sparse = sys.modules.get("scipy.sparse")
    if sparse is not None and (sparse.issparse(a) or sparse.issparse(b)):
        if not (sparse.issparse(a) and sparse.issparse(b)):
            return (False, f"type differs ({_describe(b)} vs expected {_describe(a)})")
        return same(a.toarray(), b.toarray(), depth + 1)
    if np is not None and (isinstance(a, np.ndarray) or isinstance(b, np.ndarray)):
        try:
            x, y = np.asarray(a), np.asarray(b)
        except Exception:
            return (False, f"type differs ({_describe(b)} vs expected {_describe(a)})")
        if x.shape != y.shape:
            return (False, f"shape differs ({_describe(b)} vs expected {_describe(a)})")
        if x.dtype.kind in "biufc" and y.dtype.kind in "biufc":
            ok = bool(np.allclose(x, y, rtol=RTOL, atol=ATOL, equal_nan=True))
            return (ok, "" if ok else f"values differ ({_describe(b)})")
        if x.dtype.kind == "O" or y.dtype.kind == "O":
            for u, v in zip(x.ravel().tolist(), y.ravel().tolist()):
                ok, why = same(u, v, depth + 1)
                if not ok:
                    return (False, why)
            return (True, "")
        ok = bool(np.array_equal(x, y))
        return (ok, "" if ok else f"values differ ({_describe(b)})")
    if _is_number(a) and _is_number(b):
        if isinstance(a, complex) or isinstance(b, complex):
            ok = abs(complex(a) - complex(b)) <= ATOL + RTOL * abs(complex(a))
            return (ok, "" if ok else "values differ")
        fa, fb = float(a), float(b)
        if math.isnan(fa) or math.isnan(fb):
            return (math.isnan(fa) and math.isnan(fb), "values differ (NaN)")
        ok = math.isclose(fa, fb, rel_tol=RTOL, abs_tol=ATOL) or fa == fb
        return (ok, "" if ok else f"values differ ({type(b).__name__})")
    if isinstance(a, (str, bytes, bool)) or isinstance(b, (str, bytes, bool)):
        ok = type(a) is type(b) and a == b or (isinstance(a, bool) and isinstance(b, bool) and a == b)
        if np is not None and isinstance(a, (bool, np.bool_)) and isinstance(b, (bool, np.bool_)):
            ok = bool(a) == bool(b)
        return (ok, "" if ok else f"values differ ({_describe(b)} vs expected {_describe(a)})")
    if np is not None and isinstance(a, np.generic) and isinstance(b, np.generic):
        return same(a.item(), b.item(), depth + 1)
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return (False, "dict keys differ")
        for key in a:
            ok, why = same(a[key], b[key], depth + 1)
            if not ok:
                return (False, f"[{key!r}] {why}")
        return (True, "")
    if isinstance(a, (set, frozenset)) and isinstance(b, (set, frozenset)):
        return (a == b, "set differs")
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return (False, f"length differs ({_describe(b)} vs expected {_describe(a)})")
        for i, (u, v) in enumerate(zip(a, b)):
            ok, why = same(u, v, depth + 1)
            if not ok:
                return (False, f"[{i}] {why}")
        return (True, "")
    if type(a) is not type(b):
        return (False, f"type differs ({_describe(b)} vs expected {_describe(a)})")
    try:
        eq = a == b
        if isinstance(eq, bool) and eq:
            return (True, "")
    except Exception:
        pass
    if hasattr(a, "__dict__") and hasattr(b, "__dict__"):
        return same(vars(a), vars(b), depth + 1)
    return (repr(a) == repr(b), f"{type(a).__name__} differs")


def _files(directory):
    out = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, directory)] = fh.read()
    return out


def _same_file(name, a, b):
    if a == b:
        return True
    if name.lower().endswith((".png", ".jpg", ".jpeg")):
        try:
            import matplotlib.image as mpimg
            import numpy as np

            x, y = mpimg.imread(io.BytesIO(a)), mpimg.imread(io.BytesIO(b))
            return x.shape == y.shape and bool(np.allclose(x, y, atol=1e-3))
        except Exception:
            return False
    return False


_MAX_FILE_BYTES = 4 << 20
_MAX_BLOB_BYTES = 1 << 30  # the candidate's outputs, decompressed (a zip bomb stops here)
_SAFE_BUILTINS = {"list", "dict", "set", "frozenset", "tuple", "complex", "bytearray", "bytes", "range", "slice",
                  "int", "float", "str", "bool", "object"}
_SAFE_MODULES = ("numpy", "pandas", "pyarrow", "scipy.sparse", "datetime", "decimal", "fractions", "collections",
                 "zoneinfo", "uuid", "pytz", "dateutil.tz")
_SAFE_FUNCTION_PREFIXES = ("_unpickle", "__pyx_unpickle", "_new_", "_reconstruct", "_restore", "_timedelta_unpickle")
_SAFE_FUNCTIONS = {("copyreg", "_reconstructor"), ("_codecs", "encode"), ("pyarrow.lib", "py_buffer"),
                   ("pyarrow.lib", "type_for_alias"), ("numpy.core.multiarray", "scalar"),
                   ("numpy._core.multiarray", "scalar"), ("numpy", "dtype")}


class _DataUnpickler(pickle.Unpickler):
    """Loads data, not code: classes of numpy/pandas/pyarrow/scipy.sparse and data modules of the
    standard library, and their known reconstructor functions; any other global is refused."""

    def find_class(self, module, name):
        if module == "builtins":
            if name in _SAFE_BUILTINS:
                return super().find_class(module, name)
        elif (module, name) in _SAFE_FUNCTIONS:
            return super().find_class(module, name)
        elif any(module == m or module.startswith(m + ".") for m in _SAFE_MODULES) and "." not in name:
            found = super().find_class(module, name)
            if isinstance(found, type) or name.startswith(_SAFE_FUNCTION_PREFIXES):
                return found
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def _portable(value):
    """The output as data that survives the trip: a picklable value the judge's unpickler accepts,
    else ("opaque", type name, repr)."""
    try:
        blob = pickle.dumps(value, protocol=4)
        _DataUnpickler(io.BytesIO(blob)).load()
        return ("value", blob)
    except Exception:
        return ("opaque", type(value).__name__, _safe_repr(value))


def _safe_repr(value):
    try:
        return repr(value)[:2000]
    except Exception:
        return "<unrepresentable>"


def _call(fn, case, workdir):
    """Apply fn to a deep copy of the case inside its own directory; returns (output, exc, files)."""
    os.makedirs(workdir, exist_ok=True)
    here = os.getcwd()
    os.chdir(workdir)
    _seed()
    try:
        args = copy.deepcopy(case)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            if isinstance(args, dict):
                result = fn(**args)
            elif isinstance(args, (tuple, list)):
                result = fn(*args)
            else:
                result = fn(args)
        return result, None, _files(".")
    except Exception as exc:  # a failing call is a result to compare, not a driver failure
        return None, exc, {}
    finally:
        os.chdir(here)
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is not None:
            plt.close("all")


def _load(source, label):
    namespace = {"__name__": f"__{label}__"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(source, f"{label}.py", "exec"), namespace)
    return namespace


def _cases(test_script, num_cases):
    test_ns = _load(test_script, "test_script")
    _seed()
    with contextlib.redirect_stdout(io.StringIO()):
        return list(test_ns["test_case_input_generator"](num_cases))


class _FingerprintPickler(pickle.Pickler):
    """Pickles a case list with callables replaced by their qualified names, so that both
    processes can fingerprint inputs that hold local functions (generators often pass lambdas)."""

    def reducer_override(self, obj):
        import types

        if isinstance(obj, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.LambdaType)):
            return (str, (f"<callable {getattr(obj, '__qualname__', '?')}>",))
        return NotImplemented


def _fingerprint(cases):
    """A digest of the generated inputs, equal in two processes that generated the same cases."""
    import hashlib
    import re

    buffer = io.BytesIO()
    try:
        _FingerprintPickler(buffer, protocol=4).dump(cases)
        data = buffer.getvalue()
    except Exception:
        data = re.sub(r" at 0x[0-9a-fA-F]+", "", _safe_repr(cases)).encode()
    return hashlib.sha256(data).hexdigest()


def _emit(marker, payload):
    sys.stdout.flush()
    os.write(1, ("\n" + marker + repr(payload) + "\n").encode())


def candidate_main(candidate, test_script, num_cases, marker):
    """Process 1: the candidate's outputs on the generated cases, as one blob line after `marker`."""
    import shutil

    out = {"fatal": None, "function": None, "cases": "", "results": []}

    def finish():
        blob = base64.b64encode(zlib.compress(pickle.dumps(out, protocol=4), 1)).decode()
        _emit(marker, blob)

    try:
        name = _last_function(candidate)
    except SyntaxError as exc:
        out["fatal"] = f"SyntaxError: {exc.msg} (line {exc.lineno})"
        return finish()
    if name is None:
        out["fatal"] = "the program defines no top-level function"
        return finish()
    try:
        cases = _cases(test_script, num_cases)
    except BaseException as exc:  # the benchmark's own generator fails (e.g. library version drift)
        out["fatal"] = f"test input generator failed: {type(exc).__name__}: {exc}"[:500]
        out["fatal_side"] = "gold"
        return finish()
    out["cases"] = _fingerprint(cases)
    try:
        ns = _load(candidate, "candidate")
    except BaseException as exc:
        out["fatal"] = f"{type(exc).__name__}: {exc}"[:500]
        return finish()
    out["function"] = name
    fn = ns[name]
    for index, case in enumerate(cases):
        actual, exc, files = _call(fn, case, f"_cand/{index}")
        shutil.rmtree(f"_cand/{index}", ignore_errors=True)
        files = {k: v for k, v in files.items() if len(v) <= _MAX_FILE_BYTES}
        if exc is not None:
            out["results"].append(("raised", type(exc).__name__, {}))
        else:
            out["results"].append(_portable(actual) + (files,))
    return finish()


def _unpack(blob):
    """The candidate's blob, loaded as data only; raises on anything else."""
    raw = zlib.decompressobj().decompress(base64.b64decode(blob, validate=True), _MAX_BLOB_BYTES)
    data = _DataUnpickler(io.BytesIO(raw)).load()
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise TypeError("the candidate's outputs are not a result list")
    return data


def _candidate_output(entry):
    """(output, exception type name, files, opaque description) of one candidate result."""
    if not isinstance(entry, tuple) or not entry:
        raise ValueError("a malformed candidate result")
    kind = entry[0]
    if kind == "raised" and len(entry) == 3 and isinstance(entry[1], str):
        return None, entry[1], {}, None
    if kind == "value" and len(entry) == 3 and isinstance(entry[1], bytes) and isinstance(entry[2], dict):
        return _DataUnpickler(io.BytesIO(entry[1])).load(), None, entry[2], None
    if kind == "opaque" and len(entry) == 4 and isinstance(entry[3], dict):
        return None, None, entry[3], (str(entry[1]), str(entry[2]))
    raise ValueError("a malformed candidate result")


def judge_main(ground_truth, test_script, num_cases, token):
    """Process 2: the ground truth on the same cases and the comparison; reads the candidate's blob
    from stdin and prints the report after `token`."""
    import shutil

    report = {"cases": 0, "matched": 0, "candidate_errors": 0, "error_types": [], "first_mismatch": None,
              "reason": "", "gt_errors": 0}

    def finish():
        _emit(token, report)

    try:
        cand = _unpack(sys.stdin.read().strip())
    except Exception as exc:
        report["fatal"] = f"the program's outputs could not be read as data ({type(exc).__name__}: {str(exc)[:200]})"
        return finish()
    if cand.get("fatal"):
        report["fatal"] = str(cand["fatal"])[:500]
        if cand.get("fatal_side") == "gold":
            report["fatal_side"] = "gold"
        return finish()
    gt_name = _last_function(ground_truth)
    if gt_name is None:
        report["fatal"] = "the ground truth defines no top-level function"
        report["fatal_side"] = "gold"
        return finish()
    try:
        gt_ns = _load(ground_truth, "ground_truth")
    except BaseException as exc:  # e.g. a library missing from the sandbox interpreter
        report["fatal"] = f"{type(exc).__name__}: {exc}"[:500]
        report["fatal_side"] = "gold"
        return finish()
    try:
        cases = _cases(test_script, num_cases)
    except BaseException as exc:
        report["fatal"] = f"test input generator failed: {type(exc).__name__}: {exc}"[:500]
        report["fatal_side"] = "gold"
        return finish()
    if cand.get("cases") != _fingerprint(cases) or len(cand["results"]) != len(cases):
        # a deterministic generator (seeds fixed at 42) gives both processes the same inputs
        report["fatal"] = ("the program's process reported outputs for other inputs than the generated cases "
                           "(a tampered run, or a test input generator that is not deterministic)")
        return finish()
    gt_fn = gt_ns[gt_name]
    report["function"] = cand.get("function")
    types = []
    for index, case in enumerate(cases):
        report["cases"] += 1
        expected, gt_exc, gt_files = _call(gt_fn, case, f"_gt/{index}")
        shutil.rmtree(f"_gt/{index}", ignore_errors=True)
        try:
            actual, exc_name, files, opaque = _candidate_output(cand["results"][index])
        except Exception as exc:
            actual, exc_name, files, opaque = None, None, {}, ("unreadable", f"{type(exc).__name__}")
        if gt_exc is not None:
            report["gt_errors"] += 1
            ok = exc_name is not None and exc_name == type(gt_exc).__name__
            why = "the reference raised on this case and the program did not raise the same exception type"
        elif exc_name is not None:
            report["candidate_errors"] += 1
            types.append(exc_name)
            ok, why = False, f"raised {exc_name}"
        else:
            if opaque is not None:
                ok = (type(expected).__name__, _safe_repr(expected)) == opaque
                why = "" if ok else f"values differ ({opaque[0]} vs expected {_describe(expected)})"
            else:
                ok, why = same(expected, actual)
            gt_files = {k: v for k, v in gt_files.items() if len(v) <= _MAX_FILE_BYTES}
            if ok and set(gt_files) != set(files):
                ok, why = False, f"wrote files {sorted(files)} but the reference wrote {len(gt_files)} file(s)"
            elif ok:
                for name in gt_files:
                    if not isinstance(files.get(name), bytes) or not _same_file(name, gt_files[name], files[name]):
                        ok, why = False, f"file {name} differs"
                        break
        if ok:
            report["matched"] += 1
        elif report["first_mismatch"] is None:
            report["first_mismatch"] = index
            report["reason"] = why
            report["detail"] = "" if exc_name is not None else _safe_repr(expected)[:300]
    report["error_types"] = sorted(set(types))
    return finish()
