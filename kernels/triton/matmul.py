"""Matmul in Triton, C = A·B (fp16 in, fp32 sums, fp16 out): the CUDA ladder's rungs, one idea each.

1_naive        one program per C[m, n], a scalar loop over k: one thread's work given to a whole warp
2_coalesced    one program per strip of BLOCK_N columns of a row: each B load is one coalesced vector
3_tiled        one program per BLOCK_M×BLOCK_N tile, K in BLOCK_K steps, the product in fp32 FMAs
4_tensor_core  the same kernel with fp16 operands: tl.dot runs on tensor cores; num_stages=1 (no overlap)
5_pipelined    the same kernel, num_stages=4: the compiler prefetches the next tiles (cp.async) during the math
6_autotuned    the same tile on a persistent grid: one program per SM walks the tiles in grouped order
               (the tiles in flight form a square of C: the fewest bytes from DRAM), its next tile's loads
               overlapping this tile's store; @triton.autotune over tiles, warps and stages
7_tma_persistent  (Hopper) rung 6 with its tiles loaded by TMA descriptors instead of per-thread copies
fused          rung 6 with BIAS_RELU: relu(A·B + bias) on the fp32 tile before its one fp16 store
               (BIAS_GELU instead: gelu(A·B + bias), GELU's tanh form, the MLP activation of GPT-2)

Rungs 3-5 are one kernel, and rung 6 runs the same tile in a loop: in Triton the tile is the unit of
work, and shared-memory staging, register blocking, vector loads and pipelining are the compiler's;
what is left to the programmer is a few constants (which unit does the math, how many stages, which
sizes) and which program computes which tile, in what order.

Every kernel masks its edges, so any shape runs: no padding, unlike the CUDA rungs 4-7. Triton
specializes each launch on whether the pointers and sizes are multiples of 16; only then are the loads
16-byte vectors. Row offsets are int64 (row × K passes 2^31 for large matrices). On CPU (the Triton
interpreter) the launchers use 16-wide tiles instead: the checks then cover several tiles, ragged
edges and groups even on small shapes.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from ladder import autotune
from ladder.runtime import validate
from ladder.autotune import triton_config_dict as config_dict, triton_configs as _configs  # noqa: F401 (lesson 03)
from ladder.runtime.hardware import detect
from ladder.problems import Rung
from ladder.runtime.world import WORLD, device

SOURCE = "kernels/triton/matmul.py"


# ------------------------------------------------------------- rung 1: one program per output

@triton.jit
def naive_kernel(a_ptr, b_ptr, c_ptr, M, N, K):
    pid = tl.program_id(0)
    row, col = pid // N, pid % N                 # consecutive programs: neighbours along a row of C
    a_row = a_ptr + row.to(tl.int64) * K
    b_col = b_ptr + col
    acc = 0.0
    for k in range(K):                           # one multiply-add per step, two 2-byte loads
        acc += tl.load(a_row + k).to(tl.float32) * tl.load(b_col).to(tl.float32)
        b_col += N                               # pointer steps are 64-bit: no k × N overflow
    tl.store(c_ptr + row.to(tl.int64) * N + col, acc.to(tl.float16))


# ------------------------------------------------------------- rung 2: a strip of columns per program

@triton.jit
def coalesced_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    strips = (N + BLOCK_N - 1) // BLOCK_N
    row = pid // strips
    cols = (pid % strips) * BLOCK_N + tl.arange(0, BLOCK_N)
    in_c = cols < N
    a_row = a_ptr + row.to(tl.int64) * K
    b_strip = b_ptr + cols
    acc = tl.full((BLOCK_N,), 0.0, tl.float32)
    for k in range(K):
        a = tl.load(a_row + k).to(tl.float32)                   # one element, shared by the strip
        b = tl.load(b_strip, mask=in_c, other=0.0)              # BLOCK_N neighbours: one vector load
        acc += a * b.to(tl.float32)
        b_strip += N
    tl.store(c_ptr + row.to(tl.int64) * N + cols, acc.to(tl.float16), mask=in_c)


# ------------------------------------------------------------- rungs 3-6 and fused: tiles

@triton.jit
def tile_coords(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(row, column) of C's tile number `tile`. GROUP_M = 1 is row-major order; rung 6 walks GROUP_M
    tile rows down a column before moving right, so tiles computed together share B columns and
    A rows in L2."""
    tiles_m = (M + BLOCK_M - 1) // BLOCK_M
    tiles_n = (N + BLOCK_N - 1) // BLOCK_N
    per_group = GROUP_M * tiles_n
    first_m = (tile // per_group) * GROUP_M
    group_rows = min(tiles_m - first_m, GROUP_M)      # the last group may be shorter
    return first_m + (tile % per_group) % group_rows, (tile % per_group) // group_rows

@triton.jit
def tile_product(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, tile_m, tile_n,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, TENSOR_CORES: tl.constexpr,
                 EVEN_K: tl.constexpr):
    """Tile (tile_m, tile_n) of A·B as fp32 sums: BLOCK_M rows of A times BLOCK_N columns of B. A's element
    (m, k) is stride_am·m + stride_ak·k from a_ptr, B's (k, n) stride_bk·k + stride_bn·n: row-major A has
    strides (K, 1), a transposed view (1, M). Triton compiles a stride of 1 as a constant, so a row-major
    launch gets the same code as with the 1 written in."""
    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    # Rows and columns past C's edge load A's and B's first ones again (% M, % N) instead of being
    # masked: the loads need no compare-and-select per element, and the store drops those sums.
    a_tile = a_ptr + (rows % M)[:, None].to(tl.int64) * stride_am + ks[None, :] * stride_ak
    b_tile = b_ptr + ks[:, None] * stride_bk + (cols % N)[None, :] * stride_bn
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for k in range(0, K, BLOCK_K):
        if EVEN_K:  # (a constexpr: the compiler keeps one branch) no partial step at the end of K
            a = tl.load(a_tile)
            b = tl.load(b_tile)
        else:       # K's last, partial step: elements past K load as 0 and add nothing to the sums
            a = tl.load(a_tile, mask=ks[None, :] < K - k, other=0.0)
            b = tl.load(b_tile, mask=ks[:, None] < K - k, other=0.0)
        if TENSOR_CORES:
            acc = tl.dot(a, b, acc)   # fp16 × fp16 -> fp32: mma.sync (HMMA) on sm_80, wgmma on sm_90
        else:
            # No tensor core multiplies fp32 at full (IEEE) precision, so this dot is FFMA on
            # CUDA cores, tiled through shared memory and register-blocked by the compiler.
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        a_tile += BLOCK_K * stride_ak
        b_tile += BLOCK_K * stride_bk
    return acc


@triton.jit
def gelu_tanh(x):
    """GELU in its tanh form: x·½(1 + tanh(√(2/π)(x + 0.044715x³))), written with ½(1 + tanh(z)) = sigmoid(2z)."""
    z = 1.5957691216057308 * (x + 0.044715 * x * x * x)
    # Past ±30 the sigmoid is 0 or 1 to far below fp16's resolution; clamping keeps its exp finite.
    return x * tl.sigmoid(tl.minimum(tl.maximum(z, -30.0), 30.0))


@triton.jit
def store_tile(c_ptr, bias_ptr, acc, tile_m, tile_n, M, N, stride_cm, stride_cn, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, BIAS_RELU: tl.constexpr, BIAS_GELU: tl.constexpr):
    """C's tile (tile_m, tile_n) = the fp32 sums `acc` in fp16, the part inside C only (C's element (m, n)
    stride_cm·m + stride_cn·n from c_ptr)."""
    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if BIAS_RELU:  # the epilogue works on the fp32 tile in registers: no trip through memory
        bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0)
        acc = tl.maximum(acc + bias[None, :].to(tl.float32), 0.0)
    if BIAS_GELU:
        bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0)
        acc = gelu_tanh(acc + bias[None, :].to(tl.float32))
    c_tile = c_ptr + rows[:, None].to(tl.int64) * stride_cm + cols[None, :] * stride_cn
    tl.store(c_tile, acc.to(tl.float16), mask=(rows[:, None] < M) & (cols[None, :] < N))


