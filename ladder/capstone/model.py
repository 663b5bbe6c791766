"""A GPT-2-shaped decoder-only transformer from plain torch modules, with random weights (nothing is
downloaded): token and position embeddings, `layers` pre-norm blocks (layer norm, causal self-attention,
residual add; layer norm, MLP d -> 4d -> d with GELU in its tanh form, residual add), a final layer norm
and the vocabulary projection. Forward pass only (inference).

`use_our_kernels(model)` swaps in two of the repository's Triton kernels, as custom ops (torch.compile
keeps them as opaque calls and fuses around them):
  ladder::flash_attention  the flash-attention rung 6 (kernels/triton/attention.py), causal
  ladder::linear_gelu      rung 6's matmul with its bias + GELU epilogue (kernels/matmul_bias_relu.py)
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

import kernels.matmul_bias_relu as fused_matmul
from kernels.triton import attention as triton_attention


@dataclass(frozen=True)
class Config:
    name: str
    d_model: int
    heads: int
    layers: int
    seq: int
    batch: int
    vocab: int

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def tokens(self) -> int:
        """Rows of every activation matrix: batch × sequence."""
        return self.batch * self.seq

    def as_dict(self) -> dict:
        return asdict(self)


# GPT-2 small's widths (d = 768, 12 heads of 64, 12 layers, 50257 tokens); a tiny one for the CPU, whose
# head size (64) is still one the flash kernel takes.
PRESETS = {
    "gpt2-small": Config("gpt2-small", d_model=768, heads=12, layers=12, seq=1024, batch=8, vocab=50257),
    "tiny": Config("tiny", d_model=128, heads=2, layers=2, seq=64, batch=2, vocab=512),
}


# ------------------------------------------------------------- our kernels as custom ops

@torch.library.custom_op("ladder::flash_attention", mutates_args=())
def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention by the Triton flash rung 6; q, k, v (B, H, S, D) fp16. The kernel takes contiguous
    tensors: the views the model hands it are copied first (a cost SDPA, which takes strides, does not pay)."""
    return triton_attention.autotuned(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)


@flash_attention.register_fake
def _(q, k, v):
    return torch.empty(q.shape, dtype=q.dtype, device=q.device)


@torch.library.custom_op("ladder::linear_gelu", mutates_args=())
def linear_gelu(x: torch.Tensor, weight_kn: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gelu(x @ weight_kn + bias) in one kernel; x (M, K), weight_kn (K, N) row-major, bias (N,), fp16."""
    return fused_matmul.fused_gelu(x.contiguous(), weight_kn, bias)


@linear_gelu.register_fake
def _(x, weight_kn, bias):
    return x.new_empty((x.shape[0], weight_kn.shape[1]))


# ------------------------------------------------------------- the model

class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ours = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, d = x.shape
        # (B, S, 3, H, D) -> three (B, H, S, D) views of one buffer: no copy for SDPA
        q, k, v = self.qkv(x).view(B, S, 3, self.cfg.heads, self.cfg.head_dim).permute(2, 0, 3, 1, 4)
        if self.ours:
            o = torch.ops.ladder.flash_attention(q, k, v)
        else:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(o.transpose(1, 2).reshape(B, S, d))


class MLP(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model)
        self.fc_weight_kn = None   # fc's weight as K×N rows, made when our kernel is swapped in

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fc_weight_kn is not None:
            B, S, d = x.shape
            h = torch.ops.ladder.linear_gelu(x.reshape(B * S, d), self.fc_weight_kn, self.fc.bias).view(B, S, -1)
        else:
            h = F.gelu(self.fc(x), approximate="tanh")
        return self.proj(h)


class Block(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(cfg.d_model), CausalSelfAttention(cfg)
        self.ln_2, self.mlp = nn.LayerNorm(cfg.d_model), MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.wte, self.wpe = nn.Embedding(cfg.vocab, cfg.d_model), nn.Embedding(cfg.seq, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def build(cfg: Config | str, device: str, dtype: torch.dtype = torch.float16, seed: int = 0) -> GPT:
    """The model with GPT-2's initialisation (normal, std 0.02) on `device`, in eval mode."""
    cfg = PRESETS[cfg] if isinstance(cfg, str) else cfg
    torch.manual_seed(seed)
    model = GPT(cfg)
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            nn.init.normal_(p, std=0.02)   # GPT-2 starts them at 0; random ones make the bias epilogue count
        elif "ln" not in name:
            nn.init.normal_(p, std=0.02)
    return model.to(device=device, dtype=dtype).eval()


def tokens(cfg: Config, device: str, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator(device).manual_seed(seed)
    return torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), generator=gen, device=device)


def use_our_kernels(model: GPT, on: bool = True) -> GPT:
    """Swap our Triton kernels in (or out): every block's attention, and its MLP's first layer + GELU."""
    for block in model.blocks:
        block.attn.ours = on
        # our kernel reads B as K×N rows; nn.Linear keeps its weight N×K: transposed once, here
        block.mlp.fc_weight_kn = block.mlp.fc.weight.detach().t().contiguous() if on else None
    return model


def uses_our_kernels(model: GPT) -> bool:
    return all(b.attn.ours and b.mlp.fc_weight_kn is not None for b in model.blocks)
