"""The roof as it really is: ceilings measured on this GPU, cached per GPU.

* copy_TBps: a large device-to-device copy, counting bytes read plus bytes written;
* l2_TBps: a read kernel over a buffer that fits in L2 (a quarter of it, at most 8 MB), read many times over:
  the L2 roof of the hierarchical roofline (recordings made before it was measured have no L2 roof);
* fp32_TFLOPs: a CUDA-core kernel of independent FMAs (kernels/cuda/ceilings/fma_peak.cu);
* cublas_TFLOPs: a large fp16 matmul through cuBLAS (torch.matmul), on random data: a library's speed, an anchor
  the lessons compare with, not a ceiling;
* mma_sync_TFLOPs: independent mma.sync m16n8k16 (HMMA) from registers (kernels/cuda/ceilings/mma_sync_peak.cu),
  the instruction CUDA rungs 4-6 use: on sm_75, which has only m16n8k8, each is two m16n8k8 (measured the same way);
* wgmma_TFLOPs (Hopper, sm_90 only): wgmma m64n256k16 (HGMMA) from shared memory (kernels/cuda/ceilings/wgmma_peak.cu),
  the instruction rungs 7-8 use.
The two instruction roofs are left out where the GPU lacks the instruction (no key: not measured), and
recordings made before they were measured have none: the roofline then draws no such roof.
* fp16_tc_TFLOPs, the tensor-core roof every tensor-core rung is rated against: the highest instruction roof
  measured (wgmma on Hopper, mma.sync before it), so that no kernel runs over 100% of it (`with_tensor_core_roof`);
  a run that measured no instruction roof has none.
"""
from __future__ import annotations

import json
import warnings

import numpy as np
import torch
import triton
import triton.language as tl

from ladder.roofline import INSTRUCTION_ROOFS, with_tensor_core_roof
from ladder.runtime import cuda
from ladder.runtime.cache import CACHE_DIR
from ladder.runtime.hardware import GPU, detect
from ladder.timing import bench
from ladder.runtime.world import require_gpu



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


def cublas_TFLOPs(n: int = 8192) -> float:
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
    ms = bench(lambda: a @ b).median_ms
    return 2 * n**3 / (ms * 1e-3) / 1e12


# ---------------------------------------------------------------- instruction roofs (tensor cores)

class CeilingError(RuntimeError):
    """A ceiling's microbenchmark failed to compile, to launch, or to compute what it counts."""


MMA_SYNC = dict(chains=8, warps=8, blocks_per_sm=4)   # CHAINS in mma_sync_peak.cu; 256 threads, 32 warps an SM
WGMMA = dict(warpgroups=2, k_steps=4, n=256)          # WARPGROUPS, K_STEPS, BN in wgmma_peak.cu; one block an SM
OPERAND = 2.0**-5   # every A and B element: a power of two, so each accumulator's end value is exact


def _half2_bits(x: float) -> np.uint32:
    """Two fp16 copies of `x` in one 32-bit register, as an mma fragment register holds them."""
    return np.array([x, x], dtype=np.float16).view(np.uint32)[0]


def _run_checked(name: str, gpu: GPU, launch, expected: float) -> None:
    """Run a microbenchmark once and check every thread's sum; any failure becomes a CeilingError that names the
    kernel and the GPU (a kernel that cannot launch, or that did not do the mmas its FLOPs count, is no roof)."""
    try:
        out = launch()
        torch.cuda.synchronize()
    except Exception as e:  # CompileError, NotAvailable, a CuPy/CUDA driver error: say which kernel, on which GPU
        raise CeilingError(f"{name} failed on the {gpu.name} ({gpu.arch}): {type(e).__name__}: {e}") from e
    wrong = (out != expected).sum().item()
    if wrong:
        raise CeilingError(f"{name} on the {gpu.name}: {wrong} of {out.numel()} threads' sums differ from {expected} "
                           f"(e.g. {out.flatten()[0].item()}): the kernel did not compute the mmas its FLOPs count")


def mma_sync_run(gpu: GPU, iters: int, blocks: int | None = None) -> torch.Tensor:
    """mma_sync_peak over `blocks` blocks (default: MMA_SYNC's per SM) of MMA_SYNC's warps; each thread's sum."""
    module = cuda.load("ceilings/mma_sync_peak.cu")
    blocks = blocks or gpu.sm_count * MMA_SYNC["blocks_per_sm"]
    threads = 32 * MMA_SYNC["warps"]
    out = torch.empty(blocks * threads, dtype=torch.float32, device="cuda")
    bits = _half2_bits(OPERAND)
    cuda.launch(module, "mma_sync_peak", blocks, threads, (out, np.int32(iters), bits, bits, np.uint32(0)))
    return out


def mma_sync_expected(iters: int) -> float:
    """Each thread's sum: CHAINS fragments of 4 accumulators, each iters x (16 products of OPERAND²)."""
    return MMA_SYNC["chains"] * 4 * iters * 16 * OPERAND**2


