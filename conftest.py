"""Which tests touch Triton, for the tests under tests/ and the notebooks nbval checks.

A test that compiles or launches no Triton kernel (interpreted or compiled), uses no fixture that did, and starts no
subprocess gives the same result under every Triton version (a test that reads Triton's version or API without
compiling says so: @pytest.mark.triton_api), so CI's second leg (the oldest Triton the bounds admit)
need not run it again: `--triton-free-out FILE` writes the node ids of the tests this run found so, and
`--skip-listed FILE` deselects the tests a file lists. Notebooks always run (nbval): their kernels run in a process of
their own, where this cannot see.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

TOUCHED = "touched triton"   # the user property a test's report carries when it used Triton or a subprocess
_touched = False


def _noting(fn):
    def wrapper(*args, **kwargs):
        global _touched
        _touched = True
        return fn(*args, **kwargs)
    wrapper.__wrapped__ = fn
    return wrapper


def _watch_triton() -> None:
    """Launches (compiled and interpreted), compiles and subprocesses note that the running test used them."""
    import ladder  # noqa: F401 -- first: it sets TRITON_INTERPRET on a CPU before Triton reads it
    import triton
    import triton.compiler.compiler
    import triton.runtime.interpreter
    import triton.runtime.jit
    triton.runtime.jit.JITFunction.run = _noting(triton.runtime.jit.JITFunction.run)
    triton.runtime.interpreter.InterpretedFunction.run = _noting(triton.runtime.interpreter.InterpretedFunction.run)
    triton.compile = triton.compiler.compiler.compile = _noting(triton.compiler.compiler.compile)
    subprocess.Popen.__init__ = _noting(subprocess.Popen.__init__)


def pytest_addoption(parser):
    parser.addoption("--triton-free-out", metavar="FILE",
                     help="write the node ids of the tests that used neither Triton nor a subprocess")
    parser.addoption("--skip-listed", metavar="FILE", help="deselect the tests whose node ids FILE lists")


def pytest_configure(config):
    _watch_triton()
    config.triton_free = []


def pytest_collection_modifyitems(config, items):
    listed = config.getoption("--skip-listed")
    if listed:
        skip = set(Path(listed).read_text().splitlines())   # one node id a line (ids hold spaces)
        deselected = [item for item in items if item.nodeid in skip and item.path.suffix != ".ipynb"]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = [item for item in items if item not in deselected]


_TRITONIC_FIXTURES: set[str] = set()   # fixtures whose setup (in this process) used Triton: their values carry it


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    global _touched
    before, _touched = _touched, False
    try:
        return (yield)
    finally:
        if _touched:
            _TRITONIC_FIXTURES.add(fixturedef.argname)
        _touched = before or _touched


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    global _touched
    _touched = False
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    try:
        return (yield)
    finally:
        if _touched or item.get_closest_marker("triton_api") \
                or _TRITONIC_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.user_properties.append((TOUCHED, True))


def pytest_runtest_logreport(report):
    """Runs where the reports arrive (the controller under xdist): a passed call that touched nothing is listed."""
    touched = any(name == TOUCHED for name, _ in report.user_properties)   # xdist sends the pairs as lists
    if report.when == "call" and report.passed and not touched and not report.nodeid.split("::")[0].endswith(".ipynb"):
        _config.triton_free.append(report.nodeid)


def pytest_sessionstart(session):
    global _config
    _config = session.config


def pytest_sessionfinish(session):
    out = session.config.getoption("--triton-free-out")
    if out and not hasattr(session.config, "workerinput"):
        Path(out).write_text("".join(f"{nodeid}\n" for nodeid in sorted(session.config.triton_free)))
