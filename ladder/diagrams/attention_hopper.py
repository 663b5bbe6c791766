"""Lessons 04e and 04f, attention on Hopper (CUDA rungs 7-15): the producer and consumer rings (rungs 7-8), two
consumer warpgroups taking turns and overlapping within one (rungs 9-10, played as their loops run), the softmax's
instructions (rung 11), a third consumer (12), persistent blocks (13), the path to the next product (14) and the
query blocks at GPT-2's shapes (15).
"""
from __future__ import annotations

import numpy as np
from matplotlib.patches import Polygon, Rectangle

from kernels import attention as at
from kernels.cuda import attention as cuda_attention
from ladder.diagrams.matmul_hopper import warp_specialized_ring
from ladder.diagrams.style import (CUDA, IN_FLIGHT, TENSOR_CORES, _bare, _box, _cdiv, _figure, _key, _rings, _shade)
from ladder.lessons import l04f_attention_softmax_instructions as l04f
from ladder.lessons.source import cu_define


# ------------------------------------------------------------- lesson 04e: rungs 7-10

WGMMA_TMA_RUNG = "attention/7_wgmma_tma.cu"
WARP_SPECIALIZED_RUNG = "attention/8_warp_specialized.cu"


def attention_wgmma_tma_ring(tiles: int = 6):
    """Attention rung 7 (7_wgmma_tma.cu's CONSUMERS and PRODUCER_THREADS, kernels/cuda/attention.py WGMMA_TMA's
    STAGES at D = 128): one block's producer warp and consumer warpgroup around its ring of K/V stages (two or three
    such blocks share an SM, each with a ring of its own)."""
    producer_warps = cu_define(WGMMA_TMA_RUNG, "PRODUCER_THREADS") // 32
    return warp_specialized_ring(cuda_attention.WGMMA_TMA[128]["STAGES"], producer_warps,
                                 cu_define(WGMMA_TMA_RUNG, "CONSUMERS"), tiles,
                                 "Attention rung 7, one block: a producer warp keeps its consumer warpgroup's "
                                 "ring of K and V tiles full", producer="producer warp", tile="K/V tile")


def attention_warp_specialized_ring(tiles: int = 6):
    """Attention rung 8 (8_warp_specialized.cu's CONSUMERS, kernels/cuda/attention.py WARP_SPECIALIZED's STAGES at
    D = 128): the producer warpgroup and the consumer warpgroups around the ring of K/V stages."""
    return warp_specialized_ring(cuda_attention.WARP_SPECIALIZED[128]["STAGES"], 1,
                                 cu_define(WARP_SPECIALIZED_RUNG, "CONSUMERS"), tiles,
                                 "Attention rung 8: a producer warpgroup feeds the consumer warpgroups "
                                 "one ring of K and V tiles", tile="K/V tile")


def pingpong_timeline(tiles: int, pingpong: bool) -> list[dict]:
    """Unit steps of rung 8's two consumer warpgroups, each key tile Q·Kᵀ (S), the softmax (exp) and P·V (PV), one
    unit each, the tensor cores one warpgroup's product at a time. Without turns, the order nothing in rung 8
    rules out: the two in step, both exponentiating while the tensor cores wait (5 units a tile); with rung 9's
    turns, one's softmax under the other's product (4 units a tile). Units, not measured times."""
    steps = []
    for j in range(tiles):
        if pingpong:  # group 0: S, exp, PV, its turn passed; group 1 one unit behind
            steps += [{"tensor cores": ("g0", "math"), "warpgroup 0": (f"S{j}", "math")},
                      {"tensor cores": ("g1", "math"), "warpgroup 0": (f"exp{j}", "store"), "warpgroup 1": (f"S{j}", "math")},
                      {"tensor cores": ("g0", "math"), "warpgroup 0": (f"PV{j}", "math"), "warpgroup 1": (f"exp{j}", "store")},
                      {"tensor cores": ("g1", "math"), "warpgroup 1": (f"PV{j}", "math")}]
        else:
            steps += [{"tensor cores": ("g0", "math"), "warpgroup 0": (f"S{j}", "math")},
                      {"tensor cores": ("g1", "math"), "warpgroup 1": (f"S{j}", "math")},
                      {"warpgroup 0": (f"exp{j}", "store"), "warpgroup 1": (f"exp{j}", "store")},
                      {"tensor cores": ("g0", "math"), "warpgroup 0": (f"PV{j}", "math")},
                      {"tensor cores": ("g1", "math"), "warpgroup 1": (f"PV{j}", "math")}]
    return steps


