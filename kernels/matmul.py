"""Matmul, C = A·B: A (M×K) and B (K×N) fp16 row-major, fp32 accumulation, C fp16.

The problem and its rungs as the harness sees them: the CUDA C++ rungs (kernels/cuda/matmul/, one file per rung,
launched by kernels/cuda/matmul.py), the Triton rungs of the same names (kernels/triton/matmul.py; rung 6's search in
kernels/matmul_triton_search.py), and torch:cublas, the speed anchor. This file holds what the kernel files leave
out: CUDA rungs 6 and 12's searches (space, prune, Tuner) and the launchers that run their winners, what ladder.sass
compiles of the Triton rungs, and the Problem's registration. A shape is (M, N, K); every launcher takes
(a, b, out=None) and returns out.
"""
from __future__ import annotations

import torch

from ladder import autotune
from ladder.runtime import cuda, validate
from ladder.problems import Problem, Rung, register, same_specialization
from ladder.runtime.world import device
from kernels import matmul_triton_search as triton_search
from kernels.cuda import matmul as cm
from kernels.triton import matmul as tm

CUDA_DIR = "kernels/cuda/matmul"


def _operands(a, b, out, where="cuda"):
    return validate.matmul_operands(a, b, out, device=where)


# ------------------------------------------------------------- CUDA rung 6: rung 5's kernel, searched

SEARCH_SPACE = dict(BM=[64, 128, 256], BN=[128, 256], BK=[32, 64], WARPS_M=[2, 4], WARPS_N=[2, 4],
                    STAGES=[2, 3, 4], GROUP_M=[8])


REGISTER_OVERHEAD = 32  # addresses, indices and loop counters beside the fragments (ptxas -v on sm_75/80/90)


def registers_needed(c: dict, gpu) -> int:
    """A thread's live 32-bit registers in rung 6's main loop: its fp32 accumulators, the A and B fragments of
    one 16-deep mma step, the next tile's 16-byte pieces held in registers without cp.async, and the overhead."""
    wm, wn = c["BM"] // c["WARPS_M"], c["BN"] // c["WARPS_N"]
    accumulators = wm * wn // 32
    fragments = wm // 16 * 4 + wn // 8 * 2
    staged = 0 if gpu is None or gpu.has("cp.async") else 4 * (c["BM"] + c["BN"]) * c["BK"] // 8 // cm.threads(c)
    return accumulators + fragments + staged + REGISTER_OVERHEAD