EVEN_K = triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})
# The persistent kernels' tile order: GROUP_M from the tile and the grid (group_rows), not searched.
GROUPED = triton.heuristics({"GROUP_M": lambda args: group_rows(args["M"], args["N"], args["BLOCK_M"], args["BLOCK_N"])})


@EVEN_K
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  TENSOR_CORES: tl.constexpr, EVEN_K: tl.constexpr):
    """Rungs 3-5: one program per tile of C, in row-major order; A, B and C row-major."""
    tile_m, tile_n = tile_coords(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, 1)
    acc = tile_product(a_ptr, b_ptr, M, N, K, K, 1, N, 1, tile_m, tile_n, BLOCK_M, BLOCK_N, BLOCK_K, TENSOR_CORES,
                       EVEN_K)
    store_tile(c_ptr, None, acc, tile_m, tile_n, M, N, N, 1, BLOCK_M, BLOCK_N, False, False)


@GROUPED
@EVEN_K
@triton.jit
def persistent_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                      stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr, BIAS_RELU: tl.constexpr, EVEN_K: tl.constexpr,
                      FLATTEN: tl.constexpr = True, BIAS_GELU: tl.constexpr = False):
    """Rung 6 (and the fused kernel): one program per SM walks C's tiles in grouped order, a grid
    apart. Flattening the tile loop and the K loop into one pipelined loop lets the loads of the next
    tile's first K steps fly while this tile's sums are stored: with a program per tile, those loads
    would wait for the next program to start. (FLATTEN=False only for lesson 03's comparison.) A, B and C
    may be any strided views (ladder.ops passes transposed ones without copying them)."""
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=FLATTEN):
        tile_m, tile_n = tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tile_product(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, tile_m, tile_n,
                           BLOCK_M, BLOCK_N, BLOCK_K, True, EVEN_K)
        store_tile(c_ptr, bias_ptr, acc, tile_m, tile_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N, BIAS_RELU,
                   BIAS_GELU)


