"""The kernel files are leaves: they import torch, triton, CuPy and ladder.runtime, never the harness, and each runs
alone (`python -m kernels.triton.matmul`). Checked in a fresh process in which importing any other ladder module, or
a problem definition (kernels/matmul.py, ...), raises ImportError."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KERNEL_FILES = sorted(f"kernels.{p.parent.name}.{p.stem}" for folder in ("cuda", "triton")
                      for p in (ROOT / "kernels" / folder).glob("*.py") if p.stem != "__init__")

# Installed first in the child process: a finder that refuses what a kernel file must not import.
BLOCK_HARNESS = """
import sys
class BlockHarness:
    def find_spec(self, name, path=None, target=None):
        top, _, rest = name.partition(".")
        allowed = {"ladder": ("", "runtime"), "kernels": ("", "cuda", "triton")}.get(top)
        if allowed is not None and rest.split(".")[0] not in allowed:
            raise ImportError(f"a kernel file imported {name}: only torch, triton, cupy and ladder.runtime are allowed")
sys.meta_path.insert(0, BlockHarness())
"""


def run_blocked(code: str, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK_HARNESS + code], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_kernel_files_are_found():
    assert {"kernels.triton.matmul", "kernels.triton.attention", "kernels.cuda.matmul",
            "kernels.cuda.attention"} <= set(KERNEL_FILES)


def test_kernel_files_import_no_harness():
    done = run_blocked(f"import importlib\nfor m in {KERNEL_FILES!r}: importlib.import_module(m)\n"
                       "print(sorted(m for m in sys.modules if m.startswith(('ladder', 'kernels'))))", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("module", ["kernels.triton.matmul", "kernels.triton.attention",
                                    "kernels.triton.attention_backward", "kernels.triton.vector_add",
                                    "kernels.cuda.matmul", "kernels.cuda.attention"])
def test_kernel_file_runs_alone(module):
    """Its self-check: every rung against torch (on a CPU: Triton's interpreter; CUDA C++ compiled, not run)."""
    done = run_blocked(f"import runpy\nrunpy.run_module({module!r}, run_name='__main__', alter_sys=True)", timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "WRONG" not in done.stdout and "checked" in done.stdout, done.stdout
