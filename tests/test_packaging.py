"""pyproject.toml is the one place versions live; environment.yml must mirror it. What an install carries."""
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _norm(req: str) -> str:
    return re.sub(r"\s+", "", req.replace('"', "'"))


def test_environment_yml_mirrors_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    wanted = set(map(_norm, project["dependencies"] + extras["test"] + extras["lab"]))
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    got = {_norm(r) for r in pip if not r.startswith("-e")}
    assert got == wanted, f"only in pyproject: {wanted - got}; only in environment.yml: {got - wanted}"



def test_a_non_editable_install_finds_the_recordings(tmp_path):
    """`pip install .` (no -e): the package carries results/ and reads it from there."""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp_path / "site"), str(ROOT)],
                   check=True, capture_output=True)
    probe = ("import ladder, ladder.results as r; rec = r.load(); "
             "print(ladder.__file__); print(rec.path.parent); print(rec.label, len(rec.runs()))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tmp_path / "site")})
    assert out.returncode == 0, out.stderr
    module, results_dir, summary = out.stdout.splitlines()
    assert module.startswith(str(tmp_path / "site")) and results_dir == str(tmp_path / "site" / "ladder" / "recorded")
    assert summary.startswith("recorded on NVIDIA H100 80GB HBM3 ") and int(summary.split()[-1]) > 0   # results.PREFERRED