def attention_pingpong(tiles: int = 2):
    """Rungs 8 and 9's consumer warpgroups over `tiles` key tiles (pingpong_timeline): in step, and taking turns
    at the tensor cores (9_pingpong.cu's named barriers)."""
    rows = ["tensor cores", "warpgroup 0", "warpgroup 1"]
    plain, turns = pingpong_timeline(tiles, False), pingpong_timeline(tiles, True)
    fig = _rings([(rows, plain, f"rung 8, the two in step: {len(plain) // tiles} units a tile, the tensor cores idle "
                                f"while both exponentiate"),
                  (rows, turns, f"rung 9, turns (bar.sync / bar.arrive): {len(turns) // tiles} units a tile, one's "
                                f"softmax under the other's product")],
                 "Two consumer warpgroups, one set of tensor cores (units, not measured times)", prefix="",
                 key=[("a product on the tensor cores", TENSOR_CORES), ("the softmax, on its own threads", CUDA),
                      ("idle or waiting", "white")])
    fig.axes[1].set_xlim(0, len(plain))   # one time scale: turns end the units they save earlier
    fig.text(0.5, 0.085, "g0, g1: the warpgroup whose product runs; S: Q·Kᵀ, exp: the softmax (its own threads, "
             "no tensor cores), PV: P·V", ha="center", fontsize=9)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    return fig


INTRA_OVERLAP_RUNG = "attention/10_intra_overlap.cu"


def consumer_programs(tiles: int, overlap: bool, softmax: float = 2.0, rescale: float = 0.25) -> list[tuple]:
    """One consumer warpgroup's key loop as 7_wgmma_tma.cu writes it, as a list of steps: ("turn", products) issues
    products inside a ping-pong turn (wait_turn ... pass_turn), ("issue", products) outside one, ("wait", product)
    is wgmma_wait, ("exp", t) the softmax of tile t (`softmax` units), ("rescale", t) rung 10's rescale of O by
    alpha (`rescale` units). Rung 9 (overlap False): per tile, S in a turn, its softmax (O rescaled inside it),
    then P·V. Rung 10 (INTRA_OVERLAP): S of tile 0 alone and its softmax; per tile t >= 1, S of t and P·V of t - 1
    in one turn, wait for S alone, the softmax of t, wait for P·V, the rescale; the last P·V in a turn of its own."""
    steps = []
    if not overlap:
        for t in range(tiles):
            steps += [("turn", (f"S{t}",)), ("wait", f"S{t}"), ("exp", t), ("issue", (f"PV{t}",)), ("wait", f"PV{t}")]
        return steps
    steps += [("turn", ("S0",)), ("wait", "S0"), ("exp", 0)]
    for t in range(1, tiles):
        steps += [("turn", (f"S{t}", f"PV{t - 1}")), ("wait", f"S{t}"), ("exp", t), ("wait", f"PV{t - 1}"),
                  ("rescale", t)]
    return steps + [("turn", (f"PV{tiles - 1}",)), ("wait", f"PV{tiles - 1}")]