def mma_sync_TFLOPs(gpu: GPU, iters: int = 1024) -> float | None:
    """Peak of mma.sync m16n8k16 (fp16 in, fp32 accumulate): None where the GPU has no tensor cores (before
    sm_75). On sm_75 each m16n8k16 runs as two m16n8k8 (tensor_core.cuh's mma_16816): the roof of rungs 4-6 there."""
    if not gpu.has("tensor_cores"):
        return None
    blocks = gpu.sm_count * MMA_SYNC["blocks_per_sm"]
    _run_checked("mma_sync_peak.cu", gpu, lambda: mma_sync_run(gpu, iters, blocks), mma_sync_expected(iters))
    ms = bench(lambda: mma_sync_run(gpu, iters, blocks)).median_ms
    flops = blocks * MMA_SYNC["warps"] * iters * MMA_SYNC["chains"] * 2 * 16 * 8 * 16
    return flops / (ms * 1e-3) / 1e12


def has_wgmma(gpu: GPU) -> bool:
    """wgmma is Hopper's alone (sm_90a): not on older GPUs, nor on Blackwell, nor on an emulated older GPU."""
    return gpu.capability == (9, 0) and gpu.emulated_on is None


def wgmma_run(gpu: GPU, iters: int, blocks: int | None = None) -> torch.Tensor:
    """wgmma_peak over `blocks` blocks (default: one per SM) of WGMMA's warpgroups; each thread's sum."""
    module = cuda.load("ceilings/wgmma_peak.cu", arch="sm_90a")
    blocks = blocks or gpu.sm_count
    threads = 128 * WGMMA["warpgroups"]
    out = torch.empty(blocks * threads, dtype=torch.float32, device="cuda")
    cuda.launch(module, "wgmma_peak", blocks, threads, (out, np.int32(iters), np.float32(OPERAND)))
    return out


def wgmma_expected(iters: int) -> float:
    """Each thread's sum: 128 accumulators, each iters x K_STEPS x (16 products of OPERAND²)."""
    return 128 * iters * WGMMA["k_steps"] * 16 * OPERAND**2


def wgmma_TFLOPs(gpu: GPU, iters: int = 2048) -> float | None:
    """Peak of wgmma m64n256k16 (fp16 in from shared memory, fp32 accumulate): None off Hopper (see has_wgmma)."""
    if not has_wgmma(gpu):
        return None
    _run_checked("wgmma_peak.cu", gpu, lambda: wgmma_run(gpu, iters), wgmma_expected(iters))
    ms = bench(lambda: wgmma_run(gpu, iters)).median_ms
    flops = gpu.sm_count * WGMMA["warpgroups"] * iters * WGMMA["k_steps"] * 2 * 64 * WGMMA["n"] * 16
    return flops / (ms * 1e-3) / 1e12




def measure(gpu: GPU | None = None, refresh: bool = False) -> dict:
    """Measured ceilings of this GPU: from the cache unless `refresh`, else measured (~15 s).

    The instruction roofs come last and only where the GPU has the instruction; one that fails is left out with a
    warning that says why (the other ceilings are kept, and the next call tries it again)."""
    require_gpu("Measuring ceilings")
    gpu = gpu or detect()
    cache = CACHE_DIR / f"ceilings-{gpu.slug}.json"
    measures = {"copy_TBps": copy_TBps, "l2_TBps": lambda: l2_TBps(gpu), "fp32_TFLOPs": lambda: fp32_TFLOPs(gpu),
                "cublas_TFLOPs": cublas_TFLOPs}
    if gpu.has("tensor_cores"):
        measures["mma_sync_TFLOPs"] = lambda: mma_sync_TFLOPs(gpu)
    if has_wgmma(gpu):
        measures["wgmma_TFLOPs"] = lambda: wgmma_TFLOPs(gpu)
    result = with_tensor_core_roof(json.loads(cache.read_text())) if cache.exists() and not refresh else {}
    if set(measures) <= set(result):
        return result
    for name, run in measures.items():   # an older cache: the rest
        if name in result:
            continue
        if name not in INSTRUCTION_ROOFS:
            result[name] = run()
            continue
        try:
            value = run()
        except CeilingError as e:
            warnings.warn(f"{name} not measured: {e}", RuntimeWarning, stacklevel=2)
            continue
        if value is not None:
            result[name] = value
    result = with_tensor_core_roof(result)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(result, indent=1))
    return result


def datasheet_ceilings(gpu_sheet) -> dict | None:
    if gpu_sheet is None:
        return None
    return {"copy_TBps": gpu_sheet.hbm_TBps, "fp32_TFLOPs": gpu_sheet.fp32_TFLOPs,
            "fp16_tc_TFLOPs": gpu_sheet.fp16_tc_TFLOPs}