# Tile sizes per rung on a GPU; on CPU every rung uses 16-wide tiles (see the module docstring).
GPU_TILES = {
    "2_coalesced": dict(BLOCK_N=256),
    "3_tiled": dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32),             # fp32 tiles: 16 KiB of shared memory
    "4_tensor_core": dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32),
    "5_pipelined": dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32),
}
INTERPRETER_TILES = {"2_coalesced": dict(BLOCK_N=16),
                     **{rung: dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
                        for rung in ("3_tiled", "4_tensor_core", "5_pipelined")}}
TILES = GPU_TILES if WORLD.gpu else INTERPRETER_TILES
LAUNCH = {  # num_warps, num_stages
    "1_naive": dict(num_warps=1),       # a scalar program: more warps would only repeat the same work
    "2_coalesced": dict(num_warps=4),
    "3_tiled": dict(num_warps=4, num_stages=1),
    "4_tensor_core": dict(num_warps=4, num_stages=1),
    "5_pipelined": dict(num_warps=4, num_stages=4),  # 48 KiB of shared memory on sm_80, 64 on sm_90
}


def _operands(a, b, out):
    return validate.matmul_operands(a, b, out, device=device())


def naive(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    M, N, K, out = _operands(a, b, out)
    if out.numel():
        naive_kernel[(M * N,)](a, b, out, M, N, K, **LAUNCH["1_naive"])
    return out


def coalesced(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    M, N, K, out = _operands(a, b, out)
    block_n = TILES["2_coalesced"]["BLOCK_N"]
    if out.numel():
        coalesced_kernel[(M * triton.cdiv(N, block_n),)](a, b, out, M, N, K, BLOCK_N=block_n,
                                                         **LAUNCH["2_coalesced"])
    return out


def _tiled_launcher(rung: str, tensor_cores: bool):
    """Rungs 3-5: matmul_kernel in row-major tile order with the rung's tiles, warps and stages."""
    def run(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        M, N, K, out = _operands(a, b, out)
        t = TILES[rung]
        if out.numel():  # K = 0 needs no special case: the loop does not run and zeros are stored
            grid = (triton.cdiv(M, t["BLOCK_M"]) * triton.cdiv(N, t["BLOCK_N"]),)
            matmul_kernel[grid](a, b, out, M, N, K, **t, TENSOR_CORES=tensor_cores, **LAUNCH[rung])
        return out
    run.__name__ = rung.split("_", 1)[1]
    return run


tiled = _tiled_launcher("3_tiled", tensor_cores=False)
tensor_core = _tiled_launcher("4_tensor_core", tensor_cores=True)
pipelined = _tiled_launcher("5_pipelined", tensor_cores=True)


# ------------------------------------------------------------- rung 6: the search

def programs(tiles: int, sms: int | None = None) -> int:
    """Programs in a persistent grid over `tiles` tiles: at most one per SM (default: this GPU's; two in the
    interpreter, so that each walks several tiles), and no more than it takes to finish in the same number
    of rounds: 512 tiles on 132 SMs take 4 rounds either way, and 128 programs walk exactly 4 tiles each
    (measured 0-1.5% faster than 132 on the H100)."""
    rounds = triton.cdiv(tiles, sms or (detect().sm_count if WORLD.gpu else 2))
    return triton.cdiv(tiles, rounds)


def group_rows(M: int, N: int, BLOCK_M: int, BLOCK_N: int, sms: int | None = None) -> int:
    """GROUP_M for a persistent grid: how many tile rows a group spans. The programs(tiles) tiles in
    flight at once are then GROUP_M tile rows by programs/GROUP_M tile columns, and at every K step
    they read GROUP_M*BLOCK_M rows of A and programs/GROUP_M*BLOCK_N columns of B. That sum is least
    when the two are equal: the tiles in flight form a square of C. Each round of tiles reads its
    A rows and B columns from DRAM about once, so this is also the fewest DRAM bytes: 128 programs
    of 128x256 tiles give GROUP_M = 16 (2048 + 2048 rows and columns a K step; GROUP_M = 8 reads
    1024 + 4096, 25% more; ncu at 8192^3: 1.07 vs 1.34 GB)."""
    tiles_m = triton.cdiv(M, BLOCK_M)
    in_flight = programs(tiles_m * triton.cdiv(N, BLOCK_N), sms)
    return max(1, min(tiles_m, math.ceil(math.sqrt(in_flight * BLOCK_N / BLOCK_M))))


# Every combination is offered to the autotuner; `prune_reason` rules out (and the report says why)
# those that cannot run or cannot win on this GPU at this shape, before any is compiled.
SEARCH_SPACE = dict(BLOCK_M=[64, 128, 256], BLOCK_N=[64, 128, 256], BLOCK_K=[64],
                    num_warps=[4, 8], num_stages=[3, 4, 5])
INTERPRETER_TMA = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_warps=4, num_stages=1)
INTERPRETER_SPACE = dict(BLOCK_M=[16, 32], BLOCK_N=[16], BLOCK_K=[16], num_warps=[4], num_stages=[1])
MAX_ACCUMULATORS = 128  # fp32 accumulator registers per thread; more spill (of 255 registers in all)


def shared_bytes(c: dict, capability: tuple[int, int]) -> int:
    """Shared memory of the pipeline's buffers, each an fp16 A tile and B tile, as Triton 3.7 allocates
    them: num_stages buffers on Hopper (wgmma reads its operands from them while the next loads land),
    num_stages - 1 before it. That is all rungs 3-5 use. Rung 6's persistent kernel needs more: its
    epilogue changes the sums' layout through shared memory, and the flattened loop keeps that scratch
    beside the buffers (8-64 KiB, by tile and warps). A configuration whose buffers fit but not with the
    scratch fails to compile, and the search report lists it as failed (tests/test_matmul_triton.py
    checks both against the compiler)."""
    buffers = c["num_stages"] if capability >= (9, 0) else max(1, c["num_stages"] - 1)
    return 2 * buffers * c["BLOCK_K"] * (c["BLOCK_M"] + c["BLOCK_N"])


def prune_reason(c: dict, shape: tuple, gpu, smallest: dict) -> str | None:
    """Why configuration `c` is not timed at `shape` on `gpu` (None: it is timed)."""
    M, N, K = shape
    per_thread = c["BLOCK_M"] * c["BLOCK_N"] // (32 * c["num_warps"])
    if per_thread > MAX_ACCUMULATORS:
        return f"{per_thread} fp32 accumulators per thread (> {MAX_ACCUMULATORS}): registers spill"
    if gpu is not None and shared_bytes(c, gpu.capability) > gpu.smem_per_block_bytes:
        return (f"{shared_bytes(c, gpu.capability) // 1024} KiB of shared memory > "
                f"{gpu.smem_per_block_bytes // 1024} KiB on {gpu.arch}")
    for dim, size in (("M", M), ("N", N), ("K", K)):
        block = c[f"BLOCK_{dim}"]
        if block > max(smallest[dim], triton.next_power_of_2(size)):
            return f"BLOCK_{dim} wider than the matrix: a smaller block does the same work"
    return None


def _prune(c: dict, shape: tuple, gpu, configs: list[dict]) -> str | None:
    return prune_reason(c, shape, gpu, {d: min(x[f"BLOCK_{d}"] for x in configs) for d in "MNK"})


SEARCHES = autotune.TritonSearchLog(
    shape_of=lambda args: (args["M"], args["N"], args["K"]),
    label_of=lambda args: ("matmul_bias_relu", "triton:fused") if args.get("BIAS_RELU") else
    ("matmul_bias_gelu", "triton:fused_gelu") if args.get("BIAS_GELU") else ("matmul", "triton:6_autotuned"),
    flops=lambda problem, s: 2 * s[0] * s[1] * s[2], reason=_prune, kernel=persistent_kernel)
autotuned_kernel = triton.autotune(
    configs=_configs(SEARCH_SPACE if WORLD.gpu else INTERPRETER_SPACE),
    key=["M", "N", "K", "BIAS_RELU", "BIAS_GELU"],  # a new search for every new shape (and fused epilogue)
    prune_configs_by={"early_config_prune": SEARCHES.prune},
    do_bench=SEARCHES.bench,             # its default timer needs a GPU; this one also records
)(persistent_kernel)


EPILOGUES = ("relu", "gelu")  # the activations the fused epilogue applies after the bias


def launch_autotuned(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
                     bias: torch.Tensor | None = None, activation: str = "relu") -> torch.Tensor:
    """Rung 6's kernel on checked operands; with `bias`, its epilogue gives relu(a @ b + bias), or
    gelu(a @ b + bias) (tanh form) with activation="gelu".

    The first call at each new (M, N, K) and epilogue runs the search (see `autotune_report`).
    """
    if activation not in EPILOGUES:
        raise ValueError(f"activation {activation!r}: the epilogue knows {', '.join(EPILOGUES)}")
    M, N, K = a.shape[0], b.shape[1], a.shape[1]
    if out.numel():
        SEARCHES.start()
        grid = lambda meta: (programs(triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)
        autotuned_kernel[grid](a, b, out, bias, M, N, K, *a.stride(), *b.stride(), *out.stride(),
                               BIAS_RELU=bias is not None and activation == "relu",
                               BIAS_GELU=bias is not None and activation == "gelu")
        SEARCHES.finish(autotuned_kernel.best_config)
    return out


def autotuned(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    M, N, K, out = _operands(a, b, out)
    return launch_autotuned(a, b, out)


def schedules(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, config: dict) -> dict:
    """Rung 6's kernel with one `config` under three schedules, as callables that write a @ b to `out`
    (lesson 03 times them): a program per tile, a persistent grid whose tile loop is not flattened, and
    rung 6's own (persistent, flattened)."""
    M, N, K, out = _operands(a, b, out)
    tiles = triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"])

    def launch(grid: int, flatten: bool):
        return lambda: persistent_kernel[(grid,)](a, b, out, None, M, N, K, *a.stride(), *b.stride(), *out.stride(),
                                                  BIAS_RELU=False, FLATTEN=flatten, **config)
    return {"a program per tile": launch(tiles, True),
            "persistent, loop not flattened": launch(programs(tiles), False),
            "persistent, flattened (rung 6)": launch(programs(tiles), True)}


def tune(shapes: list[tuple], bias_relu: bool = False) -> list[autotune.Report]:
    """Rung 6's search (or the fused kernel's) at each shape (M, N, K) on random inputs; its reports."""
    tuner = "triton:fused" if bias_relu else "triton:6_autotuned"
    for M, N, K in shapes:
        gen = torch.Generator(device()).manual_seed(7)
        a = torch.randn(M, K, generator=gen, device=device()).half()
        b = torch.randn(K, N, generator=gen, device=device()).half()
        bias = torch.randn(N, generator=gen, device=device()).half() if bias_relu else None
        launch_autotuned(a, b, torch.empty(M, N, dtype=torch.float16, device=device()), bias)
    latest = SEARCHES.latest(tuner)
    return [latest[tuple(s)] for s in shapes if tuple(s) in latest]


def autotune_report() -> str:
    """Every search run in this process: time taken, configurations timed, pruned (why) and failed."""
    if not SEARCHES.reports:
        return ("No search has run in this process yet: the first call of triton:6_autotuned (or the fused "
                "kernel) at a new (M, N, K) runs one.")
    head = [] if WORLD.gpu else [
        "CPU only: the search ran in the Triton interpreter over its 16-32-wide tiles; its times are "
        "interpreter times, and with no GPU there is no shared-memory limit to prune against."]
    return "\n\n".join(head + [r.summary() for r in SEARCHES.reports])


# ------------------------------------------------------------- rung 7 (Hopper): tiles loaded by TMA

@GROUPED
@triton.jit
def tma_persistent_kernel(a_desc, b_desc, c_ptr, M, N, K,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr, B_STORED_NK: tl.constexpr):
    # Rung 6's persistent kernel, but the tiles arrive by TMA: one instruction per tile, out-of-range
    # elements filled with zeros by the copy engine, no address arithmetic or masks in the loop.
    k_steps = tl.cdiv(K, BLOCK_K)
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        tile_m, tile_n = tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
        for k in range(k_steps):
            a = a_desc.load([tile_m * BLOCK_M, k * BLOCK_K])
            if B_STORED_NK:  # B = Wᵀ, W N×K row-major (nn.Linear's weight): W's tile as stored, used transposed
                b = b_desc.load([tile_n * BLOCK_N, k * BLOCK_K]).T
            else:
                b = b_desc.load([k * BLOCK_K, tile_n * BLOCK_N])
            acc = tl.dot(a, b, acc)
        store_tile(c_ptr, None, acc, tile_m, tile_n, M, N, N, 1, BLOCK_M, BLOCK_N, False, False)


TMA_PERSISTENT = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3)


def tma_persistent(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None,
                   config: dict | None = None) -> torch.Tensor:
    """Rung 7. B may also be the transposed view of a row-major N×K tensor (nn.Linear's weight.t(), as
    ladder.ops.matmul gets it): its descriptor then covers that tensor as it is stored, nothing is copied."""
    M, N, K, out = validate.matmul_operands(a, b, out, device=device(), stored_transposed_b=True)
    if out.numel() and K == 0:  # a descriptor over an empty A is not allowed: the sums are zero
        return out.zero_()
    if out.numel():
        c = dict(config or (TMA_PERSISTENT if WORLD.gpu else INTERPRETER_TMA))
        # a TMA descriptor's row pitch must be a multiple of 16 bytes: K and N padded to multiples of 8
        stored_nk = validate.is_stored_transposed(b)
        if stored_nk:
            a, w = validate.padded_k(a, b.t())
            b_desc = TensorDescriptor.from_tensor(w, [c["BLOCK_N"], c["BLOCK_K"]])
        else:
            a, b, _, _ = validate.padded_rows(a, b)
            b_desc = TensorDescriptor.from_tensor(b, [c["BLOCK_K"], c["BLOCK_N"]])
        a_desc = TensorDescriptor.from_tensor(a, [c["BLOCK_M"], c["BLOCK_K"]])
        tiles = triton.cdiv(M, c["BLOCK_M"]) * triton.cdiv(N, c["BLOCK_N"])
        tma_persistent_kernel[(programs(tiles),)](a_desc, b_desc, out, M, N, a.shape[1], B_STORED_NK=stored_nk, **c)
    return out


# ------------------------------------------------------------- compiling ahead of time (ladder.sass)

_POINTERS = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16"}
_SIZES = {"M": "i32", "N": "i32", "K": "i32"}
_TILES = {"BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr"}
SIGNATURE = {**_POINTERS, **_SIZES}
TILE_SIGNATURE = {**SIGNATURE, **_TILES, "TENSOR_CORES": "constexpr", "EVEN_K": "constexpr"}
_STRIDES = {"stride_am": "i32", "stride_ak": "i32", "stride_bk": "i32", "stride_bn": "i32", "stride_cm": "i32",
            "stride_cn": "i32"}
PERSISTENT_SIGNATURE = {**_POINTERS, "bias_ptr": "*fp16", **_SIZES, **_STRIDES, **_TILES, "GROUP_M": "constexpr",
                        "BIAS_RELU": "constexpr", "EVEN_K": "constexpr", "FLATTEN": "constexpr",
                        "BIAS_GELU": "constexpr"}
ROW_MAJOR = {"stride_ak": 1, "stride_bn": 1, "stride_cn": 1}  # what Triton makes of row-major A, B, C's unit strides
AUTOTUNED_EXAMPLE = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=4)
BENCH_GROUP_M = group_rows(4096, 4096, 128, 256, sms=132)  # 16: the tile order at 4096^3 on an H100
# What Triton may assume at the benchmark shapes: 16-byte aligned pointers, sizes multiples of 16.
_ALIGNED = ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K")


def _launch(config: dict) -> dict:
    return {k: config[k] for k in ("num_warps", "num_stages")}


def _constexprs(config: dict) -> dict:
    return {k: v for k, v in config.items() if k not in ("num_warps", "num_stages")}


def tile_sass_case(config: dict, tensor_cores: bool = True) -> dict:
    """triton_sass's arguments for matmul_kernel (rungs 3-5) with `config`: tiles, num_warps, num_stages."""
    return dict(kernel=matmul_kernel, signature=TILE_SIGNATURE, divisible_by_16=_ALIGNED, **_launch(config),
                constexprs=dict(_constexprs(config), TENSOR_CORES=tensor_cores, EVEN_K=True))


def persistent_sass_case(config: dict) -> dict:
    """triton_sass's arguments for persistent_kernel (rung 6) with one of its search's configurations."""
    return dict(kernel=persistent_kernel, signature=PERSISTENT_SIGNATURE,
                divisible_by_16=_ALIGNED + ("bias_ptr", "stride_am", "stride_bk", "stride_cm"),
                constexprs={**ROW_MAJOR, "GROUP_M": BENCH_GROUP_M, **_constexprs(config), "BIAS_RELU": False,
                            "EVEN_K": True, "FLATTEN": True, "BIAS_GELU": False},
                **_launch(config))


# Per rung, the keyword arguments of ladder.sass.triton_sass that compile it as a GPU launch at the
# benchmark shapes would (GPU tiles, whatever world this is).
SASS_CASES = {
    "1_naive": dict(kernel=naive_kernel, signature=SIGNATURE, constexprs={}, divisible_by_16=_ALIGNED,
                    **LAUNCH["1_naive"]),
    "2_coalesced": dict(kernel=coalesced_kernel, signature=dict(SIGNATURE, BLOCK_N="constexpr"),
                        constexprs=GPU_TILES["2_coalesced"], divisible_by_16=_ALIGNED, **LAUNCH["2_coalesced"]),
    **{rung: tile_sass_case(dict(GPU_TILES[rung], **LAUNCH[rung]), tensor_cores=rung != "3_tiled")
       for rung in ("3_tiled", "4_tensor_core", "5_pipelined")},
    "6_autotuned": persistent_sass_case(AUTOTUNED_EXAMPLE),
    "7_tma_persistent": dict(  # descriptors: the block shape is part of the type
        kernel=tma_persistent_kernel,
        signature={"a_desc": "tensordesc<fp16[{BLOCK_M},{BLOCK_K}]>".format(**TMA_PERSISTENT),
                   "b_desc": "tensordesc<fp16[{BLOCK_K},{BLOCK_N}]>".format(**TMA_PERSISTENT),
                   **{k: v for k, v in PERSISTENT_SIGNATURE.items() if k in ("c_ptr", "M", "N", "K", "BLOCK_M",
                                                                             "BLOCK_N", "BLOCK_K", "GROUP_M")},
                   "B_STORED_NK": "constexpr"},
        constexprs=dict(_constexprs(TMA_PERSISTENT), GROUP_M=BENCH_GROUP_M, B_STORED_NK=False),
        divisible_by_16=("c_ptr", "M", "N", "K"),
        **_launch(TMA_PERSISTENT)),
}


# On sm_75 (T4) Triton's tl.dot is FMAs on CUDA cores: the rungs run, and say so.
CUDA_CORE_DOT = ("triton_mma", "tl.dot on CUDA cores (FFMA): Triton emits no tensor-core MMA before sm_80")


def rungs() -> list[Rung]:
    return [
        Rung("triton", "1_naive", naive, SOURCE, slow=True),
        Rung("triton", "2_coalesced", coalesced, SOURCE, slow=True),
        Rung("triton", "3_tiled", tiled, SOURCE, slow=True),
        Rung("triton", "4_tensor_core", tensor_core, SOURCE, needs="tensor_cores",
             fallback=CUDA_CORE_DOT),
        Rung("triton", "5_pipelined", pipelined, SOURCE, needs="tensor_cores",
             fallback=CUDA_CORE_DOT),
        Rung("triton", "6_autotuned", autotuned, SOURCE, needs="tensor_cores",
             fallback=CUDA_CORE_DOT, searches=True),
        Rung("triton", "7_tma_persistent", tma_persistent, SOURCE, needs="tma"),
    ]


# ------------------------------------------------------------- run alone: python -m kernels.triton.matmul

def _self_check(shape: tuple[int, int, int] = (37, 45, 29), timed: tuple[int, int, int] = (4096, 4096, 4096)):
    """Each rung checked against torch.matmul's fp32 product at a ragged `shape` (on a GPU, or in the interpreter on
    a CPU), then, on a GPU, timed beside torch.matmul at `timed`."""
    gen = torch.Generator(device()).manual_seed(0)
    launchers = {"1_naive": naive, "2_coalesced": coalesced, "3_tiled": tiled, "4_tensor_core": tensor_core,
                 "5_pipelined": pipelined, "6_autotuned": autotuned}
    if WORLD.gpu and detect().has("tma"):
        launchers["7_tma_persistent"] = tma_persistent
    M, N, K = shape
    a, b = (torch.randn(*s, generator=gen, device=device()).half() for s in ((M, K), (K, N)))
    want = a.float() @ b.float()
    print(f"checked at {M}x{N}x{K} ({'GPU' if WORLD.gpu else 'CPU: the Triton interpreter'}), max |error| "
          f"against the fp32 product (torch.matmul's own: {(torch.matmul(a, b).float() - want).abs().max():.3g})")
    for name, run in launchers.items():
        error = (run(a, b).float() - want).abs().max().item()
        print(f"  {name:18s} {error:.3g}" + ("" if error < 0.05 else "   WRONG"))
    if not WORLD.gpu:
        print("timing needs a GPU")
        return
    M, N, K = timed
    a, b = torch.randn(M, K, device="cuda").half(), torch.randn(K, N, device="cuda").half()
    print(f"median ms at {M}x{N}x{K} (triton.testing.do_bench), TFLOP/s")
    timed_rungs = {n: f for n, f in launchers.items() if n not in ("1_naive", "2_coalesced")}   # a program per output
    for name, run in {"torch.matmul": torch.matmul, **timed_rungs}.items():
        ms = triton.testing.do_bench(lambda: run(a, b))
        print(f"  {name:18s} {ms:8.3f} ms  {2 * M * N * K / ms / 1e9:6.1f}")


if __name__ == "__main__":
    _self_check()
