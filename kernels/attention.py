"""Attention forward, O = softmax(Q·Kᵀ/√D)·V, non-causal and causal.

Q, K, V, O fp16 of shape (B, H, S, D), contiguous; D is 64 or 128. A shape is (B, H, S, D, causal)
with causal 0 or 1. FLOPs: 4·B·H·S²·D (two matmuls), half of it when causal. Reference: PyTorch's
math attention in fp32. The rungs: CUDA C++ (kernels/cuda/attention/, one file per rung, launched
here), kernels/triton/attention.py (Triton), torch:sdpa (PyTorch's default backend) and
torch:sdpa_flash (its FlashAttention backend, forced). The CUDA ladder:

1_naive        scores, softmax, P·V as three kernels, a thread per element; S×S fp32 in DRAM
2_coalesced    the same passes, a warp along D (shuffle dot products), a warp per softmax row
3_fused        one kernel, online softmax, Q/K/V tiles in shared memory, FFMA on CUDA cores
4_tensor_core  Q·Kᵀ and P·V on mma.sync, the softmax on the accumulator fragments (flash_mma.cuh)
5_pipelined    rung 4 with cp.async: the next K and V tiles in flight while this one computes
6_autotuned    rung 5 with searched tiles (BLOCK_M, BLOCK_N, warps, stages), heaviest causal blocks first
7_wgmma_tma    (Hopper) both products on wgmma, P from registers; Q, K, V through the TMA into an mbarrier ring
8_warp_specialized  (Hopper) a producer warpgroup (setmaxnreg) feeds two consumer warpgroups one K/V ring
9_pingpong     (Hopper) rung 8's consumer warpgroups take turns at Q·Kᵀ: one's softmax under the other's product
10_intra_overlap  (Hopper) rung 9, each warpgroup's softmax under its own P·V of the tile before
11_fast_exp2   (Hopper) rung 10, each exponential one MUFU.EX2 (no exp2f range fix-up)
12_three_consumers  (Hopper) rung 11 with three consumer warpgroups (192 queries a block) at D = 64
13_persistent  (Hopper) rung 12 on a persistent grid: a block an SM walks the query blocks (not causal ones)
14_critical_path  (Hopper) rung 13 with less between S's landing and the next wgmma: O's rescale moved, no zeroing
15_autotuned   (Hopper) rung 14 with searched consumer warpgroups, key tiles and ring depth, per GPU and shape

Every launcher takes (q, k, v, causal, out=None) and returns out; a bad argument raises a ValueError
that names it. The CUDA launchers check that the tensors are on the GPU before anything else, so a
CPU-only machine gets that ValueError, not a missing-GPU error.
"""
from __future__ import annotations

import contextlib
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from ladder import autotune
from ladder.runtime import cuda, tma, validate
from ladder.runtime.hardware import detect
from ladder.problems import Problem, Rung, register, same_specialization
from kernels.triton import attention as triton_attention

CUDA_DIR = "kernels/cuda/attention"
NAIVE_THREADS = 128          # rung 1: a thread per query of a score, row or output element
COALESCED_THREADS = 128      # rung 2: 4 warps (scores: 4 x 32 keys of a query; softmax: 4 rows)
PV_THREADS = 256             # rung 2's P·V: HEAD_DIM threads along D x 256/HEAD_DIM rows
FUSED_THREADS = 128          # rung 3: 4 warps, fixed in 3_fused.cu
# Rung 3's tiles per head dimension: Q (fp32) + K, V (fp16) + P (fp32) within 48 KiB of static shared memory.
FUSED_TILES = {64: dict(BLOCK_M=64, BLOCK_N=32), 128: dict(BLOCK_M=32, BLOCK_N=32)}
# Rungs 4-5's tiles (flash_mma.cuh): 4 warps of 16 queries, 64 keys a tile; rung 5 double-buffers K and V.
TENSOR_CORE = dict(BLOCK_M=64, BLOCK_N=64, WARPS=4)
PIPELINED = dict(TENSOR_CORE, STAGES=2)
GRID_YZ_MAX = 65535          # a grid's y and z dimensions (x goes to 2^31 - 1)


def flops(shape: tuple) -> float:
    B, H, S, D, causal = shape
    return 4 * B * H * S * S * D * (0.5 if causal else 1.0)


