"""Colab: every notebook's badge opens itself and its set-up cell is the one ladder.colab makes; and that cell,
run in a simulated Colab (a fresh virtual environment with torch already there, a stand-in `google.colab`
module, the repository's address pointed at a local clone), clones, installs, and lets a lesson run."""
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import nbformat
import pytest

from ladder import colab

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = colab.notebooks()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_badge_and_set_up_cell_are_current(path):
    nb = nbformat.read(path, as_version=4)
    rel = path.relative_to(ROOT).as_posix()
    assert f"/blob/main/{rel})" in nb.cells[0].source, f"{rel}'s Colab badge does not open {rel}"
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert first_code.source == colab.setup_cell(), "run `python -m ladder make-exercises` to rewrite the set-up cells"
    assert first_code.metadata["jupyter"]["source_hidden"] and first_code.metadata["cellView"] == "form"


def test_the_address_lives_in_pyproject():
    assert colab.repository_url() in colab.setup_cell()
    assert colab.badge_target(ROOT / "exercises" / "x.ipynb", "https://github.com/a/b") == \
        "(https://colab.research.google.com/github/a/b/blob/main/exercises/x.ipynb)"


SIMULATION = textwrap.dedent("""
    import json, os, sys, types
    sys.modules["google.colab"] = types.ModuleType("google.colab")   # what Colab's kernel has imported
    cells = json.loads(sys.argv[1])
    exec(cells[0])                                # the set-up cell: clone and install
    os.chdir(os.path.join(os.environ["KERNEL_LADDER_HOME"], "notebooks"))
    for cell in cells[1:]:                        # the lesson's first cells
        exec(cell)
    import ladder
    print("ladder from", ladder.__file__)
    exec(cells[0])                                # run again in the same runtime: an update, not a failed clone
""")


def test_set_up_cell_in_a_simulated_colab(tmp_path):
    lesson = nbformat.read(ROOT / "notebooks" / "00_roofline.ipynb", as_version=4)
    code = [c.source for c in lesson.cells if c.cell_type == "code"][:4]
    assert code[0] == colab.setup_cell()
    # Colab's Python has torch and friends already: the new environment sees this one's packages, not its
    # editable install of this repository (a .pth line adds a directory, not the .pth hooks inside it)
    venv = tmp_path / "colab-python"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    inherited = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site, "colab-preinstalled.pth").write_text("\n".join(sorted(inherited)) + "\n")
    home = tmp_path / "content" / "kernel-ladder"
    env = {**os.environ, "KERNEL_LADDER_URL": str(ROOT), "KERNEL_LADDER_HOME": str(home), "MPLBACKEND": "Agg",
           "PYTHONPATH": ""}
    run = subprocess.run([python, "-c", SIMULATION, json.dumps(code)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    head = subprocess.run(["git", "-C", str(home), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert lines[0] == f"Kernel Ladder cloned at {head}, installed without CuPy (no CUDA GPU)", run.stdout
    assert f"ladder from {home}/ladder/__init__.py" in lines, run.stdout
    assert any(line.startswith("CPU only") for line in lines), run.stdout   # the lesson's world line
    assert lines[-1] == (f"Kernel Ladder updated at {head}, installed without CuPy (no CUDA GPU); "
                         "restart the runtime to load the update"), run.stdout
