"""Rung 4 of the attention backward (kernels/attention_backward.py): rungs 2 and 3 with their tiles searched per
(S, D, causal) on this GPU, and `autotuned_backward`, which runs the faster of the two there. ladder.ops's backward
calls it (and ladder.first_use, where no search ran at a new (S, D, causal), `tune` in first_use_tiles' short
list); the problem definition (kernels/attention_backward.py) runs the full searches and registers the rungs.
"""
from __future__ import annotations

import math

import torch
import triton

from ladder import autotune
from ladder.runtime import hardware
from ladder.runtime.hardware import detect
from ladder.runtime.direct_launch import Replay
from ladder.runtime.errors import Spills
from kernels import attention as forward_problem
from kernels.triton import attention_backward as tab

# Rung 4 searches rung 2's two kernels and rung 3's one, each alone at each (S, D, causal), and runs the faster
# way there: rung 3's configuration where its time (the dQ buffer's zeroing and cast included) beat the sum of
# rung 2's two best. Rung 2's kernels own disjoint outputs, so each is searched in its own tiles (the K/V program
# wants many keys, the Q program many queries); rung 3's search zeroes its dQ buffer before every timed run, and
# also tries each tile with dQ by the TMA's bulk reductions (DQ_BY_TMA) and by element atomics.
SEARCH_SPACE = {"dkdv": dict(BLOCK_M=[32, 64], BLOCK_N=[64, 128], num_warps=[4, 8], num_stages=[2, 3]),
                "dq": dict(BLOCK_M=[64, 128], BLOCK_N=[32, 64], num_warps=[4, 8], num_stages=[2, 3]),
                "dkdv_atomic": dict(BLOCK_M=[32, 64], BLOCK_N=[64, 128], num_warps=[4, 8], num_stages=[2, 3],
                                    DQ_BY_TMA=[False, True])}
MAX_REGISTERS = 192   # fp32 values a thread holds for the accumulators and the two score tiles; more spill

# The first backward at an (S, D, causal) no search has measured on this GPU times these tiles of rung 2's two
# kernels there (first_use.search_attention_backward: seconds): each tile that won a recorded search of its kernel
# at any of the 8 (S, D, causal) recorded on the H100 and on the H200 (rung 3 beat rung 2's two at none), and rung
# 2's own tiles (GPU_TILES).
FIRST_USE = {"dkdv": [dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2),
                      dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3),
                      dict(BLOCK_M=32, BLOCK_N=64, num_warps=4, num_stages=2),
                      dict(BLOCK_M=32, BLOCK_N=64, num_warps=4, num_stages=3),
                      dict(BLOCK_M=64, BLOCK_N=128, num_warps=8, num_stages=3)],
             "dq": [dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2),
                    dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3),
                    dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)]}


def prune_reason(kernel: str, c: dict, gpu, head_dim: int) -> str | None:
    """Why rung 4 does not time configuration `c` of "dkdv", "dq" or "dkdv_atomic" (rung 3's) for `head_dim` on
    `gpu` (None: timed)."""
    own, step = (c["BLOCK_M"], c["BLOCK_N"]) if kernel == "dq" else (c["BLOCK_N"], c["BLOCK_M"])
    if own % step:
        return f"{own} rows a program, steps of {step}: the causal diagonal must be whole steps"
    if gpu is not None and own < 16 * c["num_warps"]:  # it runs (rung 3's D 128 tile does): a shorter search
        return f"{own} rows a program over {c['num_warps']} warps: under 16 rows a warp, not searched"
    if c.get("DQ_BY_TMA") and (gpu is None or not gpu.has("tma")):
        return "dQ by the TMA's bulk reductions: this GPU has no TMA"
    # dK, dV (or dQ); P and dP; rung 3's step's dQ tile
    held = (1 if kernel == "dq" else 2) * own * head_dim + 2 * own * step + (kernel == "dkdv_atomic") * step * head_dim
    if held // (32 * c["num_warps"]) > MAX_REGISTERS:
        return f"{held // (32 * c['num_warps'])} fp32 values per thread (> {MAX_REGISTERS}): registers spill"
    return None


def no_spills(kernel: str, c: dict, inputs: tuple, out, causal: bool) -> None:
    """Compile configuration `c` (cached by then: tune() compiles them all at once) and rule it out
    (Spills: pruned) if it keeps values in local memory. inputs: tab.run_config's."""
    fn = tab.dq_kernel if kernel == "dq" else tab.dkdv_kernel
    q, k, v, do, lse, delta, _, scale = inputs
    args, config, constexprs = tab.search_args(kernel, c, q, k, v, do, lse, delta, out, scale)
    try:
        compiled = fn.warmup(*args, grid=(1,), CAUSAL=causal, **constexprs, **config)
        compiled._init_handles()
    except Exception:  # noqa: BLE001 -- not this check's to judge: the search's run of it fails, and says why
        return
    if getattr(compiled, "n_spills", 0):
        raise Spills(f"spills registers: {compiled.n_spills} values to local memory")


