import triton
import triton.language as tl


@triton.jit
def good(acc, bias):
    return tl.maximum(acc + bias[None, :], 0.0)


@triton.jit
def no_relu(acc, bias):
    return acc + bias[None, :]


@triton.jit
def relu_first(acc, bias):
    return tl.maximum(acc, 0.0) + bias[None, :]


@triton.jit
def bias_by_row(acc, bias):
    return tl.maximum(acc + bias[:, None], 0.0)


@triton.jit
def no_bias(acc, bias):
    return tl.maximum(acc, 0.0)


@triton.jit
def stub(acc, bias):
    out = ...  # YOUR ANSWER
    return out
