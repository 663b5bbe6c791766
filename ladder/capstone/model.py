"""A GPT-2-shaped decoder-only transformer from plain torch modules, with random weights (nothing is
downloaded): token and position embeddings, `layers` pre-norm blocks (layer norm, causal self-attention,
residual add; layer norm, MLP d -> 4d -> d with GELU in its tanh form, residual add), a final layer norm
and the vocabulary projection. Forward pass only (inference).

`use_our_kernels(model)` swaps in two of the repository's Triton kernels through ladder.ops, the operators
any model can call (torch.compile sees into their Triton kernels):
  ladder.ops.attention  the flash-attention rung 6 (kernels/triton/attention.py), causal, reading the
                        q, k, v views of the qkv projection in place
  ladder.ops.matmul     rung 6's matmul with its bias + GELU epilogue fused, reading nn.Linear's weight as
                        stored (weight.t() is a view)
`use_our_kernels(model, every_linear=True)` sends every other linear through ladder.ops.matmul too (the qkv and
output projections, the MLP's second layer, the vocabulary projection): the whole model on the ops.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ladder import ops
from ladder.capstone.config import PRESETS, Config  # noqa: F401  (the model's shapes, read from here too)


# ------------------------------------------------------------- the model

class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ours = self.every_linear = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, d = x.shape
        # (B, S, 3, H, D) -> three (B, H, S, D) views of one buffer: no copy for SDPA
        qkv = linear(self.qkv, x) if self.every_linear else self.qkv(x)
        q, k, v = qkv.view(B, S, 3, self.cfg.heads, self.cfg.head_dim).permute(2, 0, 3, 1, 4)
        if self.ours:
            o = ops.attention(q, k, v, causal=True)   # laid out as q: (B, S, H, D) in memory
        else:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o = o.transpose(1, 2).reshape(B, S, d)
        return linear(self.proj, o) if self.every_linear else self.proj(o)


class MLP(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model)
        self.ours = self.every_linear = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = linear(self.fc, x, "gelu") if self.ours else F.gelu(self.fc(x), approximate="tanh")
        return linear(self.proj, h) if self.every_linear else self.proj(h)


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
        self.every_linear = False

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        return linear(self.lm_head, x) if self.every_linear else self.lm_head(x)


def linear(layer: nn.Linear, x: torch.Tensor, activation: str | None = None) -> torch.Tensor:
    """layer(x), then `activation`, through ladder.ops.matmul: the weight read as stored (weight.t() is a view),
    the bias and activation in its epilogue, x's leading dimensions flattened into the rows."""
    out = ops.matmul(x.reshape(-1, x.shape[-1]), layer.weight.t(), layer.bias, activation)
    return out.view(*x.shape[:-1], out.shape[-1])


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


def use_our_kernels(model: GPT, on: bool = True, every_linear: bool = False) -> GPT:
    """Swap our Triton kernels in (or out): every block's attention, and its MLP's first layer + GELU; with
    `every_linear`, every other linear too."""
    for block in model.blocks:
        block.attn.ours = block.mlp.ours = on
        block.attn.every_linear = block.mlp.every_linear = on and every_linear
    model.every_linear = on and every_linear
    return model


def uses_our_kernels(model: GPT) -> bool:
    return all(b.attn.ours and b.mlp.ours for b in model.blocks)