def tuner(kernel: str, head_dim: int, compile=lambda c: None, listed: list[dict] | None = None) -> autotune.Tuner:
    """Rung 4's search of `kernel` at one head size (`listed`: only these tiles); its winners are cached per GPU
    (ladder.autotune) by (S, D, causal): a call takes the winner of the nearest S searched, the S-bucket. Without a
    search on this GPU (and in the interpreter), rung 2's tiles (rung 3's for "dkdv_atomic")."""
    return autotune.Tuner(problem="attention_backward", name=f"triton:4_autotuned:{kernel}",
                          space=SEARCH_SPACE[kernel], prune=lambda c, gpu: prune_reason(kernel, c, gpu, head_dim),
                          compile=compile, run=lambda c, *inputs, out=None: tab.run_config(kernel, c, *inputs, out=out),
                          default=lambda gpu: (tab.GPU_TILES if gpu is not None
                                               else tab.INTERPRETER_TILES)[head_dim][kernel], listed=listed)


TUNERS = {(kernel, D): tuner(kernel, D) for kernel in SEARCH_SPACE for D in (64, 128)}


# ------------------------------------------------------------- the searches

SEARCH_WARMUP_MS, SEARCH_REP_MS = 50, 150   # shorter than ladder.autotune's: 24 searches fit `record`'s minutes
SEARCH_KEYS = 2**19   # B·H·S of a search's inputs: B·H = 128 at S 4096, 32 at S 16384; thousands of programs


