"""Matmul, C = A·B: A (M×K) and B (K×N) fp16 row-major, fp32 accumulation, C fp16.

The problem, the CUDA C++ rungs (kernels/cuda/matmul/, one file per rung) with their launchers,
the Triton rungs of the same names (kernels/triton/matmul.py), and torch:cublas, the speed anchor.
A shape is (M, N, K). Every launcher takes (a, b, out=None) and returns out; a bad argument raises a
ValueError that names it.

CUDA rungs 4-12 load 16-byte vectors (rungs 8-12: TMA boxes, whose rows the TMA wants 16 bytes apart), so every
row of A and B must start on a 16-byte boundary: when K or N is not a multiple of 8 the launcher pads A and B
with zeros (a copy, said in `pad_note`). M and N edges are handled inside the kernels (rungs 8-12: the TMA reads
zeros past them, the stores are masked).
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from ladder import autotune
from ladder.runtime import cuda, tma, validate
from ladder.runtime.hardware import detect
from ladder.problems import Problem, Rung, register, same_specialization
from ladder.runtime.world import device
from kernels.triton import matmul as triton_matmul

CUDA_DIR = "kernels/cuda/matmul"
SCALAR_TILE = 32               # rungs 1-3: 32×32 threads, one output each
REGISTER_BLOCK = (128, 128)    # rung 3b: BM×BN block tile, 8×8 outputs per thread, 256 threads
TENSOR_CORE = dict(BM=128, BN=128, BK=32, WARPS_M=2, WARPS_N=4)            # must match 4_tensor_core.cu
PIPELINED = dict(BM=128, BN=128, BK=32, WARPS_M=2, WARPS_N=4, STAGES=4)    # rung 5's choice
TWO_STAGES = dict(PIPELINED, STAGES=2)  # sm_75: register-staged double buffer, two shared buffers


def _operands(a, b, out, where="cuda"):
    return validate.matmul_operands(a, b, out, device=where)


# ------------------------------------------------------------- rungs 1-3b: CUDA cores, any shape

def _scalar_launcher(filename: str, grid, threads):
    """A launcher for a CUDA-core rung: kernel `matmul(A, B, C, M, N, K)`, any shape."""
    def run(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        M, N, K, out = _operands(a, b, out)
        if out.numel():
            module = cuda.load(f"matmul/{filename}")
            cuda.launch(module, "matmul", grid(M, N), threads, (a, b, out) + cuda.int32s(M, N, K))
        return out
    run.__name__ = filename.removesuffix(".cu")
    return run


T = SCALAR_TILE
naive = _scalar_launcher("1_naive.cu", lambda M, N: (cuda.cdiv(M, T), cuda.cdiv(N, T)), (T, T))
coalesced = _scalar_launcher("2_coalesced.cu", lambda M, N: (cuda.cdiv(N, T), cuda.cdiv(M, T)), (T, T))
smem_tiled = _scalar_launcher("3_smem_tiled.cu", lambda M, N: (cuda.cdiv(N, T), cuda.cdiv(M, T)), (T, T))
register_blocked = _scalar_launcher(
    "3b_register_blocked.cu",
    lambda M, N: (cuda.cdiv(N, REGISTER_BLOCK[1]), cuda.cdiv(M, REGISTER_BLOCK[0])), 256)


# ------------------------------------------------------------- rungs 4-6: tensor cores, 16-byte rows

def pad_note(M: int, N: int, K: int) -> str | None:
    """Why a tensor-core launcher copies its inputs for this shape, or None."""
    if K % 8 or N % 8:
        return (f"K={K} or N={N} is not a multiple of 8: A and B are zero-padded to "
                f"K={cuda.cdiv(K, 8) * 8}, N={cuda.cdiv(N, 8) * 8} so every row starts on 16 bytes")
    return None


def threads(config: dict) -> int:
    return 32 * config["WARPS_M"] * config["WARPS_N"]


def shared_bytes(config: dict) -> int:
    """Dynamic shared memory of rungs 5-6: STAGES × (A tile + B tile), rows padded by 8 halves."""
    c = config
    return 2 * c["STAGES"] * (c["BM"] * (c["BK"] + 8) + c["BK"] * (c["BN"] + 8))


def _tensor_core_launch(filename, kernel, defines, grid, n_threads, a, b, out, smem=0, arch=None, operands=None,
                        checked=None):
    """Shared by rungs 4-12: kernel(A, B, C, M, N, K, ldb) on 16-byte rows, grid(M, N) blocks. `operands(a, b, out)`
    gives what the kernel takes in place of the pointers A and B (rungs 8-12: their tensor maps, and C's).
    `checked`: (M, N, K, out) from a caller that validated the operands already (rungs 6 and 12, to pick a
    configuration by the shape)."""
    M, N, K, out = checked or _operands(a, b, out)
    if out.numel() and out.data_ptr() % 4:  # a view of C 2 bytes in: the kernels store pairs of halves, 4-byte aligned
        out.copy_(_tensor_core_launch(filename, kernel, defines, grid, n_threads, a, b, None, smem, arch, operands))
        return out
    if out.numel():
        if K == 0:
            return out.zero_()
        a, b, Kp, Np = validate.padded_rows(a, b)
        module = cuda.load(f"matmul/{filename}", defines, arch)
        inputs = operands(a, b, out) if operands else (a, b)
        cuda.launch(module, kernel, grid(M, N), n_threads, inputs + (out,) + cuda.int32s(M, N, Kp, Np), smem)
    return out


def _tile_grid(c: dict):
    return lambda M, N: (cuda.cdiv(N, c["BN"]), cuda.cdiv(M, c["BM"]))


def tensor_core(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return _tensor_core_launch("4_tensor_core.cu", "matmul", None, _tile_grid(TENSOR_CORE), threads(TENSOR_CORE),
                               a, b, out)


def pipelined_config(gpu=None) -> dict:
    gpu = gpu or detect()
    return PIPELINED if gpu is None or gpu.has("cp.async") else TWO_STAGES


def pipelined(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    c = pipelined_config()
    return _tensor_core_launch("5_pipelined.cu", "matmul", c, _tile_grid(c), threads(c), a, b, out, shared_bytes(c))


# ------------------------------------------------------------- rung 6: the search

def run_config(c: dict, a, b, out=None, checked=None):
    """Rung 6's kernel with one configuration (what the search times): a 1-D grid, grouped inside."""
    return _tensor_core_launch("6_autotuned.cu", "matmul_grouped", c,
                               lambda M, N: cuda.cdiv(M, c["BM"]) * cuda.cdiv(N, c["BN"]), threads(c),
                               a, b, out, shared_bytes(c), checked=checked)


SEARCH_SPACE = dict(BM=[64, 128, 256], BN=[128, 256], BK=[32, 64], WARPS_M=[2, 4], WARPS_N=[2, 4],
                    STAGES=[2, 3, 4], GROUP_M=[8])


REGISTER_OVERHEAD = 32  # addresses, indices and loop counters beside the fragments (ptxas -v on sm_75/80/90)


def registers_needed(c: dict, gpu) -> int:
    """A thread's live 32-bit registers in rung 6's main loop: its fp32 accumulators, the A and B fragments of
    one 16-deep mma step, the next tile's 16-byte pieces held in registers without cp.async, and the overhead."""
    wm, wn = c["BM"] // c["WARPS_M"], c["BN"] // c["WARPS_N"]
    accumulators = wm * wn // 32
    fragments = wm // 16 * 4 + wn // 8 * 2
    staged = 0 if gpu is None or gpu.has("cp.async") else 4 * (c["BM"] + c["BN"]) * c["BK"] // 8 // threads(c)
    return accumulators + fragments + staged + REGISTER_OVERHEAD


def prune_reason(c: dict, gpu) -> str | None:
    """Why a configuration cannot run (or is not worth timing) on `gpu`; None keeps it."""
    wm, wn = c["BM"] // c["WARPS_M"], c["BN"] // c["WARPS_N"]
    if wm % 16 or wn % 16 or wm < 32 or wn < 32:
        return "warp tile under 32x32: too little reuse per ldmatrix"
    if wm * wn // 32 > 128:
        return f"warp tile {wm}x{wn} needs {wm * wn // 32} accumulator registers per thread (> 128)"
    n_threads = threads(c)
    needed, budget = registers_needed(c, gpu), min(255, 65536 // n_threads)
    if needed > budget:
        return f"needs about {needed} registers per thread, {n_threads} threads leave {budget}: it would spill"
    if (c["BM"] * c["BK"] // 8) % n_threads or (c["BK"] * c["BN"] // 8) % n_threads:
        return "tile copies do not split evenly over the threads"
    if gpu is not None and shared_bytes(c) > gpu.smem_per_block_bytes:
        return f"{shared_bytes(c) // 1024} KiB of shared memory > {gpu.smem_per_block_bytes // 1024} KiB"
    if gpu is not None and gpu.has("cp.async") and c["STAGES"] < 3:
        return "with cp.async, two stages leave the loads exposed (as in rung four)"
    if gpu is not None and not gpu.has("cp.async") and c["STAGES"] != 2:
        return "no cp.async: only the two-buffer fallback runs"
    return None


def default_config(gpu) -> dict:
    """Rung 6 where no search has run: rung 5's tiles for this GPU (two register-staged stages without cp.async),
    which fit every GPU in ladder.runtime.hardware's table (tests/test_matmul_cuda.py)."""
    return dict(pipelined_config(gpu), GROUP_M=8)


TUNER = autotune.Tuner(problem="matmul", name="cuda:6_autotuned", space=SEARCH_SPACE, prune=prune_reason,
                       compile=lambda c: cuda.without_spills(cuda.load("matmul/6_autotuned.cu", c), "matmul_grouped"), run=run_config,
                       default=default_config)


TUNE_SHAPES = [(1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192)]


def tune_rungs(labels: list[str]) -> list[autotune.Report]:
    """The searches of the autotuned rungs among `labels`, at TUNE_SHAPES (for `record`)."""
    return ((tune() if "cuda:6_autotuned" in labels else [])
            + (tune(HOPPER_TUNE_SHAPES, HOPPER_TUNER) if "cuda:12_autotuned" in labels else [])
            + (triton_matmul.tune(TUNE_SHAPES) if "triton:6_autotuned" in labels else []))


def tune(shapes=TUNE_SHAPES, tuner=None) -> list[autotune.Report]:
    """Run rung 6's search (or `tuner`'s: HOPPER_TUNER, rung 12's) at each shape (fresh random inputs); the winners
    go to the cache."""
    reports = []
    for shape in shapes:
        a, b = _make_inputs(shape, "cuda", torch.Generator("cuda").manual_seed(7))
        reports.append((tuner or TUNER).search((a, b), reference(a, b), 2 * shape[0] * shape[1] * shape[2],
                                               lambda: torch.empty(shape[:2], dtype=torch.float16, device="cuda")))
    return reports


def autotuned(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 6 with the configuration the search chose for the nearest tuned shape on this GPU."""
    checked = _operands(a, b, out)
    return run_config(TUNER.best(checked[:3]), a, b, checked=checked)


# ------------------------------------------------------------- rung 7: Hopper's wgmma

WGMMA = dict(STAGES=4)  # BM x BN x BK = 128 x 256 x 64 (two warpgroups) is fixed in 7_wgmma.cu


def wgmma_shared_bytes(c: dict) -> int:
    """Rungs 7-10: STAGES x (A tile + B tile), unpadded (the swizzle avoids bank conflicts), + 1 KiB to align
    the atoms."""
    return 2 * c["STAGES"] * 64 * (128 + 256) + 1024


def wgmma(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return _tensor_core_launch("7_wgmma.cu", "matmul", WGMMA, _tile_grid(dict(BM=128, BN=256)), 256,
                               a, b, out, wgmma_shared_bytes(WGMMA), arch="sm_90a")


# ------------------------------------------------------------- rung 8: TMA copies, warp-specialized

TMA_WS = dict(STAGES=4)  # BM x BN x BK = 128 x 256 x 64, 1 producer + 2 consumer warpgroups, fixed in the .cu


def tma_maps(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> tuple:
    """Rungs 8-10's tensor maps, 128-byte swizzle: A (M x K) in boxes of 128 rows x 64 columns (one per k-tile),
    B (K x N) in boxes of 64 x 64 (four side by side make a 64 x 256 k-tile). `out`: theirs has none (rung 11's does)."""
    return tma.encode(a, (128, 64)), tma.encode(b, (64, 64))


def tma_warp_specialized(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return _tensor_core_launch("8_tma_warp_specialized.cu", "matmul", TMA_WS, _tile_grid(dict(BM=128, BN=256)),
                               384, a, b, out, wgmma_shared_bytes(TMA_WS), arch="sm_90a", operands=tma_maps)


# ------------------------------------------------------------- rung 9: persistent, grouped tile order

PERSISTENT = dict(STAGES=4, GROUP_M=16)  # rung 8's tiles and warpgroups; GROUP_M tile rows down a column, then right


@functools.lru_cache(maxsize=None)  # launchers ask on every call
def _sms_of(device: int) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def _sm_count() -> int:
    return _sms_of(torch.cuda.current_device())


def walking_grid(M: int, N: int, bm: int, bn: int, cluster: int = 1, sms: int | None = None) -> int:
    """The persistent grid of rungs 9-12: clusters of `cluster` blocks, a cluster per `cluster` SMs (default: this
    GPU's), or per cluster * bm x bn block of C where there are fewer; each walks the blocks of C its number,
    + clusters, ..."""
    return cluster * min((sms or _sm_count()) // cluster, cuda.cdiv(M, cluster * bm) * cuda.cdiv(N, bn))


def persistent_grid(M: int, N: int, sms: int | None = None) -> int:
    """Rung 9's blocks: one per SM (default: this GPU's), or one per 128 x 256 tile of C where there are fewer;
    each block walks the tiles blockIdx.x, + gridDim.x, ..."""
    return walking_grid(M, N, 128, 256, sms=sms)


def persistent(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None,
               config: dict = PERSISTENT) -> torch.Tensor:
    """Rung 9; `config` may change GROUP_M (the tile order) or STAGES."""
    return _tensor_core_launch("9_persistent.cu", "matmul", config, persistent_grid, 384, a, b, out,
                               wgmma_shared_bytes(config), arch="sm_90a", operands=tma_maps)


# ------------------------------------------------------------- rung 10: 2-block clusters, B multicast

CLUSTER_MULTICAST = dict(STAGES=4, GROUP_M=8)  # GROUP_M in cluster rows of 256 rows of C (rung 9: 16 of 128)


def cluster_grid(M: int, N: int, sms: int | None = None) -> int:
    """Rung 10's blocks, two per cluster (__cluster_dims__ in the .cu): a cluster per two SMs, or per 256 x 256
    block of C where there are fewer; each cluster walks the blocks of C clusterid, + clusters, ..."""
    return walking_grid(M, N, 128, 256, cluster=2, sms=sms)


def cluster_multicast(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None,
                      config: dict = CLUSTER_MULTICAST) -> torch.Tensor:
    """Rung 10; `config` may change GROUP_M (the order of the clusters' blocks of C) or STAGES."""
    return _tensor_core_launch("10_cluster_multicast.cu", "matmul", config, cluster_grid, 384, a, b, out,
                               wgmma_shared_bytes(config), arch="sm_90a", operands=tma_maps)


# ------------------------------------------------------------- rung 11: the epilogue through the TMA

TMA_STORE = dict(STAGES=3, GROUP_M=8)  # rung 10's order; a stage fewer makes room for C's staging buffers
NO_MAP = np.zeros(1, dtype=np.dtype((np.void, tma.MAP_BYTES)))  # C's map where the TMA cannot store C's rows


def tma_store_shared_bytes(c: dict) -> int:
    """Rung 11: rung 10's ring of STAGES, and the two consumers' 64 x 256 fp16 tiles of C staged for the TMA."""
    return hopper_shared_bytes(dict(c, BM=128, BN=256))


def c_map(out: torch.Tensor):
    """Rung 11's tensor map of C, 64 x 64 boxes in the 128-byte swizzle; NO_MAP where C's rows are not 16-byte
    multiples apart or C does not start on 16 bytes (the kernel checks the same, and stores from registers)."""
    return tma.encode(out, (64, 64)) if out.shape[1] % 8 == 0 and out.data_ptr() % 16 == 0 else NO_MAP


def tma_store(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None,
              config: dict = TMA_STORE) -> torch.Tensor:
    """Rung 11; `config` may change GROUP_M or STAGES (at most 3: the staging buffers take the fourth's room)."""
    return _tensor_core_launch("11_tma_store.cu", "matmul", config, cluster_grid, 384, a, b, out,
                               tma_store_shared_bytes(config), arch="sm_90a",
                               operands=lambda a, b, out: tma_maps(a, b) + (c_map(out),))


# ------------------------------------------------------------- rung 12: rung 11, searched

HOPPER_SEARCH_SPACE = dict(BM=[128, 256], BN=[128, 192, 256], STAGES=[2, 3, 4, 5, 6], CLUSTER=[1, 2], GROUP_M=[8, 16],
                           BOX_BY_BOX=[0, 1])
CONSUMER_REGISTERS = 232          # setmaxnreg.inc in 11_tma_store.cu: what a consumer thread may hold
ACCUMULATOR_BUDGET = 128          # fp32 accumulators per consumer thread that leave room for addresses and staging


def hopper_shared_bytes(c: dict) -> int:
    """Rung 12's dynamic shared memory: STAGES x (A's BM x 64 + B's 64 x BN), C staged for the TMA (the BM x BN
    tile; with BOX_BY_BOX one 64 x 64 box per consumer warpgroup), and 1 KiB to align the swizzle atoms (rung 11's
    at BM 128, BN 256)."""
    staged = 2 * 64 * 64 if c.get("BOX_BY_BOX") else c["BM"] * c["BN"]
    return 2 * (c["STAGES"] * 64 * (c["BM"] + c["BN"]) + staged) + 1024


def hopper_prune_reason(c: dict, gpu) -> str | None:
    """Why rung 12 cannot run `c` on `gpu` (or should not be timed); None keeps it."""
    accumulators = c["BM"] // 128 * c["BN"] // 2  # a consumer thread's share of its BM/2 x BN fp32 tile
    if accumulators > ACCUMULATOR_BUDGET:
        return (f"{c['BM']}x{c['BN']} needs {accumulators} accumulator registers per consumer thread "
                f"(> {ACCUMULATOR_BUDGET} of its {CONSUMER_REGISTERS}): it would spill")
    if gpu is not None and hopper_shared_bytes(c) > gpu.smem_per_block_bytes:
        return f"{hopper_shared_bytes(c) // 1024} KiB of shared memory > {gpu.smem_per_block_bytes // 1024} KiB"
    if c["STAGES"] < 3:
        return "two stages leave the TMA's latency exposed: a k-tile's copy waits on the wgmma of the one before"
    return None


def hopper_grid(c: dict, M: int, N: int, sms: int | None = None) -> int:
    """Rung 12's blocks: CLUSTER per cluster, a cluster per CLUSTER SMs (default: this GPU's) or per CLUSTER*BM x BN
    block of C where there are fewer."""
    return walking_grid(M, N, c["BM"], c["BN"], c["CLUSTER"], sms)


def run_hopper_config(c: dict, a, b, out=None, checked=None):
    """Rung 12's kernel (11_tma_store.cu's) with one configuration: what the search times."""
    return _tensor_core_launch("12_autotuned.cu", "matmul", c, lambda M, N: hopper_grid(c, M, N), 384, a, b, out,
                               hopper_shared_bytes(c), arch="sm_90a",
                               operands=lambda a, b, out: (tma.encode(a, (c["BM"], 64)), tma.encode(b, (64, 64)),
                                                           c_map(out)), checked=checked)


HOPPER_DEFAULT = dict(BM=128, BN=256, STAGES=3, CLUSTER=2, GROUP_M=8, BOX_BY_BOX=0)  # rung 11's configuration


def hopper_config(c: dict) -> dict:
    """`c` in full: a search recorded before BOX_BY_BOX joined the space staged the whole tile."""
    return {"BOX_BY_BOX": 0, **c}


# Where `record` runs rung 12's search: the headline shapes, and the MLP down-projection and attention output of
# lesson 05's model (8192 tokens x 3072 or 768 -> 768), where C has only 768 columns: 3 blocks of 256 across, or 4
# of 192. Other shapes take the winner of the nearest searched one.
MLP_DOWN, ATTENTION_OUT = (8192, 768, 3072), (8192, 768, 768)
HOPPER_TUNE_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), MLP_DOWN, ATTENTION_OUT]
# One configuration per tile shape, epilogue and cluster size the search can choose, each with the most stages that
# fit on an H100 (the GPU tests and compute-sanitizer run them all); box by box gains a stage except at 128 x 128
HOPPER_SHAPES = [dict(BM=bm, BN=bn, STAGES=stages, CLUSTER=cluster, GROUP_M=8, BOX_BY_BOX=box)
                 for bm, bn, stages, box in ((128, 128, 6, 0), (128, 192, 4, 0), (128, 256, 3, 0), (256, 128, 3, 0),
                                             (128, 192, 5, 1), (128, 256, 4, 1), (256, 128, 4, 1))
                 for cluster in (1, 2)]
HOPPER_TUNER = autotune.Tuner(
    problem="matmul", name="cuda:12_autotuned", space=HOPPER_SEARCH_SPACE, prune=hopper_prune_reason,
    compile=lambda c: cuda.without_spills(cuda.load("matmul/12_autotuned.cu", c, "sm_90a"), "matmul"),
    run=run_hopper_config, default=lambda gpu: HOPPER_DEFAULT)


def hopper_autotuned(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 12 with the configuration the search chose for the nearest tuned shape on this GPU."""
    checked = _operands(a, b, out)
    return run_hopper_config(HOPPER_TUNER.best(checked[:3]), a, b, checked=checked)


# ------------------------------------------------------------- cuBLAS and the problem

def cublas(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    M, N, K, out = _operands(a, b, out, where=device())
    return torch.matmul(a, b, out=out)


def _make_inputs(shape: tuple, where: str, gen: torch.Generator) -> tuple:
    M, N, K = shape
    return (torch.randn(M, K, generator=gen, device=where).half(),
            torch.randn(K, N, generator=gen, device=where).half())


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The product in fp64: exact products of the fp16 inputs, sums far more precise than any rung's."""
    return a.double() @ b.double()


def _cuda(name: str, run, **kw) -> Rung:
    return Rung("cuda", name, run, f"{CUDA_DIR}/{name}.cu", **kw)


SQUARE = [(n, n, n) for n in (512, 1024, 2048, 4096, 8192)]
PROBLEM = register(Problem(
    name="matmul",
    flops=lambda s: 2 * s[0] * s[1] * s[2],                       # a multiply and an add per (m, n, k)
    min_bytes=lambda s: 2 * (s[0] * s[2] + s[2] * s[1] + s[0] * s[1]),  # read A and B once, write C once
    make_inputs=_make_inputs,
    reference=reference,
    new_output=lambda s, where: torch.empty(s[:2], dtype=torch.float16, device=where),
    check_shapes=[(1, 1, 1), (17, 33, 65), (1000, 1000, 1000), (4095, 4097, 31)],
    bench_shapes=[(4096, 4096, 4096), (8192, 8192, 8192)],
    interpret_shapes=[(1, 1, 1), (17, 33, 65), (33, 47, 31)],
    compute_roof="fp16_tc_TFLOPs",
    sweep_shapes=SQUARE,
    tune=tune_rungs,
    compile_shape=lambda s: tuple(same_specialization(n) for n in s),
    rungs=[
        _cuda("1_naive", naive, slow=True),
        _cuda("2_coalesced", coalesced, slow=True),
        _cuda("3_smem_tiled", smem_tiled, slow=True),
        _cuda("3b_register_blocked", register_blocked),
        _cuda("4_tensor_core", tensor_core, needs="tensor_cores"),
        _cuda("5_pipelined", pipelined, needs="tensor_cores",
              fallback=("cp.async", "a register-staged double buffer (the next tile's loads wait in registers)")),
        _cuda("6_autotuned", autotuned, needs="tensor_cores", searches=True,
              fallback=("cp.async", "rung 5's register-staged double buffer, tuned")),
        _cuda("7_wgmma", wgmma, needs="wgmma"),
        _cuda("8_tma_warp_specialized", tma_warp_specialized, needs="wgmma"),
        _cuda("9_persistent", persistent, needs="wgmma"),
        _cuda("10_cluster_multicast", cluster_multicast, needs="wgmma"),
        _cuda("11_tma_store", tma_store, needs="wgmma"),
        _cuda("12_autotuned", hopper_autotuned, needs="wgmma", searches=True),
        *triton_matmul.rungs(),
        Rung("torch", "cublas", cublas),
    ],
))
