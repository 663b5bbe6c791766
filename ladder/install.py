"""Which CuPy build fits this machine: `python -m ladder.install cupy-extra` prints the extra (see
`ladder.runtime.cuda.cupy_extra`). A CPU-only torch, or no GPU, needs no CuPy: CUDA C++ is then compiled only."""
import sys

from ladder.runtime.cuda import cupy_extra

if __name__ == "__main__":
    if sys.argv[1:] != ["cupy-extra"]:
        sys.exit("usage: python -m ladder.install cupy-extra")
    print(cupy_extra())