def tune(buckets: list[tuple], reference, device: str = "cuda", listed: dict | None = None) -> list[autotune.Report]:
    """Rung 4's searches, each kernel at each (S, D, causal) of `buckets`, on fp16 inputs of B·H·S = SEARCH_KEYS
    (B = 1); `reference(q, k, v, do, causal)` -> the exact (dQ, dK, dV) each configuration is checked against.
    `listed` ({kernel: tiles}): only those kernels, in only those tiles. (device: "cpu" only where a test stands in
    for the GPU's parts.)"""
    reports = []
    for S, D, causal in buckets:
        gen = torch.Generator(device).manual_seed(7)
        H = max(1, SEARCH_KEYS // S)
        q, k, v, do = (torch.randn(1, H, S, D, generator=gen, device=device).half() for _ in range(4))
        o, lse = tab.forward(q, k, v, bool(causal))
        scale = 1 / math.sqrt(D)
        dq, dk, dv = reference(q, k, v, do, bool(causal))
        delta = tab.prepare(q, k, v, o, lse, do, bool(causal), scale, None, None, None)[3]
        inputs = (q, k, v, do, lse, delta, bool(causal), scale)
        flop = 2.5 * forward_problem.flops((1, H, S, D, causal))
        for kernel, want in (("dkdv", torch.stack((dk, dv))), ("dq", dq), ("dkdv_atomic", torch.stack((dq, dk, dv)))):
            if listed is not None and kernel not in listed:
                continue
            out = tab.run_config(kernel, tab.GPU_TILES[D][kernel], *inputs)
            search = tuner(kernel, D, compile=lambda c, kernel=kernel, out=out: no_spills(kernel, c, inputs, out, causal),
                           listed=None if listed is None else listed[kernel])
            kept = [c for c in search.configs() if search.prune(c, detect()) is None]
            fn = tab.dq_kernel if kernel == "dq" else tab.dkdv_kernel
            # one compile-ahead per kind of arguments: the descriptors' boxes are BLOCK_M rows; dQ's sums a pointer
            # or a descriptor
            for kind in sorted({(c["BLOCK_M"], c.get("DQ_BY_TMA", False)) for c in kept}):
                group = [c for c in kept if (c["BLOCK_M"], c.get("DQ_BY_TMA", False)) == kind]
                args, _, constexprs = tab.search_args(kernel, group[0], q, k, v, do, lse, delta, out, scale)
                autotune.compile_ahead(fn, [triton.Config({n: c[n] for n in ("BLOCK_M", "BLOCK_N")},
                                                          num_warps=c["num_warps"], num_stages=c["num_stages"])
                                            for c in group],
                                       dict(zip(fn.arg_names, args)), dict(CAUSAL=bool(causal), **constexprs))
            reports.append(search.search(inputs, want, flop, lambda out=out: torch.empty_like(out),
                                         warmup_ms=SEARCH_WARMUP_MS, rep_ms=SEARCH_REP_MS, shape=(S, D, int(causal))))
        del q, k, v, do, o, lse, delta, dq, dk, dv
    return reports


def searched_at(key: tuple) -> bool:
    """Whether rung 2's kernels were searched at `key` = (S, D, causal) on this GPU: the nearest search is there."""
    reports = (TUNERS[kernel, key[1]].nearest(key) for kernel in ("dkdv", "dq"))
    return any(r is not None and tuple(r.shape) == tuple(key) for r in reports)


def first_use_tiles(head_dim: int) -> dict:
    """What a first backward at a new (S, D, causal) times: FIRST_USE's tiles and rung 2's own, per kernel."""
    return {kernel: [*tiles, *([] if (own := tab.GPU_TILES[head_dim][kernel]) in tiles else [own])]
            for kernel, tiles in FIRST_USE.items()}


def exact_grads(q, k, v, do, causal: bool) -> tuple:
    """(dQ, dK, dV) fp32 by autograd through the math in fp32, a few heads at a time: their S×S scores and
    gradients near 2 GB each (all 128 heads at S 16384 would need hundreds of GB)."""
    B, H, S, D = q.shape
    flat = [t.reshape(B * H, S, D) for t in (q, k, v, do)]
    grads = [torch.empty(B * H, S, D, dtype=torch.float32, device=q.device) for _ in range(3)]
    later = torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1) if causal else None
    heads = max(1, 2**31 // (4 * S * S))
    for h in range(0, B * H, heads):
        qh, kh, vh = (t[h:h + heads].float().requires_grad_() for t in flat[:3])
        with torch.enable_grad():
            s = qh @ kh.mT / math.sqrt(D)
            if causal:
                s = s.masked_fill(later, float("-inf"))
            out = torch.softmax(s, dim=-1) @ vh
            got = torch.autograd.grad(out, (qh, kh, vh), flat[3][h:h + heads].float())
        for g, x in zip(grads, got):
            g[h:h + heads] = x
        del s, out, got
    return tuple(g.reshape(B, H, S, D) for g in grads)


# ------------------------------------------------------------- rung 4: the choice per shape, and its launch

def one_kernel_wins(split: list, one) -> bool:
    """Whether rung 3's search report `one` beat rung 2's two (`split`: the dkdv and dq reports) searched at the
    same shape: its best time under the sum of theirs."""
    return (one is not None and all(r is not None and tuple(r.shape) == tuple(one.shape) for r in split)
            and one.best_ms < sum(r.best_ms for r in split))


def tuned_tiles(S: int, D: int, causal: bool) -> dict:
    """Rung 4's tiles at (S, D, causal): each of rung 2's kernels' searched winner for the nearest S (rung 2's
    tiles without one), and "one_kernel": rung 3's searched winner where, searched at that same S, it ran faster
    than rung 2's two winners together (else None)."""
    return autotune.remembered(("attention backward tiles", S, D, causal), lambda: _tiles((S, D, int(causal))))


def _tiles(key: tuple) -> dict:
    S, D, causal = key
    split = [TUNERS[kernel, D].nearest(key) for kernel in ("dkdv", "dq")]
    faster = one_kernel_wins(split, TUNERS["dkdv_atomic", D].nearest(key))
    return {"delta": tab.TILES[D]["delta"], "dkdv": TUNERS["dkdv", D].best(key), "dq": TUNERS["dq", D].best(key),
            "one_kernel": TUNERS["dkdv_atomic", D].best(key) if faster else None}


def autotuned_backward(q, k, v, o, lse, do, causal: bool, scale: float | None = None, dlse=None,
                       out=None) -> tuple:
    """Rung 4: at the nearest (S, D, causal) searched on this GPU, rung 3 in its searched tiles where it ran faster
    there, else rung 2 in its, with Δ computed by its Q kernel, launched first (no preprocess: one launch fewer, and
    dO read once less). Rung 2 also where torch.use_deterministic_algorithms asks for results that repeat
    bit for bit (rung 3's sums do not), and where rung 3's tiles add dQ through the TMA and this launch has none
    (a traced one, or operands a tensor map does not take: tab.qdo_by_tma). An eager call on a GPU into new
    gradients replays the launches of the first call at its operands' layouts (_replayed)."""
    if out is None and tab.launches_directly(q, k, v, o, lse, do, dlse):
        return _replayed(q, k, v, o, lse, do, causal, scale, dlse)
    return _backward(q, k, v, o, lse, do, causal, scale, dlse, out)


def _choice(q, do, causal: bool) -> tuple[dict | None, dict | None]:
    """What autotuned_backward runs at q's shape: (rung 4's tiles, or None where D has none; rung 3's searched
    configuration where rung 3 runs, else None: rung 2)."""
    S, D = int(q.shape[2]), int(q.shape[3])   # tiles are chosen per shape: a traced one specializes here
    tiles = tuned_tiles(S, D, causal) if D in tab.TILES else None
    one = tiles and tiles["one_kernel"]
    if one and not torch.are_deterministic_algorithms_enabled() and (not one.get("DQ_BY_TMA") or tab.qdo_by_tma(q, do)):
        return tiles, one
    return tiles, None


def _backward(q, k, v, o, lse, do, causal, scale, dlse, out, delta=None, sums=None) -> tuple:
    """autotuned_backward's choice, run; delta and sums: buffers for Δ and rung 3's dQ sums (tab's, else new)."""
    tiles, one = _choice(q, do, causal)
    if one:
        return tab.atomic_dq_backward(q, k, v, o, lse, do, causal, scale, dlse, out, config=one, delta=delta, sums=sums)
    return tab.delta_in_dq_backward(q, k, v, o, lse, do, causal, scale, dlse, out, tiles=tiles, delta=delta)


def _buffers(q, k, v, acc: torch.dtype, atomic: bool) -> tuple:
    """New dQ, dK, dV (laid out as tab.prepare makes them), Δ's buffer, and rung 3's zeroed dQ sums (None for
    rung 2): what a recorded backward and each replay of it write."""
    sums = q.new_zeros(q.shape, dtype=acc) if atomic else None
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), q.new_empty(q.shape[:3], dtype=acc), sums


