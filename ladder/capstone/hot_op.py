"""The model's hottest op, the vocabulary projection, as the model runs it: `F.linear(x, w)` with the weight
stored vocabulary × d_model, so cuBLAS multiplies by its transpose (a `_tn_` kernel, not the `_nn_` one that
`x @ b` with b stored d_model × vocabulary gets). Run as a program it calls the op once between
cudaProfilerStart and cudaProfilerStop: the process `decision.hottest_op_ncu` profiles.

    python -m ladder.capstone.hot_op [MODEL] [VOCABULARY]
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from ladder.capstone.model import PRESETS, Config


def projection_operands(cfg: Config, vocab: int, gen: torch.Generator,
                        device: str = "cuda") -> tuple[torch.Tensor, torch.Tensor]:
    """The projection's input (tokens × d_model) and weight (vocab × d_model, nn.Linear's layout), fp16."""
    x = torch.randn(cfg.tokens, cfg.d_model, generator=gen, device=device, dtype=torch.float16)
    w = 0.02 * torch.randn(vocab, cfg.d_model, generator=gen, device=device, dtype=torch.float16)
    return x, w


def main(model: str = "gpt2-small", vocab: str | None = None) -> None:
    cfg = PRESETS[model]
    x, w = projection_operands(cfg, int(vocab) if vocab else cfg.vocab, torch.Generator("cuda").manual_seed(0))
    F.linear(x, w)  # cuBLAS's choice and warm-up outside the profiled range
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    F.linear(x, w)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main(*sys.argv[1:])