def play_consumers(programs: list[list[tuple]], softmax: float = 2.0, rescale: float = 0.25) -> list[tuple]:
    """Play consumer warpgroups' programs (consumer_programs) against one set of tensor cores: each product one
    unit, run in the order issued; turns strictly alternate, warpgroup 0 first (9_pingpong.cu's named barriers);
    whichever warpgroup can act soonest acts first. Returns boxes (row, start, end, label, kind): row "tensor
    cores" or "warpgroup g", kind "product" (on a warpgroup's row: its own product running while it waits for
    it), "softmax" or "rescale". Units, not measured times."""
    pc, now, done, boxes = [0] * len(programs), [0.0] * len(programs), {}, []
    started: dict[tuple[int, str], float] = {}
    tc_free, turn, turn_at = 0.0, 0, 0.0

    def ready(g: int) -> float:
        kind, arg = programs[g][pc[g]]
        if kind == "turn":
            return max(now[g], turn_at) if turn == g else float("inf")
        return max(now[g], done[g, arg]) if kind == "wait" else now[g]

    while any(pc[g] < len(programs[g]) for g in range(len(programs))):
        g = min((g for g in range(len(programs)) if pc[g] < len(programs[g])), key=lambda g: (ready(g), g))
        at, (kind, arg) = ready(g), programs[g][pc[g]]
        if kind in ("turn", "issue"):
            for product in arg:
                start = max(at, tc_free)
                tc_free = done[g, product] = start + 1.0
                started[g, product] = start
                boxes.append(("tensor cores", start, tc_free, f"g{g} {product}", "product"))
            if kind == "turn":
                turn, turn_at = (g + 1) % len(programs), at
        elif kind == "wait":
            if done[g, arg] > now[g]:
                boxes.append((f"warpgroup {g}", max(now[g], started[g, arg]), done[g, arg], arg, "product"))
        else:
            length = softmax if kind == "exp" else rescale
            boxes.append((f"warpgroup {g}", at, at + length, f"exp{arg}" if kind == "exp" else "",
                          "softmax" if kind == "exp" else kind))
            at += length
        now[g], pc[g] = at, pc[g] + 1
    return boxes


def _timeline(ax, boxes: list[tuple], rows: list[str], end: float, title: str):
    colors = {"product": TENSOR_CORES, "softmax": CUDA, "rescale": _shade(CUDA, 0.45), "idle": "0.92",
              "copy": IN_FLIGHT}
    for row, start, stop, label, kind in boxes:
        y = rows.index(row)
        ax.add_patch(Rectangle((start, y + 0.1), stop - start, 0.8, facecolor=colors[kind], edgecolor="white",
                               lw=1.0, zorder=2))
        if label:   # a one-unit box holds six characters at 7 points
            ax.text((start + stop) / 2, y + 0.5, label, ha="center", va="center", fontsize=7 if stop - start <= 1 else 8,
                    color="white" if kind == "product" else "k", zorder=3)
    ax.vlines(np.arange(int(np.ceil(end)) + 1), -0.05, len(rows) + 0.05, color="0.85", lw=0.6, zorder=1)
    ax.set_xlim(0, np.ceil(end))
    ax.set_ylim(len(rows), 0)
    ax.set_yticks(np.arange(len(rows)) + 0.5, rows, fontsize=9)
    ax.set_xticks(np.arange(int(np.ceil(end)) + 1), [str(u) for u in range(int(np.ceil(end)) + 1)], fontsize=8)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title(title, fontsize=10, loc="left")


def tile_period(boxes: list[tuple]) -> float:
    """Units between warpgroup 0's last two Q·Kᵀ on the tensor cores (play_consumers' boxes): how often a key tile
    starts once the loop runs (needs 3 tiles or more: the first tile's prologue differs)."""
    starts = sorted(start for row, start, _, label, _ in boxes if row == "tensor cores" and label.startswith("g0 S"))
    return starts[-1] - starts[-2]


def attention_intra_overlap(tiles: int = 3, softmax: float = 2.5, rescale: float = 0.25):
    """Rungs 9 and 10's consumer warpgroups (10_intra_overlap.cu's CONSUMERS) over `tiles` key tiles, played by
    play_consumers from the loops consumer_programs writes down: each product one unit, a softmax `softmax`
    units, rung 10's rescale `rescale` (units, not measured times). With the default, a softmax longer than the
    other warpgroup's two products: rung 9's tensor cores wait for it, rung 10's do not."""
    consumers = cu_define(INTRA_OVERLAP_RUNG, "CONSUMERS")
    rows = ["tensor cores"] + [f"warpgroup {g}" for g in range(consumers)]
    played = {overlap: play_consumers([consumer_programs(tiles, overlap, softmax, rescale)] * consumers, softmax,
                                      rescale) for overlap in (False, True)}
    end = max(stop for boxes in played.values() for _, _, stop, _, _ in boxes)
    fig = _figure(12, 1.4 + 0.5 * 2 * (len(rows) + 1.5))
    axes = fig.subplots(2, 1)
    for ax, overlap in zip(axes, (False, True)):
        period = tile_period(played[overlap])
        what = ("rung 9: S, softmax, P·V in turn, the softmax under the other warpgroup's products only"
                if not overlap else "rung 10: S of tile t and P·V of t−1 in one turn, the softmax of t under that "
                                    "P·V, O rescaled after it")
        _timeline(ax, played[overlap], rows, end, f"{what}: a tile every {period:g} units, the tensor cores idle "
                                                  f"{period - 2 * consumers:g}")
    fig.suptitle(f"{consumers} consumer warpgroups, one set of tensor cores: a product 1 unit, a softmax {softmax:g}, "
                 f"rung 10's rescale {rescale:g} (units, not measured times)", fontsize=12)
    _consumers_key(fig, "rung 10: O rescaled once its P·V is done")
    return fig


