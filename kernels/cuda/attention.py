"""Attention forward in CUDA C++, O = softmax(Q·Kᵀ/√D)·V: the launchers of kernels/cuda/attention/ (a .cu a rung).

Q, K, V, O fp16 (B, H, S, D), contiguous; D 64 or 128; causal or not (an argument of every kernel, not a define).

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

Every launcher takes (q, k, v, causal, out=None) and returns out; a bad argument raises a ValueError that names
it. The launchers check that the tensors are on the GPU before anything else, so a CPU-only machine gets that
ValueError, not a missing-GPU error. Rungs 6 and 15 launch the configuration a `config_for(shape)` gives, their
unsearched one without it: their searches, the rung list and the reference live with the problem definition,
kernels/attention.py. `python -m kernels.cuda.attention` checks every rung against the fp32 math and times it
beside SDPA on a GPU; on a CPU it compiles each rung's file with NVRTC.
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch
import triton

from ladder.runtime import cuda, tma, validate
from ladder.runtime.hardware import detect
from ladder.runtime.world import WORLD
from kernels.triton import attention as triton_attention

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


def _cuda_operands(q, k, v, out, align_bytes: int = 0):
    """The Triton ladder's checks (kernels/triton/attention.py, operands) for a CUDA kernel: first each tensor must
    be fp16, 4-D, on the GPU (and `align_bytes`-aligned where the kernel loads vectors); then the shared checks
    (shapes, D)."""
    named = [("q", q), ("k", k), ("v", v)] + ([("out", out)] if out is not None else [])
    for name, t in named:
        validate.tensor(name, t, dtype=torch.float16, ndim=4, device="cuda", align_bytes=align_bytes)
    return triton_attention.operands(q, k, v, out)


def _grid_fits(**dims: int) -> None:
    for name, n in dims.items():
        if n > GRID_YZ_MAX:
            raise ValueError(f"{name}={n} blocks: over the {GRID_YZ_MAX} a grid's y or z dimension can hold")


def naive(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
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


def coalesced(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
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


def fused(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
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


def tensor_core(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 4: Q·Kᵀ and P·V on mma.sync, the softmax on the accumulators; K, V tiles loaded synchronously."""
    return _flash_launch("4_tensor_core.cu", "attention", lambda shape: TENSOR_CORE, q, k, v, causal, out)


