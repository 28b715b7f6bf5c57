"""DSCodeBench-style output comparison, run INSIDE the Python sandbox (never imported by the host
metric; `ds_outputs_metric` sends this file's source with a call to `_main` appended).

One process per evaluation keeps it fast: the ground truth, the candidate and the test script are
each executed in their own namespace, `test_case_input_generator(n)` runs with Python's and numpy's
seeds fixed at 42, then the LAST top-level function of each program is applied to a deep copy of
every case (seeds reset to 42 before each call, so stochastic code sees the same stream) and the
outputs are compared by type. Files a call writes (e.g. a saved figure) are compared too: each call
runs in its own empty directory.

Semantics chosen where the benchmark leaves room: a case on which the ground truth raises matches
when the candidate raises the same exception type; dtypes of numbers are not compared (values are,
with tolerance); tuples and lists compare as sequences.
"""

# Executing the programs and treating any exception as a compared result is this file's job.
# ruff: noqa: BLE001, S102, S110

import ast
import contextlib
import copy
import io
import math
import os
import random
import sys

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


def _main(ground_truth, candidate, test_script, num_cases, nonce):
    import shutil

    report = {"cases": 0, "matched": 0, "candidate_errors": 0, "error_types": [], "first_mismatch": None,
              "reason": "", "gt_errors": 0}

    def finish():
        sys.stdout.flush()
        os.write(1, ("\n" + nonce + repr(report) + "\n").encode())

    gt_name = _last_function(ground_truth)
    try:
        cand_name = _last_function(candidate)
    except SyntaxError as exc:
        report["fatal"] = f"SyntaxError: {exc.msg} (line {exc.lineno})"
        return finish()
    if gt_name is None:
        report["fatal"] = "the ground truth defines no top-level function"
        report["fatal_side"] = "gold"
        return finish()
    if cand_name is None:
        report["fatal"] = "the program defines no top-level function"
        return finish()
    try:
        gt_ns = _load(ground_truth, "ground_truth")
    except BaseException as exc:  # e.g. a library missing from the sandbox interpreter
        report["fatal"] = f"{type(exc).__name__}: {exc}"[:500]
        report["fatal_side"] = "gold"
        return finish()
    try:
        cand_ns = _load(candidate, "candidate")
    except BaseException as exc:
        report["fatal"] = f"{type(exc).__name__}: {exc}"[:500]
        return finish()
    try:
        test_ns = _load(test_script, "test_script")
        _seed()
        with contextlib.redirect_stdout(io.StringIO()):
            cases = list(test_ns["test_case_input_generator"](num_cases))
    except BaseException as exc:  # the benchmark's own generator fails (e.g. library version drift)
        report["fatal"] = f"test input generator failed: {type(exc).__name__}: {exc}"[:500]
        report["fatal_side"] = "gold"
        return finish()
    gt_fn, cand_fn = gt_ns[gt_name], cand_ns[cand_name]
    report["function"] = cand_name
    types = []
    for index, case in enumerate(cases):
        report["cases"] += 1
        expected, gt_exc, gt_files = _call(gt_fn, case, f"_gt/{index}")
        actual, exc, files = _call(cand_fn, case, f"_cand/{index}")
        shutil.rmtree(f"_gt/{index}", ignore_errors=True)
        shutil.rmtree(f"_cand/{index}", ignore_errors=True)
        if gt_exc is not None:
            report["gt_errors"] += 1
            ok = exc is not None and type(exc) is type(gt_exc)
            why = "the reference raised on this case and the program did not raise the same exception type"
        elif exc is not None:
            report["candidate_errors"] += 1
            types.append(type(exc).__name__)
            ok, why = False, f"raised {type(exc).__name__}"
        else:
            ok, why = same(expected, actual)
            if ok and set(gt_files) != set(files):
                ok, why = False, f"wrote files {sorted(files)} but the reference wrote {len(gt_files)} file(s)"
            elif ok:
                for name in gt_files:
                    if not _same_file(name, gt_files[name], files[name]):
                        ok, why = False, f"file {name} differs"
                        break
        if ok:
            report["matched"] += 1
        elif report["first_mismatch"] is None:
            report["first_mismatch"] = index
            report["reason"] = why
            report["detail"] = "" if exc is not None else repr(expected)[:300]
    report["error_types"] = sorted(set(types))
    return finish()