def _consumers_key(fig, rescaled: str) -> None:
    """The key under the consumer warpgroups' timelines (attention_intra_overlap, attention_three_consumers)."""
    _key(fig, [("a product on the tensor cores (gN: whose)", TENSOR_CORES), ("the softmax, on the warpgroup's threads", CUDA),
               (rescaled, _shade(CUDA, 0.45)), ("idle or waiting", "white")], y=0.0)
    fig.tight_layout(rect=(0, 0.06, 1, 1))


# ------------------------------------------------------------- lesson 04f: rungs 11-15

# The softmax's opcode families (l04f.SOFTMAX_OPCODES, in order), then everything else.
_OPCODE_COLORS = ("#4c72b0", TENSOR_CORES, "#8172b2", "#64b5cd", "#ccb974", "#937860", "#dd8452", "0.8")


def _opcode_bars(rows: dict[str, dict], families: tuple, ends: dict[str, str], xlabel: str, title: str,
                 height: float, xmax: float):
    """A stacked bar per rung (rows: rung name -> width of each opcode family), the text `ends[name]` after it."""
    colors = dict(zip(families, _OPCODE_COLORS))
    fig = _figure(11, height)
    ax = fig.subplots()
    for y, (name, widths) in enumerate(rows.items()):
        left = 0.0
        for family in families:
            ax.barh(y, widths[family], left=left, color=colors[family], edgecolor="white", height=0.6)
            left += widths[family]
        ax.text(left + 0.01 * xmax, y, ends[name], va="center", fontsize=9)
    ax.set_yticks(range(len(rows)), [f"rung {n.split('_')[0]}" for n in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, xmax)
    ax.set_xlabel(xlabel)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.suptitle(title, fontsize=11)
    _key(fig, [(f, colors[f]) for f in families], y=0.0)
    fig.tight_layout(rect=(0, 0.1 * 3.2 / height, 1, 1))
    return fig


def softmax_instruction_mix(head_dim: int = 64):
    """Rungs 10 and 11's instructions per score at `head_dim`, by opcode family, from their SASS
    (l04f.softmax_instruction_mix): rung 11 drops exp2f's fix-up (FSETP and two FMULs per exponential)."""
    mix = l04f.softmax_instruction_mix(head_dim=head_dim)
    families = l04f.SOFTMAX_OPCODES
    total = {name: sum(m[f] for f in families) for name, m in mix.items()}
    return _opcode_bars(mix, families, {name: f"{t:.2f} a score" for name, t in total.items()},
                        f"SASS instructions per score a consumer thread owns: the softmax, O's rescale and its epilogue "
                        f"(sm_90a, D = {head_dim}; count / BLOCK_N)",
                        "rung 11 drops exp2f's range fix-up (FSETP and two FMULs an exponential): the rest is the same", 3.2, 1.35 * max(total.values()))


def attention_three_consumers(tiles: int = 4, softmax: float = 4.0, rescale: float = 0.25):
    """Rungs 11 and 12 at D64 (their consumer warpgroups as launched there: 64 queries each), each warpgroup
    running rung 10's loop (consumer_programs), played by play_consumers over `tiles` key tiles: a product 1 unit,
    a softmax `softmax` units (longer than the other warpgroup's two products, as when fixed-latency waits
    stall it), rung 10's rescale `rescale`. Units, not measured times."""
    counts = [cuda_attention.hopper_launch(name, 64)[1] // 64 for name in ("11_fast_exp2", "12_three_consumers")]
    played = [play_consumers([consumer_programs(tiles, True, softmax, rescale)] * n, softmax, rescale) for n in counts]
    end = max(stop for boxes in played for _, _, stop, _, _ in boxes)
    fig = _figure(12, 1.4 + 0.5 * (sum(counts) + 2 + 3))
    axes = fig.subplots(2, 1, gridspec_kw=dict(height_ratios=[n + 1 for n in counts]))
    for ax, n, boxes, rung in zip(axes, counts, played, (11, 12)):
        period = tile_period(boxes)
        busy = 2 * n / period
        _timeline(ax, boxes, ["tensor cores"] + [f"warpgroup {g}" for g in range(n)], end,
                  f"rung {rung}: {n} consumer warpgroups take turns: {n} tiles of 64 queries every {period:g} units, "
                  f"the tensor cores busy {busy:.0%} of the steady state (not the fill and drain at the ends)")
    fig.suptitle(f"One SM at D64, rung 10's loop in each warpgroup: a product 1 unit, a softmax {softmax:g}, "
                 f"O's rescale {rescale:g} (units, not measured times)", fontsize=12)
    _consumers_key(fig, "O rescaled once its P·V is done")
    return fig


def attention_persistent(items: int = 3, tiles: int = 5, copy_in: float = 1.5, tail: float = 1.0,
                         shape: tuple = (4, 32, 4096, 128, 0), sm_count: int = 132):
    """One SM's timeline under rungs 12 and 13 over `items` (query block, head) items of `tiles` key tiles each (a
    key tile 1 unit): a block of rung 12 waits `copy_in` units for its Q and first K/V tiles, then ends with its
    last P·V and the store of O (`tail` units); rung 13's one block an SM waits once, its next item's copies running
    under each item's tail. Units, not measured times; the block counts are the launchers' at `shape` on
    `sm_count` SMs (an H100's 132)."""
    B, H, S, D, causal = shape
    defines, rows, _ = cuda_attention.hopper_launch("13_persistent", D)
    blocks = -(-S // rows) * B * H
    walkers = cuda_attention.persistent_grid(blocks, bool(causal), sm_count)
    twelve, thirteen, copies = "SM, rung 12", "SM, rung 13", "rung 13's copies"
    boxes, t = [], 0.0
    for i in range(items):   # rung 12: a block an item, each starting cold
        boxes += [(twelve, t, t + copy_in, "Q, K/V in", "idle"), (twelve, t + copy_in, t + copy_in + tiles,
                                                                  f"item {i}: {tiles} key tiles", "product"),
                  (twelve, t + copy_in + tiles, t + copy_in + tiles + tail, "store O", "rescale")]
        t += copy_in + tiles + tail
    end12, t = t, copy_in
    boxes.append((thirteen, 0.0, copy_in, "Q, K/V in", "idle"))
    for i in range(items):   # rung 13: the next item's copies under this one's tail, waited for where they outlast it
        boxes += [(thirteen, t, t + tiles, f"item {i}: {tiles} key tiles", "product"),
                  (thirteen, t + tiles, t + tiles + tail, "store O", "rescale")]
        if i < items - 1:
            boxes.append((copies, t + tiles, t + tiles + copy_in, f"item {i + 1}'s Q, K/V", "copy"))
            if copy_in > tail:
                boxes.append((thirteen, t + tiles + tail, t + tiles + copy_in, "", "idle"))
        t += tiles + (max(tail, copy_in) if i < items - 1 else tail)
    end13 = t
    fig = _figure(12, 3.3)
    ax = fig.subplots()
    _timeline(ax, boxes, [twelve, thirteen, copies], end12,
              f"{items} items: rung 12 {end12:g} units, rung 13 {end13:g}, its next item's copies under each store "
              f"(key tiles {items * tiles / end12:.0%} and {items * tiles / end13:.0%} of the modelled time)")
    fig.suptitle(f"B{B} H{H} S{S} D{D}: rung 12 launches {blocks:,} blocks of one item, rung 13 {walkers} (one an SM), "
                 f"each walking about {blocks / walkers:.0f}\nItems drawn {tiles} key tiles long, not this shape's "
                 f"{-(-S // defines['BLOCK_N'])}, so the drawn saving is larger (units, not measured times)", fontsize=11)
    _key(fig, [("key tiles (their scores and P·V)", TENSOR_CORES), ("the last P·V and the store of O", _shade(CUDA, 0.45)),
               ("waiting for copies", "0.92"), ("copies in flight (TMA)", IN_FLIGHT)], y=0.0)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    return fig


def attention_critical_path(head_dim: int = 128, names=("13_persistent", "14_critical_path")):
    """Rungs 13 and 14's path from a tile's S landing to the warpgroup's next S (l04f.next_issue_paths: their
    SASS for sm_90a, an unmasked tile), its instructions by opcode family (softmax_instruction_mix's colors and
    "other": barriers, addresses, the wait for the turn): rung 14 takes most of O's rescale (FMUL) off it."""
    families = l04f.SOFTMAX_OPCODES + ("other",)
    family_of = lambda op: next((f for f in l04f.SOFTMAX_OPCODES  # noqa: E731
                                 if op == f or op.startswith(f + ".")), "other")
    paths = l04f.next_issue_paths(tuple(names), head_dim)
    rows = {name: {f: sum(family_of(op) == f for op in path) for f in families} for name, path in paths.items()}
    return _opcode_bars(rows, families, {n: f"{len(p)} instructions, {p.count('FMUL')} FMUL" for n, p in paths.items()},
                        f"a consumer thread's SASS instructions from S landing to the next S's first HGMMA "
                        f"(sm_90a, D = {head_dim}, an unmasked tile)",
                        "rung 14 moves O's rescale (FMUL) under the next S's wgmma: fewer instructions between one "
                        "tile's S and the next", 2.8, 1.4 * max(len(p) for p in paths.values()))


def attention_query_blocks(shape: tuple = (8, 12, 1024, 64, 1), rows=(192, 128), block_n: int = 128):
    """A head's score matrix at `shape` (B, H, S, D, causal) as the Hopper rungs compute it in blocks of each of
    `rows` queries (three or two consumer warpgroups) and `block_n`-key tiles: each block's rows (those past S too)
    over its keys (kernels/attention.py, block_keys and scores_computed), over the scores attention needs."""
    B, H, S, D, causal = shape
    head = (1, 1, S, D, causal)
    fig = _figure(11, 6.2)
    axes = fig.subplots(1, len(rows))
    tall = max(_cdiv(S, r) * r for r in rows)
    for ax, r in zip(axes, rows):
        for m0 in range(0, S, r):
            keys = at.block_keys(m0, r, S, bool(causal), block_n)
            _box(ax, 0, m0, keys, r, _shade(CUDA, 0.35), fill=True, lw=0, z=1)
            _box(ax, 0, m0, keys, r, "white", lw=1.5, z=4)
        needed = [(0, 0), (S, S), (0, S)] if causal else [(0, 0), (S, 0), (S, S), (0, S)]
        ax.add_patch(Polygon(needed, closed=True, facecolor=CUDA, edgecolor="none", zorder=2))
        ax.axhline(S, color="k", lw=1, ls="--", zorder=5)
        ax.text(S * 1.02, S, "S", va="center", fontsize=9)
        _bare(ax, -0.04 * S, 1.1 * S, -0.04 * S, tall + 0.02 * S)
        ax.set_title(f"{r} queries a block ({r // 64} consumer warpgroups): {_cdiv(S, r)} blocks,\n"
                     f"{at.scores_computed(head, r, block_n) / at.scores_needed(head):.2f}x the scores needed",
                     fontsize=10)
    fig.suptitle(f"One head at S = {S}{', causal' if causal else ''} (B{B} H{H} D{D}): keys across in tiles of "
                 f"{block_n}, queries down", fontsize=11)
    _key(fig, [("needed", CUDA), ("computed, not needed (masked, or rows past S)", _shade(CUDA, 0.35))], y=0.0)
    fig.tight_layout(rect=(0, 0.06, 1, 0.93))
    return fig