def pipelined(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 5: rung 4 with cp.async double buffering of K and V (rung 4's loads on GPUs without cp.async)."""
    return _flash_launch("5_pipelined.cu", "attention", lambda shape: PIPELINED, q, k, v, causal, out)


def autotuned(q, k, v, causal: bool, out: torch.Tensor | None = None, config_for=None) -> torch.Tensor:
    """Rung 6: rung 5's kernel, the heaviest causal blocks first, in the tiles config_for(shape) gives for the checked
    shape (B, H, S, D, causal): the search's winner (kernels/attention.py), or PIPELINED's without config_for."""
    return _flash_launch("6_autotuned.cu", "attention_heavy_first", config_for or (lambda shape: PIPELINED),
                         q, k, v, causal, out)


# ------------------------------------------------------------- rungs 7-15 (Hopper): wgmma and the TMA

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


def persistent_grid(items: int, causal: bool, sm_count: int) -> int:
    """Rungs 13-14's blocks: one an SM (its shared memory allows no second) for all `items`; causal, one an item: a
    fixed stride of unequal items leaves SMs idle (kernels/NOTES.md, rung 13), while the hardware's block scheduler
    gives the next item to whichever SM is free."""
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


def _hopper_attention(name: str, q, k, v, causal: bool, out, launch_for=None, least_shared: int = 0) -> torch.Tensor:
    """Hopper rung `name` (sm_90a) with its launch in HOPPER, or launch_for(shape) = (defines, rows, threads) for the
    validated shape (B, H, S, D, causal): a searched configuration's. Q·Kᵀ and P·V on wgmma, Q, K and V brought by
    the TMA through 3-D tensor maps (a head's rows: zeros past S); the tensor maps need 16-byte aligned tensors,
    the stores 4-byte pairs. least_shared: dynamic shared memory to ask for at least (more than the kernel uses
    leaves fewer blocks an SM)."""
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
                    + cuda.int32s(causal) + items, max(wgmma_tma_shared_bytes(D, c, rows), least_shared))
    return out


def wgmma_tma(q, k, v, causal: bool, out: torch.Tensor | None = None, blocks_per_sm: int | None = None) -> torch.Tensor:
    """Rung 7: one consumer warpgroup (64 queries) and a producer warp a block. blocks_per_sm: launched asking for
    enough shared memory that no more blocks than that fit an SM (lesson 04e's occupancy experiment); the kernel
    uses no more than its own."""
    least = 0
    if blocks_per_sm is not None:   # an SM's shared memory: the most a block may ask for and the 1 KiB kept per block
        if type(blocks_per_sm) is not int or blocks_per_sm < 1:
            raise ValueError(f"wgmma_tma: blocks_per_sm is {blocks_per_sm!r}; it takes a whole number from 1 (or None)")
        sm_bytes = detect().smem_per_block_bytes + SHARED_KEPT_PER_BLOCK
        least = sm_bytes // blocks_per_sm - SHARED_KEPT_PER_BLOCK - RUNG7_STATIC_SHARED
    return _hopper_attention("7_wgmma_tma", q, k, v, causal, out, least_shared=least)


SHARED_KEPT_PER_BLOCK = 1024   # bytes of an SM's shared memory the hardware keeps for each resident block (sm_80 on)
RUNG7_STATIC_SHARED = 2048     # at least rung 7's static shared memory (its barriers and more: 1,152 B as compiled)


def warp_specialized(q, k, v, causal: bool, out: torch.Tensor | None = None,
                     key_tile: int | None = None) -> torch.Tensor:
    """Rung 8: two consumer warpgroups (128 queries) and a producer warpgroup a block, registers moved by setmaxnreg.
    key_tile: keys a K/V tile, 64 or 128, where not HOPPER's (lesson 04e's experiment: at D = 128 rung 8's sharing
    apart from its wider key tiles)."""
    launch_for = None
    if key_tile is not None:
        if type(key_tile) is not int or key_tile not in (64, 128):
            raise ValueError(f"warp_specialized: key_tile is {key_tile!r}; it takes 64 or 128 (or None)")

        def launch_for(shape):
            tiles, rows, threads = hopper_launch("8_warp_specialized", shape[3])
            return dict(tiles, BLOCK_N=key_tile), rows, threads
    return _hopper_attention("8_warp_specialized", q, k, v, causal, out, launch_for)


def pingpong(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 9: rung 8, its two consumer warpgroups taking turns at Q·Kᵀ (named barriers)."""
    return _hopper_attention("9_pingpong", q, k, v, causal, out)


def intra_overlap(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 10: rung 9, each consumer warpgroup exponentiating tile t while its P·V of tile t - 1 runs."""
    return _hopper_attention("10_intra_overlap", q, k, v, causal, out)


def fast_exp2(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 11: rung 10, each exponential one MUFU.EX2 (ex2.approx.ftz, not exp2f's range fix-up)."""
    return _hopper_attention("11_fast_exp2", q, k, v, causal, out)


def three_consumers(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 12: rung 11 with three consumer warpgroups (192 queries a block) at D = 64, rung 11 itself at D = 128."""
    return _hopper_attention("12_three_consumers", q, k, v, causal, out)


def persistent(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 13: rung 12 with a block an SM, each walking the query blocks gridDim.x apart (causal: a block each)."""
    return _hopper_attention("13_persistent", q, k, v, causal, out)


def critical_path(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 14: rung 13 with O rescaled under the next S's wgmma and S started by the wgmma, not zeroed first."""
    return _hopper_attention("14_critical_path", q, k, v, causal, out)


# Rung 15: consumer warpgroups, key tile and ring depth searched (kernels/attention.py); rung 14's launch is one point
# of its space. A consumer thread gets what setmaxnreg can give it beside a producer warpgroup at 24 registers: 240
# with two warpgroups, 160 with three.
CONSUMER_REGISTERS = {2: 240, 3: 160}


def autotuned_launch(c: dict) -> tuple[dict, int, int]:
    """Rung 15's launch in configuration `c` (CONSUMERS, BLOCK_N, STAGES): its defines, queries a block (64 a consumer
    warpgroup), threads a block (the consumers and a producer warpgroup)."""
    defines = dict(c, CONSUMER_REGISTERS=CONSUMER_REGISTERS[c["CONSUMERS"]])
    return defines, 64 * c["CONSUMERS"], 128 * c["CONSUMERS"] + 128


def hopper_autotuned(q, k, v, causal: bool, out: torch.Tensor | None = None, config_for=None) -> torch.Tensor:
    """Rung 15: rung 14's kernel in the configuration config_for(shape) gives for the checked shape (B, H, S, D,
    causal): the search's winner (kernels/attention.py), or rung 14's launch without config_for."""
    return _hopper_attention("15_autotuned", q, k, v, causal, out,
                             config_for and (lambda shape: autotuned_launch(config_for(shape))))


def hopper_op(q, k, v, causal: bool, scale: float, out: torch.Tensor, lse: torch.Tensor, config: dict) -> None:
    """Rung 15's kernel as ladder.ops launches it (hopper_overlays/op_attention.cu), in configuration `config` (a
    point of its search: CONSUMERS, BLOCK_N, STAGES): q, k, v fp16 (B, H, S, D) views with contiguous rows (their
    heads and rows read through 4-D tensor maps, tma.encode_heads), O written into `out` (any layout whose rows are
    contiguous), each query's log-sum-exp (natural log) into `lse` (B, H, S) fp32 contiguous. On torch's stream."""
    B, H, S, D = q.shape
    defines, rows, threads = autotuned_launch(config)
    (map_q, inner_q), (map_k, inner_k), (map_v, inner_v) = (tma.encode_heads(t, box) for t, box in (
        (q, rows), (k, config["BLOCK_N"]), (v, config["BLOCK_N"])))
    if not inner_q == inner_k == inner_v:
        raise ValueError("q, k and v must order their heads and rows alike (all views of one projection, or none)")
    _grid_fits(BH=B * H)
    module = cuda.load("attention/hopper_overlays/op_attention.cu", dict(HEAD_DIM=D, **defines), arch="sm_90a")
    grid = persistent_grid(cuda.cdiv(S, rows) * B * H, causal, detect().sm_count)
    cuda.launch(module, "attention", grid, threads,
                (map_q, map_k, map_v, out) + cuda.int32s(S) + (np.float32(scale * triton_attention.LOG2E),)
                + cuda.int32s(causal, B * H) + (lse,) + cuda.int32s(H, inner_q)
                + (np.int64(out.stride(0)), np.int64(out.stride(1))) + cuda.int32s(out.stride(2)),
                wgmma_tma_shared_bytes(D, defines, rows))


# ------------------------------------------------------------- run alone: python -m kernels.cuda.attention

# Each rung's launcher by its name (kernels/attention.py registers them as the rungs cuda:<name>)
RUNGS = {"1_naive": naive, "2_coalesced": coalesced, "3_fused": fused, "4_tensor_core": tensor_core,
         "5_pipelined": pipelined, "6_autotuned": autotuned, "7_wgmma_tma": wgmma_tma,
         "8_warp_specialized": warp_specialized, "9_pingpong": pingpong, "10_intra_overlap": intra_overlap,
         "11_fast_exp2": fast_exp2, "12_three_consumers": three_consumers, "13_persistent": persistent,
         "14_critical_path": critical_path, "15_autotuned": hopper_autotuned}


def _defines(name: str, head_dim: int) -> dict:
    """The defines rung `name`'s file compiles with at head_dim, unsearched (rung 6: PIPELINED, rung 15: rung 14's)."""
    if name in HOPPER:
        return dict(HEAD_DIM=head_dim, **hopper_launch(name, head_dim)[0])
    tiles = {"1_naive": None, "2_coalesced": {}, "3_fused": FUSED_TILES[head_dim], "4_tensor_core": TENSOR_CORE,
             "5_pipelined": PIPELINED, "6_autotuned": PIPELINED}[name]
    return {} if tiles is None else dict(HEAD_DIM=head_dim, **tiles)


def _self_check(shape: tuple = (1, 2, 1000, 64), timed: tuple = (4, 32, 4096, 64)):
    """On a GPU each rung (the Hopper ones on sm_90) checked against the fp32 softmax(Q·Kᵀ/√D)·V at a ragged
    `shape` (B, H, S, D), causal and not, then timed beside SDPA at `timed`; on a CPU each rung's file compiled
    with NVRTC at D = 64 (sm_80; the Hopper rungs sm_90a), unsearched."""
    if not WORLD.gpu:
        print("no GPU: each rung's file compile-checked with NVRTC at D = 64 (sm_80; the Hopper rungs sm_90a), "
              "in its unsearched configuration")
        for name in RUNGS:
            arch = "sm_90a" if name in HOPPER else "sm_80"
            start = time.perf_counter()
            cubin = cuda.compile_cubin(f"attention/{name}.cu", arch,
                                       tuple((k, str(v)) for k, v in _defines(name, 64).items()))
            print(f"  {name:20s} {arch:7s} {len(cubin) / 1024:6.0f} KiB cubin  {time.perf_counter() - start:5.1f} s")
        print("running them needs a GPU")
        return
    hopper = detect().has("wgmma")
    runs = {name: run for name, run in RUNGS.items() if hopper or name not in HOPPER}
    gen = torch.Generator("cuda").manual_seed(0)
    q, k, v = (torch.randn(*shape, generator=gen, device="cuda").half() for _ in range(3))
    print(f"checked at (B, H, S, D) = {shape}, max |error| against the fp32 math, without a mask / causal"
          + ("" if hopper else " (rungs 7-15 need sm_90's wgmma)"))
    for name, run in runs.items():
        errors = []
        for causal in (False, True):
            scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(shape[3])
            if causal:   # no key after the query
                scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), -math.inf)
            errors.append((run(q, k, v, causal).float() - torch.softmax(scores, -1) @ v.float()).abs().max().item())
        print(f"  {name:20s} {errors[0]:.3g} / {errors[1]:.3g}" + ("" if all(e < 0.01 for e in errors) else "   WRONG"))
    B, H, S, D = timed
    q, k, v = (torch.randn(B, H, S, D, device="cuda").half() for _ in range(3))
    print(f"median ms at (B, H, S, D) = {timed}, without a mask (triton.testing.do_bench), TFLOP/s")
    sdpa = lambda q, k, v, causal: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    timed_rungs = {n: f for n, f in runs.items() if n not in ("1_naive", "2_coalesced")}   # S² of them: slow
    for name, run in {"SDPA": sdpa, **timed_rungs}.items():
        ms = triton.testing.do_bench(lambda: run(q, k, v, False))
        print(f"  {name:20s} {ms:8.3f} ms  {4 * B * H * S * S * D / ms / 1e9:6.1f}")


if __name__ == "__main__":
    _self_check()
