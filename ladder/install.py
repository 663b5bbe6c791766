"""Which CuPy build fits this machine: `python -m ladder.install cupy-extra` prints the extra.

CuPy must load the same CUDA major version as torch (they share the process and the driver),
so the choice follows torch.version.cuda: 12.x -> [cuda12] (cupy-cuda12x), 13.x -> [cuda13]
(cupy-cuda13x). A CPU-only torch, or no GPU, needs no CuPy: CUDA C++ is then compiled only.
"""
import sys


def cupy_extra() -> str:
    import torch
    if not torch.version.cuda or not torch.cuda.is_available():
        return ""
    return {"12": "cuda12", "13": "cuda13"}.get(torch.version.cuda.split(".")[0], "")


if __name__ == "__main__":
    if sys.argv[1:] != ["cupy-extra"]:
        sys.exit("usage: python -m ladder.install cupy-extra")
    print(cupy_extra())