def prune_reason(c: dict, gpu) -> str | None:
    """Why a configuration cannot run (or is not worth timing) on `gpu`; None keeps it."""
    wm, wn = c["BM"] // c["WARPS_M"], c["BN"] // c["WARPS_N"]
    if wm % 16 or wn % 16 or wm < 32 or wn < 32:
        return "warp tile under 32x32: too little reuse per ldmatrix"
    if wm * wn // 32 > 128:
        return f"warp tile {wm}x{wn} needs {wm * wn // 32} accumulator registers per thread (> 128)"
    n_threads = cm.threads(c)
    needed, budget = registers_needed(c, gpu), min(255, 65536 // n_threads)
    if needed > budget:
        return f"needs about {needed} registers per thread, {n_threads} threads leave {budget}: it would spill"
    if (c["BM"] * c["BK"] // 8) % n_threads or (c["BK"] * c["BN"] // 8) % n_threads:
        return "tile copies do not split evenly over the threads"
    if gpu is not None and cm.shared_bytes(c) > gpu.smem_per_block_bytes:
        return f"{cm.shared_bytes(c) // 1024} KiB of shared memory > {gpu.smem_per_block_bytes // 1024} KiB"
    if gpu is not None and gpu.has("cp.async") and c["STAGES"] < 3:
        return "with cp.async, two stages copy one tile ahead: too few to hide the loads (a rule, not a timing)"
    if gpu is not None and not gpu.has("cp.async") and c["STAGES"] != 2:
        return "no cp.async: only the two-buffer fallback runs"
    return None


TUNER = autotune.Tuner(problem="matmul", name="cuda:6_autotuned", space=SEARCH_SPACE, prune=prune_reason,
                       compile=lambda c: cuda.without_spills(cuda.load("matmul/6_autotuned.cu", c), "matmul_grouped"),
                       run=cm.run_config, default=cm.default_config)


TUNE_SHAPES = [(1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192)]


def tune_rungs(labels: list[str]) -> list[autotune.Report]:
    """The searches of the autotuned rungs among `labels`, at TUNE_SHAPES (for `record`)."""
    return ((tune() if "cuda:6_autotuned" in labels else [])
            + (tune(HOPPER_TUNE_SHAPES, HOPPER_TUNER) if "cuda:12_autotuned" in labels else [])
            + (triton_search.tune(TUNE_SHAPES) if "triton:6_autotuned" in labels else []))


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
    return cm.run_config(TUNER.best(checked[:3]), a, b, checked=checked)


# ------------------------------------------------------------- CUDA rung 12: rung 11's kernel, searched

HOPPER_SEARCH_SPACE = dict(BM=[128, 256], BN=[128, 192, 256], STAGES=[2, 3, 4, 5, 6], CLUSTER=[1, 2], GROUP_M=[8, 16],
                           BOX_BY_BOX=[0, 1])
CONSUMER_REGISTERS = 232          # setmaxnreg.inc in 11_tma_store.cu: what a consumer thread may hold
ACCUMULATOR_BUDGET = 128          # fp32 accumulators per consumer thread that leave room for addresses and staging


def hopper_prune_reason(c: dict, gpu) -> str | None:
    """Why rung 12 cannot run `c` on `gpu` (or should not be timed); None keeps it."""
    accumulators = c["BM"] // 128 * c["BN"] // 2  # a consumer thread's share of its BM/2 x BN fp32 tile
    if accumulators > ACCUMULATOR_BUDGET:
        return (f"{c['BM']}x{c['BN']} needs {accumulators} accumulator registers per consumer thread "
                f"(> {ACCUMULATOR_BUDGET} of its {CONSUMER_REGISTERS}): it would spill")
    if gpu is not None and cm.hopper_shared_bytes(c) > gpu.smem_per_block_bytes:
        return f"{cm.hopper_shared_bytes(c) // 1024} KiB of shared memory > {gpu.smem_per_block_bytes // 1024} KiB"
    if c["STAGES"] < 3:
        return "two stages leave the TMA's latency exposed: a k-tile's copy waits on the wgmma of the one before"
    return None


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
    run=cm.run_hopper_config, default=lambda gpu: cm.HOPPER_DEFAULT)


def hopper_autotuned(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 12 with the configuration the search chose for the nearest tuned shape on this GPU."""
    checked = _operands(a, b, out)
    return cm.run_hopper_config(HOPPER_TUNER.best(checked[:3]), a, b, checked=checked)


# ------------------------------------------------------------- the Triton rungs compiled ahead of time (ladder.sass)

_POINTERS = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16"}
_SIZES = {"M": "i32", "N": "i32", "K": "i32"}
_TILES = {"BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr"}
SIGNATURE = {**_POINTERS, **_SIZES}
TILE_SIGNATURE = {**SIGNATURE, **_TILES, "TENSOR_CORES": "constexpr", "EVEN_K": "constexpr"}
_STRIDES = {"stride_am": "i32", "stride_ak": "i32", "stride_bk": "i32", "stride_bn": "i32", "stride_cm": "i32",
            "stride_cn": "i32"}
PERSISTENT_SIGNATURE = {**_POINTERS, "bias_ptr": "*fp16", "pre_ptr": "constexpr", **_SIZES, **_STRIDES, **_TILES, "GROUP_M": "constexpr",
                        "BIAS_RELU": "constexpr", "EVEN_K": "constexpr", "FLATTEN": "constexpr",
                        "BIAS_GELU": "constexpr"}
ROW_MAJOR = {"stride_ak": 1, "stride_bn": 1, "stride_cn": 1}  # what Triton makes of row-major A, B, C's unit strides
BENCH_GROUP_M = tm.group_rows(4096, 4096, 128, 256, sms=132)  # 16: the tile order at 4096^3 on an H100
# What Triton may assume at the benchmark shapes: 16-byte aligned pointers, sizes multiples of 16.
_ALIGNED = ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K")


def _launch(config: dict) -> dict:
    return {k: config[k] for k in ("num_warps", "num_stages")}


def _constexprs(config: dict) -> dict:
    return {k: v for k, v in config.items() if k not in ("num_warps", "num_stages")}


def tile_sass_case(config: dict, tensor_cores: bool = True) -> dict:
    """triton_sass's arguments for matmul_kernel (rungs 3-5) with `config`: tiles, num_warps, num_stages."""
    return dict(kernel=tm.matmul_kernel, signature=TILE_SIGNATURE, divisible_by_16=_ALIGNED, **_launch(config),
                constexprs=dict(_constexprs(config), TENSOR_CORES=tensor_cores, EVEN_K=True))


def persistent_sass_case(config: dict) -> dict:
    """triton_sass's arguments for persistent_kernel (rung 6) with one of its search's configurations."""
    return dict(kernel=tm.persistent_kernel, signature=PERSISTENT_SIGNATURE,
                divisible_by_16=_ALIGNED + ("bias_ptr", "stride_am", "stride_bk", "stride_cm"),
                constexprs={**ROW_MAJOR, "GROUP_M": BENCH_GROUP_M, **_constexprs(config), "BIAS_RELU": False,
                            "EVEN_K": True, "FLATTEN": True, "BIAS_GELU": False, "pre_ptr": None},
                **_launch(config))


# Per rung, the keyword arguments of ladder.sass.triton_sass that compile it as a GPU launch at the
# benchmark shapes would (GPU tiles, whatever world this is).
TRITON_SASS_CASES = {
    "1_naive": dict(kernel=tm.naive_kernel, signature=SIGNATURE, constexprs={}, divisible_by_16=_ALIGNED,
                    **tm.LAUNCH["1_naive"]),
    "2_coalesced": dict(kernel=tm.coalesced_kernel, signature=dict(SIGNATURE, BLOCK_N="constexpr"),
                        constexprs=tm.GPU_TILES["2_coalesced"], divisible_by_16=_ALIGNED, **tm.LAUNCH["2_coalesced"]),
    **{rung: tile_sass_case(dict(tm.GPU_TILES[rung], **tm.LAUNCH[rung]), tensor_cores=rung != "3_tiled")
       for rung in ("3_tiled", "4_tensor_core", "5_pipelined")},
    "6_autotuned": persistent_sass_case(tm.AUTOTUNED_EXAMPLE),
    "7_tma_persistent": dict(  # descriptors: the block shape is part of the type
        kernel=tm.tma_persistent_kernel,
        signature={"a_desc": "tensordesc<fp16[{BLOCK_M},{BLOCK_K}]>".format(**tm.TMA_PERSISTENT),
                   "b_desc": "tensordesc<fp16[{BLOCK_K},{BLOCK_N}]>".format(**tm.TMA_PERSISTENT),
                   **{k: v for k, v in PERSISTENT_SIGNATURE.items() if k in ("c_ptr", "M", "N", "K", "BLOCK_M",
                                                                             "BLOCK_N", "BLOCK_K", "GROUP_M")},
                   "B_STORED_NK": "constexpr"},
        constexprs=dict(_constexprs(tm.TMA_PERSISTENT), GROUP_M=BENCH_GROUP_M, B_STORED_NK=False),
        divisible_by_16=("c_ptr", "M", "N", "K"),
        **_launch(tm.TMA_PERSISTENT)),
}


# On sm_75 (T4) Triton's tl.dot is FMAs on CUDA cores: the rungs run, and say so.
CUDA_CORE_DOT = ("triton_mma", "tl.dot on CUDA cores (FFMA): Triton emits no tensor-core MMA before sm_80")


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


def _triton(name: str, run, **kw) -> Rung:
    return Rung("triton", name, run, tm.SOURCE, **kw)


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
        _cuda("1_naive", cm.naive, slow=True),
        _cuda("2_coalesced", cm.coalesced, slow=True),
        _cuda("3_smem_tiled", cm.smem_tiled, slow=True),
        _cuda("3b_register_blocked", cm.register_blocked),
        _cuda("4_tensor_core", cm.tensor_core, needs="tensor_cores"),
        _cuda("5_pipelined", cm.pipelined, needs="tensor_cores",
              fallback=("cp.async", "a register-staged double buffer (the next tile's loads wait in registers)")),
        _cuda("6_autotuned", autotuned, needs="tensor_cores", searches=True,
              fallback=("cp.async", "rung 5's register-staged double buffer, tuned")),
        _cuda("7_wgmma", cm.wgmma, needs="wgmma"),
        _cuda("8_tma_warp_specialized", cm.tma_warp_specialized, needs="wgmma"),
        _cuda("9_persistent", cm.persistent, needs="wgmma"),
        _cuda("10_cluster_multicast", cm.cluster_multicast, needs="wgmma"),
        _cuda("11_tma_store", cm.tma_store, needs="wgmma"),
        _cuda("12_autotuned", hopper_autotuned, needs="wgmma", searches=True),
        _triton("1_naive", tm.naive, slow=True),
        _triton("2_coalesced", tm.coalesced, slow=True),
        _triton("3_tiled", tm.tiled, slow=True),
        _triton("4_tensor_core", tm.tensor_core, needs="tensor_cores", fallback=CUDA_CORE_DOT),
        _triton("5_pipelined", tm.pipelined, needs="tensor_cores", fallback=CUDA_CORE_DOT),
        _triton("6_autotuned", triton_search.autotuned, needs="tensor_cores", fallback=CUDA_CORE_DOT, searches=True),
        _triton("7_tma_persistent", tm.tma_persistent, needs="tma"),
        Rung("torch", "cublas", cublas),
    ],
))
