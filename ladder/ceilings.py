"""The roof as it really is: ceilings measured on this GPU, cached per GPU.

* copy_TBps: a large device-to-device copy, counting bytes read plus bytes written;
* fp32_TFLOPs: a CUDA-core kernel of independent FMAs (kernels/cuda/ceilings/fma_peak.cu);
* fp16_tc_TFLOPs: a large fp16 matmul through cuBLAS (torch.matmul), on random data.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch

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
    if cache.exists() and not refresh:
        return json.loads(cache.read_text())
    result = {"copy_TBps": copy_TBps(), "fp32_TFLOPs": fp32_TFLOPs(gpu), "fp16_tc_TFLOPs": fp16_tc_TFLOPs()}
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(result, indent=1))
    return result


def datasheet_ceilings(gpu_sheet) -> dict | None:
    if gpu_sheet is None:
        return None
    return {"copy_TBps": gpu_sheet.hbm_TBps, "fp32_TFLOPs": gpu_sheet.fp32_TFLOPs,
            "fp16_tc_TFLOPs": gpu_sheet.fp16_tc_TFLOPs}
