"""Execute the example notebooks (scripted simulation LM) and check what they compute.

Each notebook runs in a fresh `python3` kernel on a temporary copy (the committed files stay without
outputs). Its last cell asserts the meaningful facts (the metric separates right from wrong programs,
every gold program passes, HERO-O does not lose to the seed in the simulation) and prints a SUMMARY
line that this test reads back. The Cypher notebook must stop its embedded engine.

Needs `nbclient` and `ipykernel` (both come with nbmake). jupyter_client finds the `python3` kernel
through ipykernel itself, so no `ipykernel install` step is needed; the kernel runs this interpreter.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import sys
import time
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NAMES = ["01_quickstart_sql.ipynb", "02_cypher.ipynb", "03_python.ipynb"]
LABELS = {"seed", "HERO-O", "HERO-O + HERO-T"}


@pytest.fixture(scope="module")
def kernel_name() -> str:
    try:
        spec = KernelSpecManager().get_kernel_spec("python3")
    except NoSuchKernel:  # pragma: no cover - depends on the installation
        pytest.fail("no 'python3' Jupyter kernel: pip install ipykernel (or nbmake), "
                    "or run `python -m ipykernel install --user`")
    exe = spec.argv[0]
    if exe not in ("python", "python3", "{python}") and Path(exe).resolve() != Path(sys.executable).resolve():
        # a user-installed spec pointing at another interpreter would not see dspy_hero
        pytest.fail(f"the 'python3' kernel runs {exe}, not {sys.executable}; run `{sys.executable} -m ipykernel install --user`")
    return "python3"


def run_notebook(name: str, tmp_path: Path, kernel_name: str) -> tuple[nbformat.NotebookNode, float]:
    copy = tmp_path / name
    shutil.copy(NOTEBOOKS / name, copy)
    nb = nbformat.read(copy, as_version=4)
    env_cwd = tmp_path / "work"
    env_cwd.mkdir()
    client = NotebookClient(nb, timeout=120, kernel_name=kernel_name, allow_errors=True,
                            resources={"metadata": {"path": str(env_cwd)}})
    start = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - start
    nbformat.write(nb, copy)
    return nb, elapsed


def outputs_text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def errors_of(nb) -> list[str]:
    return [f"cell {i}: {o['ename']}: {o['evalue']}" for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
            for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def test_committed_notebooks_are_generated_and_have_no_outputs():
    sys.path.insert(0, str(NOTEBOOKS))
    try:
        import build_notebooks
    finally:
        sys.path.remove(str(NOTEBOOKS))
    assert build_notebooks.main(["--check"]) == 0, "run python notebooks/build_notebooks.py"
    for name in NAMES:
        nb = nbformat.read(NOTEBOOKS / name, as_version=4)
        nbformat.validate(nb)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code[0].source.lstrip().startswith("# HERO") and 'LM = "simulated"' in code[0].source
        assert "local_lm(size=\"1.5b\")" in code[0].source and 'dspy.LM("openai/gpt-4o-mini")' in code[0].source
        assert all(not c.outputs and c.execution_count is None for c in code), name
        text = "\n".join(c.source for c in nb.cells)
        assert "not model results" in text.lower()


@pytest.mark.parametrize("name", NAMES)
def test_notebook_executes(name, tmp_path, kernel_name):
    nb, elapsed = run_notebook(name, tmp_path, kernel_name)
    assert errors_of(nb) == []
    last = outputs_text(nb.cells[-1])
    match = re.search(r"(\{'seed'.*?\}) notebook ran in", last)
    assert match, last
    summary = ast.literal_eval(match.group(1))
    assert set(summary) == LABELS
    assert summary["HERO-O"] > summary["seed"] and summary["HERO-O + HERO-T"] >= summary["HERO-O"]
    # the plot cell drew a figure
    assert any("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    # every refinement evaluation, and the trace cell, ran
    assert any("refinement usage" in outputs_text(c) for c in nb.cells)
    assert any("changed: True" in outputs_text(c) for c in nb.cells)
    if name == "02_cypher.ipynb":
        pid = int(re.search(r"embedded engine stopped \(pid (\d+)\)", last).group(1))
        assert not _alive(pid), "the notebook left its FalkorDB server running"
    assert elapsed < 120, f"{name} took {elapsed:.0f}s"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False
