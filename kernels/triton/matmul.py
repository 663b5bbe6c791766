"""Matmul in Triton, C = A·B (fp16 in, fp32 sums, fp16 out): the CUDA ladder's rungs, one idea each.

1_naive        one program per C[m, n], a scalar loop over k: one thread's work given to a whole warp
2_coalesced    one program per strip of BLOCK_N columns of a row: each B load is one coalesced vector
3_tiled        one program per BLOCK_M×BLOCK_N tile, K in BLOCK_K steps, the product in fp32 FMAs
4_tensor_core  the same kernel with fp16 operands: tl.dot runs on tensor cores; num_stages=1 (no overlap)
5_pipelined    the same kernel, num_stages=4: the compiler prefetches the next tiles (cp.async) during the math
6_autotuned    the same tile on a persistent grid: one program per SM walks the tiles in grouped order
               (the tiles in flight form a square of C: the fewest bytes from DRAM), its next tile's loads
               overlapping this tile's store; tiles, warps and stages searched per shape (@triton.autotune)
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

This file holds the kernels and their launchers at fixed configurations (rung 6's: any one it is given); it imports
only torch, triton and ladder.runtime. Rung 6's search (its space, prune and @triton.autotune) is in
kernels/matmul_triton_search.py; the problem, the rung list and what ladder.sass compiles are in kernels/matmul.py.
Run alone, `python -m kernels.triton.matmul` checks each rung against torch and times it beside torch.matmul.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from ladder.runtime import validate
from ladder.runtime.hardware import detect
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
def store_tile(c_ptr, bias_ptr, pre_ptr, acc, tile_m, tile_n, M, N, stride_cm, stride_cn, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, BIAS_RELU: tl.constexpr, BIAS_GELU: tl.constexpr):
    """C's tile (tile_m, tile_n) = the fp32 sums `acc` in C's dtype (fp16; bf16, fp32's range in 16 bits, where
    lesson 06's op gets it), the part inside C only (C's element (m, n) stride_cm·m + stride_cn·n from c_ptr).
    Where pre_ptr is given (C's strides), the epilogue's input, acc + bias, is stored there too."""
    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offsets = rows[:, None].to(tl.int64) * stride_cm + cols[None, :] * stride_cn
    inside = (rows[:, None] < M) & (cols[None, :] < N)
    if BIAS_RELU or BIAS_GELU:  # the epilogue works on the fp32 tile in registers: no trip through memory
        bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0)
        acc = acc + bias[None, :].to(tl.float32)
    if pre_ptr is not None:
        tl.store(pre_ptr + offsets, acc.to(pre_ptr.dtype.element_ty), mask=inside)
    if BIAS_RELU:
        acc = tl.maximum(acc, 0.0)
    if BIAS_GELU:
        acc = gelu_tanh(acc)
    tl.store(c_ptr + offsets, acc.to(c_ptr.dtype.element_ty), mask=inside)


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
    store_tile(c_ptr, None, None, acc, tile_m, tile_n, M, N, N, 1, BLOCK_M, BLOCK_N, False, False)


@GROUPED
@EVEN_K
@triton.jit
def persistent_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, pre_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                      stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr, BIAS_RELU: tl.constexpr, EVEN_K: tl.constexpr,
                      FLATTEN: tl.constexpr = True, BIAS_GELU: tl.constexpr = False):
    """Rung 6 (and the fused kernel): one program per SM walks C's tiles in grouped order, a grid
    apart. Flattening the tile loop and the K loop into one pipelined loop lets the loads of the next
    tile's first K steps fly while this tile's sums are stored: with a program per tile, those loads
    would wait for the next program to start. A, B and C may be any strided views (lesson 06's op, ladder.ops, passes
    transposed ones without copying them). With the GELU epilogue (lesson 05) and a pre_ptr (C's strides), A·B + bias
    is stored there too: training needs it to differentiate GELU, and would otherwise recompute A·B."""
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=FLATTEN):
        tile_m, tile_n = tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tile_product(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, tile_m, tile_n,
                           BLOCK_M, BLOCK_N, BLOCK_K, True, EVEN_K)
        store_tile(c_ptr, bias_ptr, pre_ptr, acc, tile_m, tile_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N,
                   BIAS_RELU, BIAS_GELU)


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


# ------------------------------------------------------------- rung 6: a persistent grid, any configuration

def programs(tiles: int, sms: int | None = None) -> int:
    """Programs in a persistent grid over `tiles` tiles: at most one per SM (default: this GPU's; two in the
    interpreter, so that each walks several tiles), and no more than it takes to finish in the same number
    of rounds: 512 tiles on 132 SMs take 4 rounds either way, and 128 programs walk exactly 4 tiles each."""
    rounds = triton.cdiv(tiles, sms or (detect().sm_count if WORLD.gpu else 2))
    return triton.cdiv(tiles, rounds)


def group_rows(M: int, N: int, BLOCK_M: int, BLOCK_N: int, sms: int | None = None) -> int:
    """GROUP_M for a persistent grid: how many tile rows a group spans. The programs(tiles) tiles in
    flight at once are then GROUP_M tile rows by programs/GROUP_M tile columns, and at every K step
    they read GROUP_M*BLOCK_M rows of A and programs/GROUP_M*BLOCK_N columns of B. That sum is least
    when the two are equal: the tiles in flight form a square of C. Each round of tiles reads its
    A rows and B columns from DRAM about once, so this is also the fewest DRAM bytes: 128 programs
    of 128x256 tiles give GROUP_M = 16 (2048 + 2048 rows and columns a K step; GROUP_M = 8 reads
    1024 + 4096, 25% more)."""
    tiles_m = triton.cdiv(M, BLOCK_M)
    in_flight = programs(tiles_m * triton.cdiv(N, BLOCK_N), sms)
    return max(1, min(tiles_m, math.ceil(math.sqrt(in_flight * BLOCK_N / BLOCK_M))))


# Rung 6 at one configuration: one its search times (on a GPU; kernels/matmul_triton_search.py searches them all
# per shape), and in the interpreter the 16-wide tiles of the other rungs (rung 7's too).
AUTOTUNED_EXAMPLE = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=4)
INTERPRETER_TILE = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_warps=4, num_stages=1)
EPILOGUES = ("relu", "gelu")  # the activations the fused epilogue applies after the bias


def launch_persistent(kernel, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, bias: torch.Tensor | None = None,
                      activation: str = "relu", config: dict | None = None) -> torch.Tensor:
    """Rung 6's kernel on checked operands: `kernel` is persistent_kernel, run with `config` (tiles, num_warps,
    num_stages), or a triton.autotune of it, which picks the configuration itself (config None). With `bias`, its
    epilogue gives relu(a @ b + bias), or gelu(a @ b + bias) (tanh form) with activation="gelu"."""
    if activation not in EPILOGUES:
        raise ValueError(f"activation {activation!r}: the epilogue knows {', '.join(EPILOGUES)}")
    M, N, K = a.shape[0], b.shape[1], a.shape[1]
    if out.numel():
        grid = lambda meta: (programs(triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)
        kernel[grid](a, b, out, bias, None, M, N, K, *a.stride(), *b.stride(), *out.stride(),
                     BIAS_RELU=bias is not None and activation == "relu",
                     BIAS_GELU=bias is not None and activation == "gelu", **(config or {}))
    return out


def persistent(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None,
               config: dict | None = None) -> torch.Tensor:
    """Rung 6 at one configuration: `config`, by default AUTOTUNED_EXAMPLE (INTERPRETER_TILE on CPU)."""
    M, N, K, out = _operands(a, b, out)
    return launch_persistent(persistent_kernel, a, b, out,
                             config=config or (AUTOTUNED_EXAMPLE if WORLD.gpu else INTERPRETER_TILE))


def schedules(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, config: dict) -> dict:
    """Rung 6's kernel with one `config` under three schedules, as callables that write a @ b to `out`: a
    program per tile, a persistent grid whose tile loop is not flattened, and rung 6's own (persistent, flattened)."""
    M, N, K, out = _operands(a, b, out)
    tiles = triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"])

    def launch(grid: int, flatten: bool):
        return lambda: persistent_kernel[(grid,)](a, b, out, None, None, M, N, K, *a.stride(), *b.stride(),
                                                  *out.stride(), BIAS_RELU=False, FLATTEN=flatten, **config)
    return {"a program per tile": launch(tiles, True),
            "persistent, loop not flattened": launch(programs(tiles), False),
            "persistent, flattened (rung 6)": launch(programs(tiles), True)}


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
        store_tile(c_ptr, None, None, acc, tile_m, tile_n, M, N, N, 1, BLOCK_M, BLOCK_N, False, False)


TMA_PERSISTENT = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3)