def _replayed(q, k, v, o, lse, do, causal: bool, scale, dlse) -> tuple:
    """autotuned_backward at the cost of its allocations and the compiled kernels' own launchers: the first call at
    a layout (every operand's shape, dtype, strides and 16-byte alignment, which operands are one tensor, causal,
    scale, the deterministic switch, the GPU) runs as usual and records its launches; later calls there replay
    them on their own tensors. The recording is kept as the searched tiles are (autotune.remembered: until the
    search cache changes)."""
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    dlse = tab.dlse_as_read(dlse, acc)   # before the key: the replay's tensor is the one the kernels read
    given = (q, k, v, o, lse, do, dlse)
    device = torch._C._cuda_getDevice()   # torch.cuda.current_device() less its check that CUDA is set up: it is
    # the GPU's capability as detect() answers it (KERNEL_LADDER_EMULATE's, where set): os.environ costs more
    key = ("attention backward launches", causal, scale, torch.are_deterministic_algorithms_enabled(),
           hardware.detect().capability, device, len(set(map(id, given))),
           *[None if t is None else (t.shape, t.dtype, t.stride(), t.data_ptr() % 16 == 0) for t in given])
    first = []
    replay = autotune.remembered(key, lambda: _recorded(given, causal, scale, acc, first))
    if first:
        return first[0]
    return _backward(*given[:6], causal, scale, dlse, None) if replay is None else replay(given, device)


class _Replayed:
    """One layout's backward replayed: new dQ, dK, dV, Δ's buffer (and rung 3's zeroed dQ sums), the recorded
    launches on them (and the sums' cast into dQ)."""

    def __init__(self, launches: Replay, acc: torch.dtype, atomic: bool):
        self.launches, self.acc, self.atomic = launches, acc, atomic

    def __call__(self, given: tuple, device: int) -> tuple:
        buffers = _buffers(*given[:3], self.acc, self.atomic)
        self.launches((*given, *buffers), device)
        dq, dk, dv, _, sums = buffers
        if self.atomic:
            dq.copy_(sums)
        return dq, dk, dv


def _recorded(given: tuple, causal: bool, scale, acc: torch.dtype, first: list) -> _Replayed | None:
    """The first call at a layout: run into buffers made here, its result appended to `first`, its launches
    recorded; None where they cannot be replayed (a launch on a tensor not among the call's, or one tensor given
    in two places)."""
    q, k, v, o, lse, do, dlse = given
    atomic = _choice(q, do, causal)[1] is not None
    buffers = dq, dk, dv, delta, sums = _buffers(q, k, v, acc, atomic)
    with tab.recording() as log:
        first.append(_backward(q, k, v, o, lse, do, causal, scale, dlse, (dq, dk, dv), delta, sums))
    if q.numel() and not log:
        return None
    try:
        return _Replayed(Replay(log, (*given, *buffers)), acc, atomic)
    except KeyError:
        return None


