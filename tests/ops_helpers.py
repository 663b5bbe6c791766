"""What the CPU and GPU tests of ladder.ops share: a matrix in each layout the kernels read in place, the float64
reference of a matmul with its epilogue, and a small pre-norm transformer block on the ops, what the tests compile
(torch.compile, fullgraph) and capture (CUDA graphs): GPT-2's layout, every linear layer through ops.matmul on
nn.Linear's weight as it is stored (read transposed, not copied), the attention through ops.attention on the views
of one packed projection. `TORCH_OPS` computes the same block with PyTorch's own ops: the reference, in float64.
And `Float64Attention`, what gradcheck differentiates to test the attention backward's kernels in float64."""
import math
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from kernels.triton import attention_backward as ab
from ladder import ops


def laid_out(x: torch.Tensor, layout: str) -> torch.Tensor:
    """The same matrix in another layout: "row" (contiguous), "col" (a transposed view), "offset" (a view that
    starts 2 bytes into its allocation), "broadcast" (its first row repeated: stride 0 down the columns)."""
    if layout == "row":
        return x.contiguous()
    if layout == "col":
        return x.t().contiguous().t()
    if layout == "offset":
        return torch.cat([x.new_zeros(1), x.reshape(-1)])[1:].view(x.shape)
    if layout == "broadcast":
        return x[:1].expand(x.shape)
    raise ValueError(f"no layout {layout!r}")


def _torch_matmul(a, b, bias=None, activation=None):
    y = a @ b + (0 if bias is None else bias)
    return {None: y, "relu": F.relu(y), "gelu": F.gelu(y, approximate="tanh")}[activation]


def reference(a, b, bias=None, activation=None):
    """ops.matmul in float64."""
    return _torch_matmul(a.double(), b.double(), None if bias is None else bias.double(), activation)


TORCH_OPS = SimpleNamespace(matmul=_torch_matmul,
                            attention=lambda q, k, v, causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal))


class Block(nn.Module):
    def __init__(self, d_model: int = 128, heads: int = 2, kernels=ops):
        super().__init__()
        self.heads, self.kernels = heads, kernels
        self.ln_1, self.ln_2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.fc, self.out = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)

    def linear(self, x, layer, activation=None):
        return self.kernels.matmul(x, layer.weight.t(), layer.bias, activation)

    def forward(self, x):
        B, S, d = x.shape
        qkv = self.linear(self.ln_1(x).reshape(B * S, d), self.qkv)
        q, k, v = qkv.view(B, S, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        o = self.kernels.attention(q, k, v, causal=True).transpose(1, 2).reshape(B * S, d)
        x = x + self.linear(o, self.proj).view(B, S, d)
        h = self.linear(self.ln_2(x).reshape(B * S, d), self.fc, "gelu")
        return x + self.linear(h, self.out).view(B, S, d)


def make(device: str, seed: int = 0) -> tuple[Block, Block]:
    """The block in fp16 on `device` (random weights, biases included), and the same weights in float64 on
    PyTorch's ops: the reference."""
    torch.manual_seed(seed)
    block = Block()
    for name, p in block.named_parameters():  # layer norms scale by about 1, the rest by about 0
        nn.init.normal_(p, mean=float(name.startswith("ln") and name.endswith("weight")), std=0.1)
    reference = Block(kernels=TORCH_OPS)
    reference.load_state_dict(block.state_dict())
    return block.to(device, torch.float16).eval(), reference.to(device, torch.float64).eval()


class Float64Attention(torch.autograd.Function):
    """(O, LSE) by float64 torch math; the backward a rung's kernels (`backward`, rung 2's by default) in float64,
    in the interpreter on CPU and on the GPU (their sums take the log-sum-exp's dtype). gradcheck then holds the
    kernels' dQ, dK, dV, the log-sum-exp's gradient included, to finite differences of the exact function.
    ladder.ops.attention itself is fp16 only, and the flash forward rounds O to fp16, so the forward here is
    torch's."""

    @staticmethod
    def forward(ctx, q, k, v, causal, backward=None):
        S, D = q.shape[-2:]
        s = q @ k.mT / math.sqrt(D)
        if causal:
            s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        lse = torch.logsumexp(s, -1)
        out = torch.exp(s - lse[..., None]) @ v
        ctx.causal, ctx.rung_backward = causal, backward or ab.backward
        ctx.save_for_backward(q, k, v, out, lse)
        return out, lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        return *ctx.rung_backward(q, k, v, out, lse, do, ctx.causal, dlse=dlse), None, None
