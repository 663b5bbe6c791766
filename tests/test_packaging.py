"""pyproject.toml is the one place versions live; environment.yml must mirror it."""
import re
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

