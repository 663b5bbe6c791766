"""Timing with a library timer, and the rates that go on the roofline.

`triton.testing.do_bench` times with CUDA events, warms up first, and zeroes a 256 MB buffer
before every repetition, which flushes the L2 cache: each run reads its inputs from HBM.
We keep its median and the 20th/80th percentiles as the spread.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ladder.world import require_gpu


@dataclass
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float

    def __str__(self) -> str:
        return f"{self.median_ms:.4f} ms [{self.p20_ms:.4f}, {self.p80_ms:.4f}]"


LONG_RUN_MS = 100   # a run this long flushes L2 itself, and settles the clocks: a few runs time it


def long_run_repeats(first_ms: float) -> int:
    """How many runs, the first timed run included, time a kernel whose first timed run took `first_ms` (0:
    do_bench's windows instead). do_bench first runs a kernel five times to size its windows: 60 s for a naive
    rung's 12 s runs. A run of a second or more is timed once: on the H100 two such runs of each naive rung
    (1.2-12 s) agreed to 0.01%."""
    return 0 if first_ms < LONG_RUN_MS else (3 if first_ms < 1000 else 1)


def bench(fn, warmup_ms: int = 200, rep_ms: int = 500, warmed: bool = False) -> Timing:
    """Median and spread of `fn`'s run time; a long warm-up lets the clocks settle first. A kernel whose
    first timed run takes over LONG_RUN_MS is timed over a few runs instead (CUDA events, as do_bench).
    `warmed`: `fn` has just run (a correctness check), so it has compiled: no untimed first call."""
    require_gpu("Timing")
    import triton.testing
    if not warmed:
        fn()  # a first call may compile (Triton, CuPy): not a measurement
    first = _event_ms(fn)
    repeats = long_run_repeats(first)
    if repeats:
        times = sorted([first] + [_event_ms(fn) for _ in range(repeats - 1)])
        return Timing(times[len(times) // 2], times[0], times[-1])
    median, p20, p80 = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
    return Timing(median, p20, p80)


def _event_ms(fn) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


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
