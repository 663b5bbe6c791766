"""Timing with a library timer, and the rates that go on the roofline.

`event_bench` is `triton.testing.do_bench`'s method: CUDA events around each run, a warm-up first, and a
256 MB buffer zeroed before every run, which flushes the L2 cache so that each run reads its inputs from HBM.
One step is added. A run's start event waits in the stream behind the flush, not behind the run's launch: when
the host takes longer to launch a kernel than the GPU takes to flush (a CuPy launch from Python costs tens of µs or
more: argument checks, tensor maps, the driver call), the start event fires early and the run's time holds the host's
wait. So after the flush the GPU also spins for HOST_COVER_US (`torch.cuda._sleep`) before the
start event: by then the run is queued behind it, and the time between the events is the GPU's alone.
We keep the median and the 20th/80th percentiles as the spread.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from ladder.runtime.world import require_gpu


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
    event_bench's windows instead). event_bench first runs a kernel five times to size its windows: 60 s for a
    naive rung's 12 s runs. A run of a second or more is timed once."""
    return 0 if first_ms < LONG_RUN_MS else (3 if first_ms < 1000 else 1)


def bench(fn, warmup_ms: int = 200, rep_ms: int = 500, warmed: bool = False) -> Timing:
    """Median and spread of `fn`'s run time; a long warm-up lets the clocks settle first. A kernel whose
    first timed run takes over LONG_RUN_MS is timed over a few runs instead (CUDA events, as do_bench).
    `warmed`: `fn` has just run (a correctness check), so it has compiled: no untimed first call."""
    require_gpu("Timing")
    if not warmed:
        fn()  # a first call may compile (Triton, CuPy): not a measurement
    first = _event_ms(fn)
    repeats = long_run_repeats(first)
    if repeats:
        times = sorted([first] + [_event_ms(fn) for _ in range(repeats - 1)])
        return Timing(times[len(times) // 2], times[0], times[-1])
    median, p20, p80 = event_bench(fn, warmup_ms, rep_ms, [0.5, 0.2, 0.8])
    return Timing(median, p20, p80)


FLUSH_BYTES = 256 << 20   # zeroed before every run, as do_bench does: more than any GPU's L2
HOST_COVER_US = 200       # the GPU's spin after each flush: longer than any launch here takes the host


@functools.lru_cache(maxsize=None)
def _cycles_per_us(device: int) -> float:
    """The GPU's clock as torch.cuda._sleep counts it (cycles per microsecond), measured once."""
    cycles = 10_000_000
    torch.cuda._sleep(cycles // 10)  # wake the clocks first
    ms = _event_ms(lambda: torch.cuda._sleep(cycles))
    return cycles / (ms * 1e3)


def event_bench(fn, warmup_ms: float, rep_ms: float, quantiles: list[float]) -> list[float]:
    """The `quantiles` of `fn`'s run time in ms: do_bench's windows (runs sized from a first estimate, warm-up
    runs, then timed runs each after an L2 flush), each timed run's start event behind HOST_COVER_US of GPU spin
    (this module's docstring says why)."""
    require_gpu("Timing")
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    cover = int(HOST_COVER_US * _cycles_per_us(torch.cuda.current_device()))
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        flush.zero_()
        fn()
    end.record()
    end.synchronize()
    estimate_ms = max(start.elapsed_time(end) / 5, 1e-3)
    warmups = max(1, int(warmup_ms / estimate_ms))
    repeats = max(1, int(rep_ms / (estimate_ms + HOST_COVER_US / 1e3)))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    for _ in range(warmups):
        fn()
    for i in range(repeats):
        flush.zero_()
        torch.cuda._sleep(cover)
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    times = torch.tensor([s.elapsed_time(e) for s, e in zip(starts, ends)], dtype=torch.float)
    return torch.quantile(times, torch.tensor(quantiles, dtype=torch.float)).tolist()


def _event_ms(fn) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def search_bench(fn, warmup_ms: float, rep_ms: float, quantiles: list[float]) -> list[float]:
    """event_bench for an autotuning search: windows of warmup_ms and rep_ms, shortened for short kernels so
    that a configuration costs at most ~250 runs (each run also flushes L2: on a 10 µs kernel Triton's
    time windows would mean tens of thousands of flushes per configuration, seconds each)."""
    first_look = event_bench(fn, 1, 1, [0.5])[0]
    run_ms = first_look + HOST_COVER_US / 1e3  # what a timed run costs: its flush is not counted, its cover is
    return event_bench(fn, min(warmup_ms, 50 * first_look), min(rep_ms, 200 * run_ms), quantiles)


def rates(flops: float, nbytes: float, ms: float) -> dict:
    """Achieved TFLOP/s and TB/s (counting the problem's minimum bytes) for a time in ms."""
    seconds = ms * 1e-3
    return {"tflops": flops / seconds / 1e12, "tbps": nbytes / seconds / 1e12}
