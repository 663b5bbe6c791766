"""Timing with a library timer, and the rates that go on the roofline.

`triton.testing.do_bench` times with CUDA events, warms up first, and zeroes a 256 MB buffer
before every repetition, which flushes the L2 cache: each run reads its inputs from HBM.
We keep its median and the 20th/80th percentiles as the spread.
"""
from __future__ import annotations

from dataclasses import dataclass

from ladder.world import require_gpu


@dataclass
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float

    def __str__(self) -> str:
        return f"{self.median_ms:.4f} ms [{self.p20_ms:.4f}, {self.p80_ms:.4f}]"


def bench(fn, warmup_ms: int = 200, rep_ms: int = 500) -> Timing:
    """Median and spread of `fn`'s run time; a long warm-up lets the clocks settle first."""
    require_gpu("Timing")
    import triton.testing
    median, p20, p80 = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
    return Timing(median, p20, p80)


def search_bench(fn, warmup_ms: float, rep_ms: float, quantiles: list[float]) -> list[float]:
    """do_bench for an autotuning search: windows of warmup_ms and rep_ms, shortened for short kernels so
    that a configuration costs at most ~250 runs (each run also flushes L2: on a 10 µs kernel Triton's
    time windows would mean tens of thousands of flushes per configuration, seconds each)."""
    require_gpu("Timing")
    import triton.testing
    first_look = triton.testing.do_bench(fn, warmup=1, rep=1)
    ms = triton.testing.do_bench(fn, warmup=min(warmup_ms, 50 * first_look), rep=min(rep_ms, 200 * first_look),
                                 quantiles=quantiles)
    return ms if isinstance(ms, list) else [ms]  # do_bench gives a bare float for a single quantile


def rates(flops: float, nbytes: float, ms: float) -> dict:
    """Achieved TFLOP/s and TB/s (counting the problem's minimum bytes) for a time in ms."""
    seconds = ms * 1e-3
    return {"tflops": flops / seconds / 1e12, "tbps": nbytes / seconds / 1e12}
