"""Vector add in Triton: one program adds BLOCK contiguous elements.

Triton picks the load width itself: with the pointers 16-byte aligned and `n` a multiple of 16
(it specializes on both at launch), the masked loads become 128-bit vectors; otherwise they
fall back to 16-bit scalars. `ladder.sass.triton_sass` shows both cases without a GPU.
"""
import triton
import triton.language as tl

# Argument types for compiling the kernel ahead of time (ladder.sass.triton_sass).
SIGNATURE = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "n": "i64", "BLOCK": "constexpr"}


@triton.jit
def vector_add_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK  # int64: 1e9 elements overflow int32 offsets
    offsets = start + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(c_ptr + offsets, a + b, mask=mask)
