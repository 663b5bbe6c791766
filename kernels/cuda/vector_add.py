"""Vector add in CUDA C++, C = A + B on fp16 vectors: the launchers of kernels/cuda/vector_add/1_scalar.cu (2-byte
loads) and 2_vectorized.cu (16-byte loads). The problem and its other rungs (Triton's, torch's) are in
kernels/vector_add.py.

Run alone, `python -m kernels.cuda.vector_add` checks both rungs against torch and times them beside torch.add on a
GPU; without one it compiles both files with NVRTC.
"""
from __future__ import annotations

import numpy as np
import torch
import triton

from ladder.runtime import cuda, validate
from ladder.runtime.world import WORLD

THREADS = 256
SCALAR_ELEMS_PER_THREAD = 4  # must match ELEMS_PER_THREAD in 1_scalar.cu


def scalar(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    out = validate.vector_operands(a, b, out, device="cuda")
    n = a.numel()
    per_block = THREADS * SCALAR_ELEMS_PER_THREAD
    if n:
        module = cuda.load("vector_add/1_scalar.cu", {"ELEMS_PER_THREAD": SCALAR_ELEMS_PER_THREAD})
        cuda.launch(module, "vector_add", (n + per_block - 1) // per_block, THREADS, (a, b, out, np.int64(n)))
    return out


def vectorized(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    out = validate.vector_operands(a, b, out, device="cuda", align_bytes=16)
    n = a.numel()
    threads_needed = n // 8 + 1  # one per 8-wide vector, plus one for the tail
    if n:
        module = cuda.load("vector_add/2_vectorized.cu")
        cuda.launch(module, "vector_add", (threads_needed + THREADS - 1) // THREADS, THREADS, (a, b, out, np.int64(n)))
    return out


# ------------------------------------------------------------- run alone: python -m kernels.cuda.vector_add

def _self_check(n: int = 1_000_003, timed: int = 100_000_000):
    """On a GPU both rungs checked against torch at a ragged length `n`, then timed beside torch.add at `timed`
    elements; without one, both files compiled for sm_80 by NVRTC."""
    if not WORLD.gpu:
        for filename, defines in (("1_scalar.cu", {"ELEMS_PER_THREAD": SCALAR_ELEMS_PER_THREAD}),
                                  ("2_vectorized.cu", {})):
            cubin = cuda.compile_cubin(f"vector_add/{filename}", "sm_80", tuple(defines.items()))
            print(f"compile-checked {filename} for sm_80 with NVRTC: {len(cubin)} bytes of cubin")
        print("running them needs a GPU")
        return
    runs = {"1_scalar": scalar, "2_vectorized": vectorized}
    a, b = (torch.randn(n, device="cuda").half() for _ in range(2))
    for name, run in runs.items():
        print(f"checked {name} at n={n}: " + ("equal to torch.add" if torch.equal(run(a, b), a + b) else "WRONG"))
    a, b = (torch.randn(timed, device="cuda").half() for _ in range(2))
    print(f"median ms at n={timed} (triton.testing.do_bench), GB/s moved (A, B read, C written)")
    for name, run in {"torch.add": torch.add, **runs}.items():
        ms = triton.testing.do_bench(lambda: run(a, b))
        print(f"  {name:14s} {ms:7.3f} ms  {3 * 2 * timed / ms / 1e6:6.0f}")


if __name__ == "__main__":
    _self_check()
