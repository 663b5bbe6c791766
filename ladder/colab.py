"""Colab: every notebook's badge and first code cell, made from one template.

The repository's address lives in one place, pyproject.toml's [project.urls] Repository; this module
writes it into each notebook's "Open in Colab" badge (which opens that notebook itself) and into the
set-up cell, which must run before the package exists on the Colab machine and so is plain Python.
`python -m ladder make-exercises` rewrites both; tests/test_colab.py checks that they are current and runs
the cell in a simulated Colab.
"""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIRS = ("notebooks", "exercises", "solutions")
# "@title" folds the cell to this line in Colab; the metadata below folds it in JupyterLab: plumbing, not lesson
FIRST_LINE = "# @title Colab: fetch or update Kernel Ladder, then install it (elsewhere this cell does nothing)"
FOLDED = {"jupyter": {"source_hidden": True}, "cellView": "form"}

SETUP_CELL = FIRST_LINE + r"""
import os, subprocess, sys
if "google.colab" in sys.modules:
    url = os.environ.get("KERNEL_LADDER_URL", "REPOSITORY_URL")
    home = os.environ.get("KERNEL_LADDER_HOME", "/content/kernel-ladder")

    def sh(*command, cwd=None):
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr}")
        return done.stdout.strip()

    updated = os.path.isdir(os.path.join(home, ".git"))  # a second run in the same runtime
    if updated:
        sh("git", "-C", home, "pull", "-q", "--ff-only")
    else:
        sh("git", "clone", "-q", "--depth", "1", url, home)
    extra = sh(sys.executable, "-m", "ladder.install", "cupy-extra", cwd=home)  # CuPy (GPU arrays; it launches the lessons' CUDA C++ kernels), built for PyTorch's CUDA version
    sh(sys.executable, "-m", "pip", "install", "-q", "-e", f"{home}[{extra}]" if extra else home)
    if home not in sys.path:  # this kernel started before the install
        sys.path.insert(0, home)
    print(f"Kernel Ladder {'updated' if updated else 'cloned'} at {sh('git', '-C', home, 'rev-parse', '--short', 'HEAD')}, "
          f"installed {'with CuPy [' + extra + ']' if extra else 'without CuPy (no CUDA GPU)'}"
          + ("; restart the runtime to load the update" if updated and "ladder" in sys.modules else ""))"""

_BADGE = re.compile(r"\(https://colab\.research\.google\.com/github/[^)\s]+\.ipynb\)")


def repository_url() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["urls"]["Repository"]


def setup_cell(url: str | None = None) -> str:
    return SETUP_CELL.replace("REPOSITORY_URL", url or repository_url())


def badge_target(notebook: Path, url: str | None = None) -> str:
    """The Colab address that opens `notebook` (a path under ROOT) itself."""
    github = (url or repository_url()).removeprefix("https://github.com/").removesuffix(".git")
    return f"(https://colab.research.google.com/github/{github}/blob/main/{notebook.relative_to(ROOT).as_posix()})"


def notebooks() -> list[Path]:
    return [p for d in NOTEBOOK_DIRS for p in sorted((ROOT / d).glob("*.ipynb"))]


def with_setup(nb, path: Path):
    """`nb` with its badge opening `path` and its first code cell the set-up cell (inserted if missing)."""
    url = repository_url()
    title = nb.cells[0]
    title.source = _BADGE.sub(badge_target(path, url), title.source)
    code = next((c for c in nb.cells if c.cell_type == "code"), None)
    if code is None or not code.source.startswith(("# Colab:", FIRST_LINE)):
        import nbformat
        code = nbformat.v4.new_code_cell()
        nb.cells.insert(1, code)
    code.source = setup_cell(url)
    code.metadata.update(FOLDED)
    return nb


def write_setup_cells() -> list[Path]:
    import nbformat
    written = []
    for path in notebooks():
        nb = nbformat.read(path, as_version=4)
        before = nbformat.writes(nb)
        if nbformat.writes(with_setup(nb, path)) != before:
            nbformat.write(nb, path)
            written.append(path)
    return written
