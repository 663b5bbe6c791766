"""Vector add in Triton: one program adds BLOCK contiguous elements.

Triton picks the load width itself: with the pointers 16-byte aligned and `n` a multiple of 16
(it specializes on both at launch), the masked loads become 128-bit vectors; otherwise they
fall back to 16-bit scalars. `ladder.sass.triton_sass` shows both cases without a GPU.

This file holds the kernel and its launcher (`blocked`: rung triton:1_blocked of kernels/vector_add.py, the
problem) and a self-check: `python -m kernels.triton.vector_add` checks it against torch and, on a GPU, times it
beside torch.add.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ladder.runtime import validate
from ladder.runtime.world import WORLD, device

# Argument types for compiling the kernel ahead of time (ladder.sass.triton_sass).
SIGNATURE = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "n": "i64", "BLOCK": "constexpr"}
BLOCK = 4096  # elements a program adds


@triton.jit
def vector_add_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK  # int64: past 2**31 elements, int32 offsets would overflow
    offsets = start + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(c_ptr + offsets, a + b, mask=mask)


def blocked(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    out = validate.vector_operands(a, b, out, device=device())
    n = a.numel()
    if n:  # a program per BLOCK elements, the last one masked
        vector_add_kernel[(triton.cdiv(n, BLOCK),)](a, b, out, n, BLOCK=BLOCK)
    return out


# ------------------------------------------------------------- run alone: python -m kernels.triton.vector_add

def _self_check(n: int = 1_000_003, timed: int = 2**28):
    """The launcher checked against torch.add at a ragged length `n` (on a GPU, or in the interpreter on a CPU),
    then, on a GPU, timed beside torch.add at `timed` elements."""
    gen = torch.Generator(device()).manual_seed(0)
    a, b = (torch.randn(n, generator=gen, device=device()).half() for _ in range(2))
    print(f"checked 1_blocked at n={n} ({'GPU' if WORLD.gpu else 'CPU: the Triton interpreter'}): "
          + ("equal to torch.add" if torch.equal(blocked(a, b), a + b) else "WRONG"))
    if not WORLD.gpu:
        print("timing needs a GPU")
        return
    a, b = (torch.randn(timed, device="cuda").half() for _ in range(2))
    print(f"median ms at n={timed} (triton.testing.do_bench), GB/s moved (A, B read, C written)")
    for name, run in {"torch.add": torch.add, "1_blocked": blocked}.items():
        ms = triton.testing.do_bench(lambda: run(a, b))
        print(f"  {name:14s} {ms:7.3f} ms  {3 * 2 * timed / ms / 1e6:6.0f}")


if __name__ == "__main__":
    _self_check()