def tma_persistent(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None,
                   config: dict | None = None) -> torch.Tensor:
    """Rung 7. B may also be the transposed view of a row-major N×K tensor (nn.Linear's weight.t(), as
    ladder.ops.matmul gets it): its descriptor then covers that tensor as it is stored, nothing is copied. fp16, or
    bf16 (A, B and C in one dtype)."""
    M, N, K, out = validate.matmul_operands(a, b, out, device=device(), dtype=validate.tensor_core_dtype(a),
                                            stored_transposed_b=True)
    if out.numel() and K == 0:  # a descriptor over an empty A is not allowed: the sums are zero
        return out.zero_()
    if out.numel():
        c = dict(config or (TMA_PERSISTENT if WORLD.gpu else INTERPRETER_TILE))
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


# ------------------------------------------------------------- run alone: python -m kernels.triton.matmul

def _self_check(shape: tuple[int, int, int] = (37, 45, 29), timed: tuple[int, int, int] = (4096, 4096, 4096)):
    """Each rung checked against torch.matmul's fp32 product at a ragged `shape` (on a GPU, or in the interpreter on
    a CPU), then, on a GPU, timed beside torch.matmul at `timed`. Rung 6 runs at one configuration (`persistent`'s
    default): its search is kernels/matmul_triton_search.py's."""
    gen = torch.Generator(device()).manual_seed(0)
    launchers = {"1_naive": naive, "2_coalesced": coalesced, "3_tiled": tiled, "4_tensor_core": tensor_core,
                 "5_pipelined": pipelined, "6_autotuned": persistent}
    if not WORLD.gpu or detect().has("tma"):
        launchers["7_tma_persistent"] = tma_persistent
    M, N, K = shape
    a, b = (torch.randn(*s, generator=gen, device=device()).half() for s in ((M, K), (K, N)))
    want = a.float() @ b.float()
    print(f"checked at {M}x{N}x{K} ({'GPU' if WORLD.gpu else 'CPU: the Triton interpreter'}), max |error| "
          f"against the fp32 product (torch.matmul's own: {(torch.matmul(a, b).float() - want).abs().max():.3g})")
    for name, run in launchers.items():
        error = (run(a, b).float() - want).abs().max().item()
        print(f"  {name:18s} {error:.3g}" + ("" if error < 0.05 else "   WRONG"))
    c = AUTOTUNED_EXAMPLE if WORLD.gpu else INTERPRETER_TILE
    print(f"6_autotuned runs here at one configuration ({c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} tiles, "
          f"num_warps={c['num_warps']}, num_stages={c['num_stages']}); its search is kernels/matmul_triton_search.py's")
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
