"""Assignment 09's epilogues, right and typically wrong: a file, since Triton reads a @triton.jit function's source.
Each is epilogue(acc, bias_ptr, rows, cols, M, N) -> the fp32 tile the kernel stores once, in fp16."""
import triton
import triton.language as tl


@triton.jit
def good(acc, bias_ptr, rows, cols, M, N):
    bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0)
    return tl.maximum(acc + bias[None, :], 0.0)


@triton.jit
def good_where(acc, bias_ptr, rows, cols, M, N):       # a 2-D load, tl.where for the ReLU, no `other`
    x = acc + tl.load(bias_ptr + cols[None, :], mask=cols[None, :] < N).to(tl.float32)
    return tl.where(x > 0, x, 0.0)


@triton.jit
def no_relu(acc, bias_ptr, rows, cols, M, N):
    return acc + tl.load(bias_ptr + cols, mask=cols < N, other=0.0)[None, :]


@triton.jit
def relu_first(acc, bias_ptr, rows, cols, M, N):
    return tl.maximum(acc, 0.0) + tl.load(bias_ptr + cols, mask=cols < N, other=0.0)[None, :]


@triton.jit
def no_bias(acc, bias_ptr, rows, cols, M, N):
    return tl.maximum(acc, 0.0)


@triton.jit
def subtracted(acc, bias_ptr, rows, cols, M, N):
    return tl.maximum(acc - tl.load(bias_ptr + cols, mask=cols < N, other=0.0)[None, :], 0.0)


@triton.jit
def by_row(acc, bias_ptr, rows, cols, M, N):           # one bias per token: reads past b where M > N
    return tl.maximum(acc + tl.load(bias_ptr + rows, mask=rows < M, other=0.0)[:, None], 0.0)


@triton.jit
def by_row_n(acc, bias_ptr, rows, cols, M, N):         # one bias per token, masked at N
    return tl.maximum(acc + tl.load(bias_ptr + rows, mask=rows < N, other=0.0)[:, None], 0.0)


@triton.jit
def column_vector(acc, bias_ptr, rows, cols, M, N):    # the right values, broadcast as a column: [BLOCK_N, 1]
    return tl.maximum(acc + tl.load(bias_ptr + cols, mask=cols < N, other=0.0)[:, None], 0.0)


@triton.jit
def first_tile(acc, bias_ptr, rows, cols, M, N):       # b's first BLOCK_N values in every tile
    ks = tl.arange(0, acc.shape[1])
    return tl.maximum(acc + tl.load(bias_ptr + ks, mask=ks < N, other=0.0)[None, :], 0.0)


@triton.jit
def no_mask(acc, bias_ptr, rows, cols, M, N):          # right wherever C is stored; reads past b at the edge
    return tl.maximum(acc + tl.load(bias_ptr + cols)[None, :], 0.0)


@triton.jit
def mask_m(acc, bias_ptr, rows, cols, M, N):           # the mask's bound is the number of tokens
    return tl.maximum(acc + tl.load(bias_ptr + cols, mask=cols < M, other=0.0)[None, :], 0.0)


@triton.jit
def floor_one(acc, bias_ptr, rows, cols, M, N):
    return tl.maximum(acc + tl.load(bias_ptr + cols, mask=cols < N, other=0.0)[None, :], 1.0)


@triton.jit
def relu6(acc, bias_ptr, rows, cols, M, N):
    x = acc + tl.load(bias_ptr + cols, mask=cols < N, other=0.0)[None, :]
    return tl.minimum(tl.maximum(x, 0.0), 6.0)


@triton.jit
def inverted(acc, bias_ptr, rows, cols, M, N):
    return tl.minimum(acc + tl.load(bias_ptr + cols, mask=cols < N, other=0.0)[None, :], 0.0)


@triton.jit
def fp16_early(acc, bias_ptr, rows, cols, M, N):       # the tile rounded to fp16 before the bias
    bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0)
    return tl.maximum(acc.to(tl.float16) + bias[None, :], 0.0)


@triton.jit
def fp16_after(acc, bias_ptr, rows, cols, M, N):       # rounded once, after the sum: as good as the kernel's store
    bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0)
    return tl.maximum((acc + bias[None, :]).to(tl.float16), 0.0)


@triton.jit
def returns_nothing(acc, bias_ptr, rows, cols, M, N):
    tl.maximum(acc, 0.0)


@triton.jit
def stub(acc, bias_ptr, rows, cols, M, N):
    bias = ...  # YOUR ANSWER
    out = ...  # YOUR ANSWER
    return out
