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
        self.ours = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, d = x.shape
        # (B, S, 3, H, D) -> three (B, H, S, D) views of one buffer: no copy for SDPA
        q, k, v = self.qkv(x).view(B, S, 3, self.cfg.heads, self.cfg.head_dim).permute(2, 0, 3, 1, 4)
        if self.ours:
            o = ops.attention(q, k, v, causal=True)   # laid out as q: (B, S, H, D) in memory
        else:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(o.transpose(1, 2).reshape(B, S, d))


class MLP(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model)
        self.ours = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.ours:
            B, S, d = x.shape
            h = ops.matmul(x.reshape(B * S, d), self.fc.weight.t(), self.fc.bias, "gelu").view(B, S, -1)
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
        block.attn.ours = block.mlp.ours = on
    return model


def uses_our_kernels(model: GPT) -> bool:
    return all(b.attn.ours and b.mlp.ours for b in model.blocks)
