"""The capstone model's shapes: GPT-2 small's widths at the batch lesson 05 runs, and a tiny one for the CPU.
(Apart from the model, so that ladder.dispatch can import them and ladder.capstone.model can import ladder.ops.)"""
from __future__ import annotations

from dataclasses import asdict, dataclass


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
