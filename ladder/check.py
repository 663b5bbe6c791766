"""Correctness: poison the output, run, compare with a higher-precision reference.

The error is ||out - ref|| / ||ref|| (Frobenius), against a tolerance per output dtype. An output
element left unwritten stays NaN and fails the check; so does any NaN or Inf the kernel makes.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

# Relative-error tolerances by output dtype: rounding of the output alone is ~2^-11 for fp16
# and ~2^-8 for bf16; the rest is room for fp32 accumulation over long reductions.
_CHUNK = 1 << 24
TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-5, torch.float64: 1e-12}


@dataclass
class CheckResult:
    ok: bool
    rel_error: float
    tolerance: float
    non_finite: int  # NaN/Inf elements in the output (unwritten ones included: they stay NaN)

    def __str__(self) -> str:
        if self.non_finite:
            return f"FAIL: {self.non_finite} element(s) NaN/Inf (unwritten or overflowed)"
        verdict = "ok" if self.ok else "FAIL"
        return f"{verdict}: rel. error {self.rel_error:.1e} (tolerance {self.tolerance:.0e})"


def poison(out: torch.Tensor) -> torch.Tensor:
    return out.fill_(float("nan"))


def compare(out: torch.Tensor, ref: torch.Tensor, tolerance: float | None = None) -> CheckResult:
    tol = TOLERANCE[out.dtype] if tolerance is None else tolerance
    if out.shape != ref.shape:
        raise ValueError(f"output shape {tuple(out.shape)} != reference shape {tuple(ref.shape)}")
    got, want = out.detach().reshape(-1), ref.detach().reshape(-1).to(out.device)
    non_finite, diff2, ref2 = 0, 0.0, 0.0
    for i in range(0, got.numel(), _CHUNK):  # in float64, a chunk at a time: bounded memory
        g, w = got[i:i + _CHUNK].double(), want[i:i + _CHUNK].double()
        non_finite += int((~torch.isfinite(g)).sum())
        diff2 += float(((g - w) ** 2).sum())
        ref2 += float((w ** 2).sum())
    if non_finite:
        return CheckResult(False, float("inf"), tol, non_finite)
    err = (diff2 ** 0.5) / (ref2 ** 0.5 if ref2 > 0 else 1.0)
    return CheckResult(err <= tol, err, tol, 0)


def check(run, inputs: tuple, out: torch.Tensor, ref: torch.Tensor, tolerance: float | None = None) -> CheckResult:
    """Poison `out`, call `run(*inputs, out=out)`, compare `out` with `ref`."""
    poison(out)
    run(*inputs, out=out)
    if out.is_cuda:
        torch.cuda.synchronize()
    return compare(out, ref, tolerance)