def min_bytes(shape: tuple) -> float:
    """Q, K and V read once, O written once (fp16): what the fused rungs must move."""
    B, H, S, D, _ = shape
    return 4 * 2 * B * H * S * D


def _make_inputs(shape: tuple, where: str, gen: torch.Generator) -> tuple:
    B, H, S, D, causal = shape
    q, k, v = (torch.randn(B, H, S, D, generator=gen, device=where).half() for _ in range(3))
    return q, k, v, bool(causal)


def reference(q, k, v, causal: bool) -> torch.Tensor:
    """Math attention in fp32, written out (no fused kernel in the reference). A few heads at a time, so
    that their S×S scores stay near 2 GB: at S = 16384 all 128 heads' scores would need 137 GB."""
    B, H, S, D = q.shape
    q, k, v = (x.reshape(B * H, S, D) for x in (q, k, v))
    out = torch.empty(B * H, S, D, dtype=torch.float32, device=q.device)
    later = torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1) if causal else None
    heads = max(1, 2**31 // (4 * S * S))
    for h in range(0, B * H, heads):
        s = (q[h:h + heads].float() @ k[h:h + heads].float().transpose(-1, -2)) / D ** 0.5
        if causal:
            s.masked_fill_(later, float("-inf"))
        out[h:h + heads] = torch.softmax(s, dim=-1) @ v[h:h + heads].float()
    return out.reshape(B, H, S, D)


def _anchor_operands(q, k, v, out):
    """The anchors take what our rungs take (triton_attention.operands), and must not fault on any of it, though
    PyTorch's fused kernels check less: a q, k or v that does not start on 16 bytes (a view into an allocation)
    is copied to one that does (they load 16-byte vectors: such a view faults with a sticky "misaligned address"
    that fails every later CUDA call). Returns (q, k, v, out)."""
    *_, out = triton_attention.operands(q, k, v, out)
    q, k, v = (t if t.data_ptr() % 16 == 0 else t.clone() for t in (q, k, v))
    return q, k, v, out


def _anchor(q, k, v, causal: bool, out, backends: list | None = None) -> torch.Tensor:
    """scaled_dot_product_attention (on `backends` only, if given): its own output when out is None (how the anchor
    is timed: its kernels, no copy), else its result copied into out. An empty input (S = 0, where SDPA raises a
    TypeError) gives an empty output, as for our rungs."""
    q, k, v, target = _anchor_operands(q, k, v, out)
    if not target.numel():
        return target
    with sdpa_kernel(backends) if backends else contextlib.nullcontext():
        result = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return result if out is None else target.copy_(result)


def sdpa(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """PyTorch's scaled_dot_product_attention, the backend it picks."""
    return _anchor(q, k, v, causal, out)


def sdpa_flash(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """scaled_dot_product_attention with its FlashAttention backend forced (checked as `sdpa`)."""
    return _anchor(q, k, v, causal, out, [SDPBackend.FLASH_ATTENTION])


# ------------------------------------------------------------- CUDA C++ rungs (kernels/cuda/attention/)

def _cuda_operands(q, k, v, out, align_bytes: int = 0):
    """triton_attention.operands for a CUDA kernel: first each tensor must be fp16, 4-D, on the GPU (and
    `align_bytes`-aligned where the kernel loads vectors); then the shared checks (shapes, D)."""
    named = [("q", q), ("k", k), ("v", v)] + ([("out", out)] if out is not None else [])
    for name, t in named:
        validate.tensor(name, t, dtype=torch.float16, ndim=4, device="cuda", align_bytes=align_bytes)
    return triton_attention.operands(q, k, v, out)


def _grid_fits(**dims: int) -> None:
    for name, n in dims.items():
        if n > GRID_YZ_MAX:
            raise ValueError(f"{name}={n} blocks: over the {GRID_YZ_MAX} a grid's y or z dimension can hold")


def cuda_naive(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 1: scores, softmax, P·V as three kernels, a thread per element; S×S fp32 in DRAM."""
    B, H, S, D, out = _cuda_operands(q, k, v, out)
    if out.numel():
        _grid_fits(S=S, BH=B * H)
        scores = torch.empty((B, H, S, S), dtype=torch.float32, device=q.device)
        module, T = cuda.load("attention/1_naive.cu"), NAIVE_THREADS
        cuda.launch(module, "scores", (cuda.cdiv(S, T), S, B * H), T,
                    (q, k, scores) + cuda.int32s(S, D) + (np.float32(1 / math.sqrt(D)),) + cuda.int32s(causal))
        cuda.launch(module, "softmax", (cuda.cdiv(S, T), B * H), T, (scores,) + cuda.int32s(S))
        cuda.launch(module, "pv", (cuda.cdiv(S, T), D, B * H), T, (scores, v, out) + cuda.int32s(S, D))
    return out


def cuda_coalesced(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 2: the same three passes, coalesced (a warp per query and 32 keys, a warp per row, threads
    along D); q and k are read as half2, so they must start on 4 bytes."""
    B, H, S, D, out = _cuda_operands(q, k, v, out, align_bytes=4)
    if out.numel():
        _grid_fits(S=S, BH=B * H)
        scores = torch.empty((B, H, S, S), dtype=torch.float32, device=q.device)
        module = cuda.load("attention/2_coalesced.cu", dict(HEAD_DIM=D))
        T, rows = COALESCED_THREADS, PV_THREADS // D
        cuda.launch(module, "scores", (cuda.cdiv(S, T), S, B * H), T,
                    (q, k, scores) + cuda.int32s(S) + (np.float32(1 / math.sqrt(D)),) + cuda.int32s(causal))
        cuda.launch(module, "softmax", (cuda.cdiv(S, T // 32), B * H), T, (scores,) + cuda.int32s(S))
        cuda.launch(module, "pv", (cuda.cdiv(S, rows), B * H), (D, rows), (scores, v, out) + cuda.int32s(S))
    return out


def cuda_fused(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 3: one kernel, online softmax, K and V tiles through shared memory, fp32 FFMA; the tiles are
    loaded as 16-byte vectors, so every tensor must start on 16 bytes."""
    B, H, S, D, out = _cuda_operands(q, k, v, out, align_bytes=16)
    if out.numel():
        _grid_fits(BH=B * H)
        tiles = FUSED_TILES[D]
        module = cuda.load("attention/3_fused.cu", dict(HEAD_DIM=D, **tiles))
        cuda.launch(module, "attention", (cuda.cdiv(S, tiles["BLOCK_M"]), B * H), FUSED_THREADS,
                    (q, k, v, out) + cuda.int32s(S) + (np.float32(triton_attention.LOG2E / math.sqrt(D)),)
                    + cuda.int32s(causal))
    return out


def flash_shared_bytes(c: dict, head_dim: int, gpu=None) -> int:
    """Rungs 4-6's dynamic shared memory: the Q tile and STAGES K and V tiles (one of each without cp.async),
    rows of head_dim + 8 halves."""
    gpu = gpu or detect()
    stages = c.get("STAGES", 1) if gpu is None or gpu.has("cp.async") else 1
    return 2 * (head_dim + 8) * (c["BLOCK_M"] + 2 * stages * c["BLOCK_N"])


def _flash_launch(filename: str, kernel: str, config_for, q, k, v, causal: bool, out):
    """Rungs 4-6: kernel(Q, K, V, O, S, scale_log2, causal) with the tiles config_for(shape) chooses for the
    validated shape (B, H, S, D, causal), a block per BLOCK_M queries of a head; tiles are copied in 16-byte
    pieces, so every tensor must start on 16 bytes."""
    B, H, S, D, out = _cuda_operands(q, k, v, out, align_bytes=16)
    if out.numel():
        _grid_fits(BH=B * H)
        config = config_for((B, H, S, D, int(causal)))
        module = cuda.load(f"attention/{filename}", dict(HEAD_DIM=D, **config))
        cuda.launch(module, kernel, (cuda.cdiv(S, config["BLOCK_M"]), B * H), 32 * config["WARPS"],
                    (q, k, v, out) + cuda.int32s(S) + (np.float32(triton_attention.LOG2E / math.sqrt(D)),)
                    + cuda.int32s(causal), flash_shared_bytes(config, D))
    return out


def cuda_tensor_core(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 4: Q·Kᵀ and P·V on mma.sync, the softmax on the accumulators; K, V tiles loaded synchronously."""
    return _flash_launch("4_tensor_core.cu", "attention", lambda shape: TENSOR_CORE, q, k, v, causal, out)


def cuda_pipelined(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 5: rung 4 with cp.async double buffering of K and V (rung 4's loads on GPUs without cp.async)."""
    return _flash_launch("5_pipelined.cu", "attention", lambda shape: PIPELINED, q, k, v, causal, out)


# ------------------------------------------------------------- CUDA rung 6: the search

SEARCH_SPACE = dict(BLOCK_M=[64, 128], BLOCK_N=[32, 64, 128], WARPS=[4, 8], STAGES=[2, 3])
MAX_FRAGMENT_REGISTERS = 160  # fp32 S and O fragments per thread; the rest of 255 holds addresses, P, m, l


def prune_reason(c: dict, gpu, head_dim: int) -> str | None:
    """Why CUDA rung 6 does not time configuration `c` for `head_dim` on `gpu` (None: it is timed)."""
    rows = c["BLOCK_M"] // c["WARPS"]
    if rows % 16:
        return f"{rows} queries per warp: mma.sync needs whole 16-row tiles"
    fragments = rows // 16 * 4 * (head_dim + c["BLOCK_N"]) // 8
    if fragments > MAX_FRAGMENT_REGISTERS:
        return f"{fragments} fp32 fragment registers per thread for S and O (> {MAX_FRAGMENT_REGISTERS}): spills"
    if c["BLOCK_N"] * head_dim // 8 % (32 * c["WARPS"]):
        return "K and V tile copies do not split evenly over the threads"
    if gpu is not None and flash_shared_bytes(c, head_dim, gpu) > gpu.smem_per_block_bytes:
        return (f"{flash_shared_bytes(c, head_dim, gpu) // 1024} KiB of shared memory > "
                f"{gpu.smem_per_block_bytes // 1024} KiB")
    if gpu is not None and not gpu.has("cp.async") and c["STAGES"] != 2:
        return "no cp.async: only rung 4's synchronous loads run, one build is enough"
    return None


def run_config(c: dict, q, k, v, causal: bool, out=None):
    """Rung 6's kernel with configuration `c` (what the search times): heaviest causal blocks first."""
    return _flash_launch("6_autotuned.cu", "attention_heavy_first", lambda shape: c, q, k, v, causal, out)


TUNERS = {D: autotune.Tuner(problem="attention", name="cuda:6_autotuned", space=SEARCH_SPACE,
                            prune=lambda c, gpu, D=D: prune_reason(c, gpu, D),
                            compile=lambda c, D=D: cuda.without_spills(cuda.load("attention/6_autotuned.cu", dict(HEAD_DIM=D, **c)),
                                                                         "attention_heavy_first"),
                            run=run_config, default=lambda gpu: PIPELINED)  # fits every GPU: one K, V tile without cp.async
          for D in (64, 128)}


def tune_cuda(shapes: list[tuple], tuners: dict | None = None) -> list[autotune.Report]:
    """CUDA rung 6's search (or `tuners`', per D: HOPPER_TUNERS for rung 15) at each shape (B, H, S, D, causal),
    fresh random inputs; winners are cached."""
    reports = []
    for shape in shapes:
        q, k, v, causal = _make_inputs(shape, "cuda", torch.Generator("cuda").manual_seed(7))
        reports.append((tuners or TUNERS)[shape[3]].search((q, k, v, causal), reference(q, k, v, causal), flops(shape),
                                               lambda: torch.empty(shape[:4], dtype=torch.float16, device="cuda"),
                                               shape=tuple(shape)))
    return reports


def cuda_autotuned(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 6 with the configuration searched for the nearest shape (same D and mask) on this GPU."""
    return _flash_launch("6_autotuned.cu", "attention_heavy_first", lambda shape: TUNERS[shape[3]].best(shape),
                         q, k, v, causal, out)


# ------------------------------------------------------------- CUDA rung 7: Hopper's wgmma and TMA

# BLOCK_M = 64 (one consumer warpgroup) and a producer warp are fixed in 7_wgmma_tma.cu; per D the key tile and the
# ring's depth, so that two (D=128) or three (D=64) blocks share an SM: one's softmax overlaps another's wgmma (the
# fastest of the choices tried, 7_wgmma_tma.cu's header says which).
WGMMA_TMA = {64: dict(BLOCK_N=128, STAGES=2), 128: dict(BLOCK_N=64, STAGES=2)}
WGMMA_TMA_ROWS = 64
WGMMA_TMA_THREADS = 128 + 32
# Rung 8: two consumer warpgroups (128 queries) and a producer warpgroup, one block an SM; 128-key tiles at both D,
# a ring of 3 at D = 64 (H100, S 4096: 1.09x the ring of 2 without a mask and causal; at D = 128 the two tie).
WARP_SPECIALIZED = {64: dict(BLOCK_N=128, STAGES=3), 128: dict(BLOCK_N=128, STAGES=2)}
WARP_SPECIALIZED_ROWS = 128
WARP_SPECIALIZED_THREADS = 256 + 128
# Rung 10 releases a K/V stage a tile later than rung 9 (after the P·V that runs under the next softmax): a ring of
# 3 at both D keeps the next tile's copy in flight (at D = 128: 225 KiB of shared memory, one block an SM).
INTRA_OVERLAP = {64: dict(BLOCK_N=128, STAGES=3), 128: dict(BLOCK_N=128, STAGES=3)}
# Rung 12: three consumer warpgroups at D = 64 (12_three_consumers.cu), rung 11's two at D = 128.
THREE_CONSUMERS_ROWS = {64: 3 * 64, 128: WARP_SPECIALIZED_ROWS}
THREE_CONSUMERS_THREADS = {64: 3 * 128 + 128, 128: WARP_SPECIALIZED_THREADS}


# Each Hopper rung's launch: its key tiles and stages per D, queries a block, threads a block (each fixed, or per D).
HOPPER = {"7_wgmma_tma": (WGMMA_TMA, WGMMA_TMA_ROWS, WGMMA_TMA_THREADS),
          "8_warp_specialized": (WARP_SPECIALIZED, WARP_SPECIALIZED_ROWS, WARP_SPECIALIZED_THREADS),
          "9_pingpong": (WARP_SPECIALIZED, WARP_SPECIALIZED_ROWS, WARP_SPECIALIZED_THREADS),
          "10_intra_overlap": (INTRA_OVERLAP, WARP_SPECIALIZED_ROWS, WARP_SPECIALIZED_THREADS),
          "11_fast_exp2": (INTRA_OVERLAP, WARP_SPECIALIZED_ROWS, WARP_SPECIALIZED_THREADS),
          "12_three_consumers": (INTRA_OVERLAP, THREE_CONSUMERS_ROWS, THREE_CONSUMERS_THREADS),
          "13_persistent": (INTRA_OVERLAP, THREE_CONSUMERS_ROWS, THREE_CONSUMERS_THREADS),
          "14_critical_path": (INTRA_OVERLAP, THREE_CONSUMERS_ROWS, THREE_CONSUMERS_THREADS),
          "15_autotuned": (INTRA_OVERLAP, THREE_CONSUMERS_ROWS, THREE_CONSUMERS_THREADS)}  # unsearched: rung 14's
# The Hopper rungs whose blocks walk the items (query block, head) gridDim.x apart (PERSISTENT in 7_wgmma_tma.cu).
PERSISTENT = {"13_persistent", "14_critical_path", "15_autotuned"}


def block_keys(m0: int, rows: int, S: int, causal: bool, block_n: int) -> int:
    """The keys the Hopper rungs' block of `rows` queries from m0 computes, in whole `block_n`-key tiles: up to the
    tile holding S's last key, or causal, its own last query's."""
    return -(-min(S, m0 + rows if causal else S) // block_n) * block_n


def scores_computed(shape: tuple, rows: int, block_n: int) -> int:
    """The scores the Hopper rungs compute at `shape` = (B, H, S, D, causal) in blocks of `rows` queries and
    `block_n`-key tiles: every row of a block (those past S too) over its block_keys."""
    B, H, S, _, causal = shape
    return B * H * rows * sum(block_keys(m0, rows, S, causal, block_n) for m0 in range(0, S, rows))


def scores_needed(shape: tuple) -> int:
    """The scores attention needs at `shape`: S² a head, S(S + 1) / 2 causal."""
    B, H, S, _, causal = shape
    return B * H * (S * (S + 1) // 2 if causal else S * S)


def persistent_grid(items: int, causal: bool, sm_count: int) -> int:
    """Rungs 13-14's blocks: one an SM (its shared memory allows no second) for all `items`; causal, one an item: a
    fixed stride of unequal items leaves SMs idle (H100, S 4096, causal: 0.62x rung 12 at D = 64, where 132 SMs
    are 6 heads of 22 query blocks, so that each block took the same query block of every head; 0.93x at D = 128),
    while the hardware's block scheduler gives the next item to whichever SM is free."""
    return items if causal else min(items, sm_count)


def hopper_launch(name: str, head_dim: int) -> tuple[dict, int, int]:
    """Hopper rung `name`'s launch at `head_dim` (HOPPER): its defines (key tile, stages), queries a block (64 a
    consumer warpgroup), threads a block."""
    tiles, rows, threads = HOPPER[name]
    return (dict(tiles[head_dim]), rows[head_dim] if isinstance(rows, dict) else rows,
            threads[head_dim] if isinstance(threads, dict) else threads)


def wgmma_tma_shared_bytes(head_dim: int, tiles: dict | None = None, rows: int = WGMMA_TMA_ROWS) -> int:
    """Rungs 7-9's dynamic shared memory: the Q tile (rows queries) and STAGES K and V tiles, unpadded, + 1 KiB
    to align the swizzle (tiles: rung 7's by default)."""
    c = tiles or WGMMA_TMA[head_dim]
    return 2 * head_dim * (rows + 2 * c["STAGES"] * c["BLOCK_N"]) + 1024


def _hopper_attention(name: str, q, k, v, causal: bool, out, launch_for=None) -> torch.Tensor:
    """Hopper rung `name` (sm_90a) with its launch in HOPPER, or launch_for(shape) = (defines, rows, threads) for the
    validated shape (B, H, S, D, causal): a searched configuration's. Q·Kᵀ and P·V on wgmma, Q, K and V brought by
    the TMA through 3-D tensor maps (a head's rows: zeros past S); the tensor maps need 16-byte aligned tensors,
    the stores 4-byte pairs."""
    B, H, S, D, out = _cuda_operands(q, k, v, out, align_bytes=16)
    if out.numel():
        _grid_fits(BH=B * H)
        c, rows, threads = launch_for((B, H, S, D, int(causal))) if launch_for else hopper_launch(name, D)
        maps = tuple(tma.encode(t.view(B * H, S, D), (box_rows, 64))
                     for t, box_rows in ((q, rows), (k, c["BLOCK_N"]), (v, c["BLOCK_N"])))
        module = cuda.load(f"attention/{name}.cu", dict(HEAD_DIM=D, **c), arch="sm_90a")
        grid, items = (cuda.cdiv(S, rows), B * H), ()
        if name in PERSISTENT:
            grid, items = persistent_grid(grid[0] * grid[1], causal, detect().sm_count), cuda.int32s(B * H)
        cuda.launch(module, "attention", grid, threads,
                    maps + (out,) + cuda.int32s(S) + (np.float32(triton_attention.LOG2E / math.sqrt(D)),)
                    + cuda.int32s(causal) + items, wgmma_tma_shared_bytes(D, c, rows))
    return out


def cuda_wgmma_tma(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 7: one consumer warpgroup (64 queries) and a producer warp a block."""
    return _hopper_attention("7_wgmma_tma", q, k, v, causal, out)


def cuda_intra_overlap(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 10: rung 9, each consumer warpgroup exponentiating tile t while its P·V of tile t - 1 runs."""
    return _hopper_attention("10_intra_overlap", q, k, v, causal, out)


def cuda_fast_exp2(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 11: rung 10, each exponential one MUFU.EX2 (ex2.approx.ftz, not exp2f's range fix-up)."""
    return _hopper_attention("11_fast_exp2", q, k, v, causal, out)


def cuda_three_consumers(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 12: rung 11 with three consumer warpgroups (192 queries a block) at D = 64, rung 11 itself at D = 128."""
    return _hopper_attention("12_three_consumers", q, k, v, causal, out)


def cuda_persistent(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 13: rung 12 with a block an SM, each walking the query blocks gridDim.x apart (causal: a block each)."""
    return _hopper_attention("13_persistent", q, k, v, causal, out)


def cuda_critical_path(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 14: rung 13 with O rescaled under the next S's wgmma and S started by the wgmma, not zeroed first."""
    return _hopper_attention("14_critical_path", q, k, v, causal, out)


# ------------------------------------------------------------- CUDA rung 15: rung 14, searched

# Consumer warpgroups, key tile and ring depth; rung 14's launch is one point of the space. A consumer thread gets
# what setmaxnreg can give it beside a producer warpgroup at 24 registers: 240 with two warpgroups, 160 with three.
HOPPER_SEARCH_SPACE = dict(CONSUMERS=[2, 3], BLOCK_N=[64, 128], STAGES=[2, 3, 4])
CONSUMER_REGISTERS = {2: 240, 3: 160}
# Where record searches rung 15 besides the headline shapes: models' (GPT-2's 1k sequences at D64, a 2k and an 8k
# causal D128 model).
MODEL_SHAPES = [(8, 12, 1024, 64, 1), (8, 12, 1024, 64, 0), (4, 32, 2048, 128, 1), (1, 32, 8192, 128, 1)]


def searched_launch(c: dict) -> tuple[dict, int, int]:
    """A rung 15 configuration's launch: its defines, queries a block (64 a consumer warpgroup), threads a block
    (the consumers and a producer warpgroup)."""
    defines = dict(c, CONSUMER_REGISTERS=CONSUMER_REGISTERS[c["CONSUMERS"]])
    return defines, 64 * c["CONSUMERS"], 128 * c["CONSUMERS"] + 128


def hopper_prune_reason(c: dict, gpu, head_dim: int) -> str | None:
    """Why rung 15's configuration `c` is not timed at head size `head_dim` on `gpu` (None: it is); a variant that
    spills registers is pruned when it compiles."""
    if gpu is not None and not gpu.has("wgmma"):
        return f"no wgmma on {gpu.arch}"
    _, rows, _ = searched_launch(c)
    need = wgmma_tma_shared_bytes(head_dim, c, rows)
    if gpu is not None and need > gpu.smem_per_block_bytes:
        return f"{need // 1024} KiB of shared memory > {gpu.smem_per_block_bytes // 1024} KiB"
    return None


def run_searched(c: dict, q, k, v, causal: bool, out=None):
    """Rung 15's kernel (rung 14's) with configuration `c` (what the search times)."""
    return _hopper_attention("15_autotuned", q, k, v, causal, out, lambda shape: searched_launch(c))


def rung14_config(head_dim: int) -> dict:
    """Rung 14's launch as a point of HOPPER_SEARCH_SPACE: what rung 15 runs where nothing was searched."""
    tiles, rows, _ = hopper_launch("14_critical_path", head_dim)
    return dict(CONSUMERS=rows // 64, **tiles)


HOPPER_TUNERS = {
    D: autotune.Tuner(problem="attention", name="cuda:15_autotuned", space=HOPPER_SEARCH_SPACE,
                      prune=lambda c, gpu, D=D: hopper_prune_reason(c, gpu, D),
                      compile=lambda c, D=D: cuda.without_spills(
                          cuda.load("attention/15_autotuned.cu", dict(HEAD_DIM=D, **searched_launch(c)[0]),
                                    arch="sm_90a"), "attention"),
                      run=run_searched, default=lambda gpu, D=D: rung14_config(D))
    for D in (64, 128)}


def cuda_hopper_autotuned(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 15: rung 14's kernel with the configuration searched for the nearest shape (same D and mask) on this
    GPU; rung 14's own where none was."""
    return _hopper_attention("15_autotuned", q, k, v, causal, out,
                             lambda shape: searched_launch(HOPPER_TUNERS[shape[3]].best(shape)))


def cuda_warp_specialized(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 8: two consumer warpgroups (128 queries) and a producer warpgroup a block, registers moved by setmaxnreg."""
    return _hopper_attention("8_warp_specialized", q, k, v, causal, out)


def cuda_pingpong(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 9: rung 8, its two consumer warpgroups taking turns at Q·Kᵀ (named barriers)."""
    return _hopper_attention("9_pingpong", q, k, v, causal, out)


def _cuda(name: str, run, **kw) -> Rung:
    return Rung("cuda", name, run, f"{CUDA_DIR}/{name}.cu", **kw)


def _tune(labels: list[str]) -> list:
    """The searches (rung 6 in both languages, Triton's rungs 7 and 8) at the headline shapes, CUDA rung 15's there
    and at MODEL_SHAPES, before they are timed (for `record`)."""
    return ((tune_cuda(HEADLINE) if "cuda:6_autotuned" in labels else [])
            + (tune_cuda(HEADLINE + MODEL_SHAPES, HOPPER_TUNERS) if "cuda:15_autotuned" in labels else [])
            + [r for tuner in ("triton:6_autotuned", "triton:7_tma", "triton:8_barrier_pass") if tuner in labels
               for r in triton_attention.tune(HEADLINE, tuner)])


# ------------------------------------------------------------- memory: what a call allocates (lessons 04a-04c)

MATERIALIZED = ("1_naive", "2_coalesced")   # the rungs, in both languages, that keep S = Q·Kᵀ (then P) in DRAM


def workspace_bytes(label: str, shape: tuple) -> int | None:
    """DRAM a rung allocates on top of Q, K, V and O at `shape` = (B, H, S, D, causal): the B·H·S² fp32 score
    matrix for the materialized rungs (1 and 2, CUDA and Triton; causal or not, all of it), nothing for the
    fused ones (3 and up); None for PyTorch's SDPA, whose backends allocate what they choose (measure it)."""
    backend, name = label.split(":", 1)
    if backend == "torch":
        return None
    if backend not in ("cuda", "triton"):
        raise ValueError(f"label {label!r}: the backend must be cuda, triton or torch")
    B, H, S, _, _ = shape
    return triton_attention.score_matrix_bytes(B, H, S) if name in MATERIALIZED else 0


def peak_bytes(label: str, shape: tuple) -> int | None:
    """What one call holds at its peak: Q, K, V and O (four fp16 B·H·S·D tensors) and the rung's workspace."""
    workspace = workspace_bytes(label, shape)
    B, H, S, D, _ = shape
    return None if workspace is None else 4 * 2 * B * H * S * D + workspace


HEADLINE = [(4, 32, 4096, D, causal) for D in (64, 128) for causal in (0, 1)]
PROBLEM = register(Problem(
    name="attention",
    flops=flops,
    min_bytes=min_bytes,
    make_inputs=_make_inputs,
    reference=reference,
    new_output=lambda s, where: torch.empty(s[:4], dtype=torch.float16, device=where),
    check_shapes=[(1, 2, 1, 64, 0), (2, 3, 100, 64, 1), (1, 2, 1000, 128, 0), (1, 2, 1000, 64, 1),
                  (1, 1, 4097, 128, 1)],
    bench_shapes=HEADLINE,
    interpret_shapes=[(1, 2, 1, 64, 0), (1, 1, 19, 64, 1), (1, 1, 17, 128, 0)],  # S: 16-wide tiles + a ragged edge
    compute_roof="fp16_tc_TFLOPs",
    tune=_tune,
    compile_shape=lambda s: (1, 1, same_specialization(s[2]), s[3], s[4]),   # D and causal are compiled in
    sweep_shapes=[(4, 32, S, 64, 0) for S in (512, 1024, 2048, 8192, 16384)],
    rungs=[
        _cuda("1_naive", cuda_naive, slow=True),
        _cuda("2_coalesced", cuda_coalesced, slow=True),
        _cuda("3_fused", cuda_fused),
        _cuda("4_tensor_core", cuda_tensor_core, needs="tensor_cores"),
        _cuda("5_pipelined", cuda_pipelined, needs="tensor_cores",
              fallback=("cp.async", "rung 4's synchronous loads (no copies in flight)")),
        _cuda("6_autotuned", cuda_autotuned, needs="tensor_cores", searches=True,
              fallback=("cp.async", "rung 4's synchronous loads, tuned")),
        _cuda("7_wgmma_tma", cuda_wgmma_tma, needs="wgmma"),
        _cuda("8_warp_specialized", cuda_warp_specialized, needs="wgmma"),
        _cuda("9_pingpong", cuda_pingpong, needs="wgmma"),
        _cuda("10_intra_overlap", cuda_intra_overlap, needs="wgmma"),
        _cuda("11_fast_exp2", cuda_fast_exp2, needs="wgmma"),
        _cuda("12_three_consumers", cuda_three_consumers, needs="wgmma"),
        _cuda("13_persistent", cuda_persistent, needs="wgmma"),
        _cuda("14_critical_path", cuda_critical_path, needs="wgmma"),
        _cuda("15_autotuned", cuda_hopper_autotuned, needs="wgmma", searches=True),
        *triton_attention.rungs(),
        Rung("torch", "sdpa", sdpa, own_output=True),
        Rung("torch", "sdpa_flash", sdpa_flash, needs="flash_attention", own_output=True),
    ],
))
