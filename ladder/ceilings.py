"""The roof as it really is: ceilings measured on this GPU, cached per GPU.

* copy_TBps: a large device-to-device copy, counting bytes read plus bytes written;
* l2_TBps: a read kernel over a buffer that fits in L2 (a quarter of it, at most 8 MB), read many times over:
  the L2 roof of the hierarchical roofline (recordings made before it was measured have no L2 roof);
* fp32_TFLOPs: a CUDA-core kernel of independent FMAs (kernels/cuda/ceilings/fma_peak.cu);
* fp16_tc_TFLOPs: a large fp16 matmul through cuBLAS (torch.matmul), on random data.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch
import triton
import triton.language as tl

from ladder import cuda
from ladder.hardware import GPU, detect
from ladder.timing import bench
from ladder.world import require_gpu

CACHE_DIR = Path(os.environ.get("KERNEL_LADDER_CACHE", Path.home() / ".cache" / "kernel-ladder"))


def copy_TBps(nbytes: int = 2 << 30) -> float:
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src)).median_ms
    return 2 * nbytes / (ms * 1e-3) / 1e12


@triton.jit
def l2_read_kernel(x_ptr, out_ptr, n_blocks, passes, BLOCK: tl.constexpr):
    """Read blocks 0..n_blocks-1 of x, `passes` times over, the reads spread over the programs a grid apart; one
    fp32 per program is written (the sum, so the reads cannot be dropped)."""
    acc = tl.zeros((BLOCK,), tl.float32)
    for i in tl.range(tl.program_id(0), n_blocks * passes, tl.num_programs(0)):
        acc += tl.load(x_ptr + (i % n_blocks) * BLOCK + tl.arange(0, BLOCK))
    tl.store(out_ptr + tl.program_id(0), tl.sum(acc, axis=0))


L2_BLOCK = 4096   # fp32 elements a program reads per step: 16 KiB


def l2_read(x: torch.Tensor, passes: int, programs: int) -> torch.Tensor:
    """l2_read_kernel over fp32 `x` (a multiple of L2_BLOCK elements); returns the per-program sums."""
    out = torch.empty(programs, dtype=torch.float32, device=x.device)
    l2_read_kernel[(programs,)](x, out, x.numel() // L2_BLOCK, passes, BLOCK=L2_BLOCK, num_warps=8)
    return out


def l2_TBps(gpu: GPU, nbytes: int | None = None, passes: int = 200) -> float:
    """Read bandwidth of L2: a buffer of a quarter of L2 (at most 8 MB) read `passes` and 2·`passes` times
    in one kernel each; the difference of the two times is `passes` reads from L2 alone (the first pass, from
    DRAM after the timer's cache flush, and the launch cancel out)."""
    nbytes = nbytes or min(8 << 20, gpu.l2_bytes // 4)
    x = torch.rand(nbytes // 4 // L2_BLOCK * L2_BLOCK, device="cuda")
    programs = 4 * gpu.sm_count
    once, twice = (bench(lambda p=p: l2_read(x, p, programs)).median_ms for p in (passes, 2 * passes))
    return passes * x.numel() * 4 / ((twice - once) * 1e-3) / 1e12


def fp32_TFLOPs(gpu: GPU, iters: int = 1024, threads: int = 256) -> float:
    module = cuda.load("ceilings/fma_peak.cu")
    blocks = gpu.sm_count * 32
    out = torch.empty(blocks * threads, dtype=torch.float32, device="cuda")
    args = (out, np.int32(iters), np.float32(0.999), np.float32(1e-3))
    ms = bench(lambda: cuda.launch(module, "fma_peak", blocks, threads, args)).median_ms
    flops = blocks * threads * iters * 8 * 2  # 8 chains (CHAINS in fma_peak.cu), 2 FLOPs per FMA
    return flops / (ms * 1e-3) / 1e12


def fp16_tc_TFLOPs(n: int = 8192) -> float:
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
    ms = bench(lambda: a @ b).median_ms
    return 2 * n**3 / (ms * 1e-3) / 1e12


def measure(gpu: GPU | None = None, refresh: bool = False) -> dict:
    """Measured ceilings of this GPU: from the cache unless `refresh`, else measured (~10 s)."""
    require_gpu("Measuring ceilings")
    gpu = gpu or detect()
    cache = CACHE_DIR / f"ceilings-{gpu.slug}.json"
    measures = {"copy_TBps": copy_TBps, "l2_TBps": lambda: l2_TBps(gpu), "fp32_TFLOPs": lambda: fp32_TFLOPs(gpu),
                "fp16_tc_TFLOPs": fp16_tc_TFLOPs}
    result = json.loads(cache.read_text()) if cache.exists() and not refresh else {}
    if set(measures) <= set(result):
        return result
    result.update({name: run() for name, run in measures.items() if name not in result})  # an older cache: the rest
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(result, indent=1))
    return result


def datasheet_ceilings(gpu_sheet) -> dict | None:
    if gpu_sheet is None:
        return None
    return {"copy_TBps": gpu_sheet.hbm_TBps, "fp32_TFLOPs": gpu_sheet.fp32_TFLOPs,
            "fp16_tc_TFLOPs": gpu_sheet.fp16_tc_TFLOPs}
