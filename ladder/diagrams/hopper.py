"""Lesson 02b's Hopper primer, one picture per tool the Hopper rungs use: an mbarrier's phases around a ring of
stages, a TMA tensor map and the 128-byte swizzle, wgmma's operands (shared-memory descriptors, accumulators in a
warpgroup's registers), the producer and consumer warpgroups and the registers setmaxnreg moves, and a cluster's
multicast. Each function takes the constants it draws as arguments; lesson 02b passes them from the kernels
(ladder.lessons.l02_matmul_cuda.hopper_primer_constants reads them from rungs 7-10's .cu files and launchers).
"""
from __future__ import annotations

from ladder.diagrams.matmul_hopper import swizzled_chunk
from ladder.diagrams.style import (CUDA, CUDA_CORES, IN_FLIGHT, MEMORY, TENSOR_CORES, _arrow, _bare, _box, _cells,
                                   _figure, _fill, _key, _shade)


# ------------------------------------------------------------- (1) mbarrier: phases and the parity a waiter passes

def mbarrier_ring(stages: int, stage_bytes: int, laps: int = 3):
    """A ring of `stages` buffers, each with a `full` and an `empty` mbarrier, over `laps` rounds: k-tile kt uses
    stage kt % stages in round kt // stages. Each round completes one phase of the stage's barriers, so the
    phase parity flips every round: the consumers wait on full[s] with parity round & 1, the producer on empty[s]
    with (round + 1) & 1 (a fresh barrier's "previous" phase, parity 1, counts as complete: round 0 does not
    wait). Above: full[0]'s phases, each completed by one arrive.expect_tx and `stage_bytes` bytes."""
    fig = _figure(11, 6.6)
    ax = fig.add_axes((0.03, 0.1, 0.94, 0.74))
    w, h, top = 3.0, 1.0, 2.6
    # full[0]'s phases along a line
    for r in range(laps + 1):
        x = r * w
        _box(ax, x + 0.25, 0.3, w - 0.5, 0.9, "0.3", fill=False, lw=1.2)
        ax.text(x + w / 2, 0.75, f"phase {r}: parity {r & 1}", ha="center", va="center", fontsize=9)
        if r < laps:
            _arrow(ax, (x + w - 0.25, 0.75), (x + w + 0.25, 0.75))
            ax.text(x + w, 1.45, f"round {r}'s bytes\nhave landed", ha="center", va="top", fontsize=8)
    ax.text(-0.2, 0.75, "full[0]", ha="right", va="center", fontsize=9)
    # the ring: a row per stage, a column per round
    cells = _fill((stages, laps), "white")
    for r in range(laps):
        cells[:, r] = _shade(TENSOR_CORES, 0.15 if r % 2 == 0 else 0.4)
    _cells(ax, cells, 0, top, w, h, grid="0.5", lw=1)
    for s in range(stages):
        ax.text(-0.2, top + (s + 0.5) * h, f"stage {s}", ha="right", va="center", fontsize=9)
        for r in range(laps):
            ax.text(r * w + w / 2, top + (s + 0.5) * h,
                    f"k-tile {r * stages + s}: consumers wait full[{s}] ∥{r & 1},\nproducer waits empty[{s}] ∥{(r + 1) & 1}",
                    ha="center", va="center", fontsize=7.5)
    for r in range(laps):
        ax.text(r * w + w / 2, top + stages * h + 0.15, f"round {r}", ha="center", va="top", fontsize=9)
    _bare(ax, -1.4, (laps + 1) * w + 0.1, 0.0, top + stages * h + 0.7)
    fig.suptitle(f"A ring of {stages} stages: each round completes one phase of every stage's barriers, so the parity "
                 f"a waiter passes (∥) flips each round", fontsize=11)
    fig.text(0.5, 0.02, f"full[s] completes a phase when the producer's arrive.expect_tx({stage_bytes}) and the "
             f"{stage_bytes} bytes of the TMA have arrived; empty[s] when every consumer warpgroup has arrived.\n"
             "try_wait.parity p returns once the phase of parity p is complete. A fresh barrier is in phase 0, "
             "so parity 1 counts as complete: round 0's producer passes at once.", ha="center", fontsize=8.5)
    return fig


# ------------------------------------------------------------- (2) the TMA: a tensor map and the 128-byte swizzle

def tensor_map_box(rows: int, cols: int, box: tuple[int, int], element_bytes: int = 2, swizzle: int = 128):
    """Left: what a tensor map holds for a row-major `rows` x `cols` matrix (sizes innermost first, the row stride
    in bytes, the box of `box` = (rows, columns) one copy moves, the swizzle) and the box a copy at (x, y) takes.
    Right: one 8-row atom of the box in shared memory under the `swizzle`-byte swizzle: the 16-byte chunk c of row
    r lands at chunk position c XOR (r mod 8), so chunk 0 of the 8 rows (what one k-slice reads) spreads over all
    32 banks (4 banks a chunk)."""
    box_rows, box_cols = box
    row_bytes = box_cols * element_bytes
    chunks = row_bytes // 16
    fig = _figure(12.5, 5.8)
    left, right = fig.add_axes((0.01, 0.08, 0.4, 0.74)), fig.add_axes((0.47, 0.08, 0.52, 0.74))
    # global memory: the matrix's top-left corner, boxes to scale (a box is box_cols wide, box_rows tall)
    bh = box_rows / box_cols                              # a box's height in box widths
    gx = 4
    gy = min(4, max(2, round(gx * rows / cols / bh)))       # a square matrix: a square corner
    cells = _fill((gy, gx))
    cells[1, 2] = _shade(TENSOR_CORES, 0.7)
    _cells(left, cells, 0, 0, 1, bh, grid="white", lw=1.5)
    _box(left, 0, 0, gx, gy * bh, MEMORY, lw=1)
    left.text(2.5, 1.5 * bh, f"box at\nx = {2 * box_cols},\ny = {box_rows}",
              ha="center", va="center", fontsize=8)
    left.text(gx / 2, -0.15, f"{cols} columns ({cols * element_bytes} B a row) …", ha="center", va="bottom",
              fontsize=9)
    left.text(-0.15, gy * bh / 2, f"{rows} rows …", ha="right", va="center", fontsize=9, rotation=90)
    gy = gy * bh                                          # the drawn corner's height, in the same units
    fields = (f"tensor map (encoded by the host, 128 bytes):\n"
              f"  sizes, innermost first: {cols}, {rows}\n"
              f"  row stride: {cols * element_bytes} bytes\n"
              f"  box: {box_cols} columns × {box_rows} rows, {box_rows * row_bytes // 1024} KiB\n"
              f"  swizzle: {swizzle} bytes; outside the matrix: zeros")
    left.text(0, gy + 0.3, fields, ha="left", va="top", fontsize=9, family="monospace")
    _bare(left, -0.8, gx + 0.2, -0.9, gy + 2.4)
    left.set_title("global memory, the matrix's top-left corner, boxes to scale:\none thread issues "
                   "tma_load(map, x, y),\nthe copy engine moves the whole box", fontsize=10)
    # shared memory: rows 0-7 of the box, 16-byte chunks after the swizzle
    show = 8
    grid = _fill((show, chunks), _shade(TENSOR_CORES, 0.12))
    for r in range(show):
        grid[r, swizzled_chunk(r, 0, row_bytes, swizzle)] = _shade(TENSOR_CORES, 0.75)
    _cells(right, grid, 0, 0, 1, 1, grid="white", lw=1.5)
    for r in range(show):
        right.text(-0.1, r + 0.5, f"row {r} ({r * row_bytes} B)", ha="right", va="center", fontsize=8)
        for c in range(chunks):
            right.text(swizzled_chunk(r, c, row_bytes, swizzle) + 0.5, r + 0.5, f"c{c}", ha="center", va="center",
                       fontsize=8.5)
    for p in range(chunks):
        right.text(p + 0.5, show + 0.15, f"{16 * p}–{16 * p + 15}\nbanks\n{4 * p}–{4 * p + 3}", ha="center",
                   va="top", fontsize=7.5)
    right.text(chunks / 2, show + 1.55, "byte offset within the row, and its banks", ha="center", va="top", fontsize=8)
    _bare(right, -3.0, chunks + 0.1, -0.2, show + 1.9)
    right.set_title(f"shared memory, the box's rows 0–{show - 1}: chunk c (bytes 16c…16c+15) of row r sits at\n"
                    f"position c XOR (r mod 8); dark: chunk 0 of every row, on {show} different bank groups",
                    fontsize=10)
    fig.suptitle(f"A TMA copy: a {box_rows}×{box_cols} box of a {rows}×{cols} fp16 matrix, written in the "
                 f"{swizzle}-byte swizzle", fontsize=12)
    return fig


# ------------------------------------------------------------- (3) wgmma: descriptors and accumulators

def _descriptor_fields(offset: int, leading: int, stride: int, mode: int) -> list[tuple[int, int, str, int | str]]:
    """(first bit, bits, name, value) of a shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format") for
    a slice `offset` bytes into A's tile, whose address is the kernel's: the start is drawn as a sum."""
    return [(0, 14, "start address >> 4", f"(A's tile + {offset} B) >> 4"),
            (16, 14, "leading byte offset >> 4", leading >> 4),
            (32, 14, "stride byte offset >> 4", stride >> 4), (62, 2, "swizzle mode", mode)]


def wgmma_operands(wgmma: tuple[int, int, int], bk: int, a_leading: int, b_leading: int, stride: int,
                   swizzle_mode: int, element_bytes: int = 2, k_step: int = 1):
    """One wgmma m{m}n{n}k{k} (`wgmma`): A's m x k slice (K-major: a row's k values adjacent) and B's k x n slice
    (N-major here: a row of B's n values adjacent, in column blocks of 64) read from shared memory through two 64-bit
    descriptors (their fields drawn with the kernel's offsets: `a_leading`, `b_leading`, `stride`, the swizzle
    mode), the m x n fp32 accumulator spread over the 128 threads of a warpgroup, 16 rows per warp."""
    m, n, k = wgmma
    row_b = 64 * element_bytes                            # a swizzled row: 64 halves, 128 bytes
    fig = _figure(13, 6.6)
    ax = fig.add_axes((0.02, 0.25, 0.96, 0.63))
    # A: m rows x bk columns, 8-row atoms; the k16 slice at k_step
    sa = 0.1                                              # drawing units per element
    aw, ah = bk * sa, m * sa
    _cells(ax, _fill((m // 8, 1), _shade(TENSOR_CORES, 0.15)), 0, 0, aw, 8 * sa, grid="0.6", lw=0.8)
    _box(ax, k_step * k * sa, 0, k * sa, ah, TENSOR_CORES, fill=True, alpha=0.75)
    ax.text(aw / 2, -0.2, f"A: the warpgroup's {m}×{bk}, K-major\n(a row's {bk} k values: {row_b} B in a row)",
            ha="center", va="bottom", fontsize=9)
    ax.text(0, ah + 0.25, f"start: the slice, + {k_step * k * element_bytes} B a k16 step\n"
            f"stride byte offset {stride} B: the next 8 rows\n"
            f"leading byte offset {a_leading} B: not used here\n(one {row_b}-B row holds the whole k-tile)",
            ha="left", va="top", fontsize=8)
    # B: bk rows x n columns, in n / 64 column blocks of 64 (each bk x 128 B)
    bx0 = aw + 1.6
    sb = 0.045
    bw, bh, blocks = n * sb, bk * sb * 2, n // 64
    for j in range(blocks):
        _cells(ax, _fill((bk // 8, 1), _shade(TENSOR_CORES, 0.15)), bx0 + j * 64 * sb, 0, 64 * sb, 16 * sb,
               grid="0.6", lw=0.8)
        _box(ax, bx0 + j * 64 * sb, k_step * k * 2 * sb, 64 * sb, k * 2 * sb, TENSOR_CORES, fill=True, alpha=0.75)
        _box(ax, bx0 + j * 64 * sb, 0, 64 * sb, bh, "k", lw=1.2)
    ax.text(bx0 + bw / 2, -0.2, f"B: the k-tile's {bk}×{n}, N-major, {blocks} blocks of 64 columns "
            f"({bk} rows × {row_b} B each)", ha="center", va="bottom", fontsize=9)
    ax.text(bx0, bh + 0.25, f"start: the slice, + {k * row_b} B a k16 step ({k} rows down)\n"
            f"stride byte offset {stride} B: the next 8 rows\n"
            f"leading byte offset {b_leading} B: the next block of 64 columns", ha="left", va="top", fontsize=8)
    # the accumulator: m x n fp32 across the warpgroup, 16 rows per warp
    cx, cw, ch = bx0 + bw + 0.8, 5.2, bh / 4
    warps = _fill((4, 1))
    for w in range(4):
        warps[w, 0] = _shade(CUDA_CORES, 0.35 + 0.12 * w)
    _cells(ax, warps, cx, 0, cw, ch, grid="white", lw=1.5)
    for w in range(4):
        ax.text(cx + cw / 2, (w + 0.5) * ch, f"warp {w} (threads {32 * w}–{32 * w + 31}):\nrows {16 * w}–{16 * w + 15}",
                ha="center", va="center", fontsize=8)
    ax.text(cx + cw / 2, -0.2, f"the {m}×{n} fp32 accumulator,\nin registers: {m * n // 128} a thread",
            ha="center", va="bottom", fontsize=9)
    _bare(ax, -0.2, cx + cw + 0.2, -0.9, max(ah, bh) + 1.6)
    # the descriptor's bits
    bits = fig.add_axes((0.06, 0.03, 0.88, 0.14))
    for first, count, name, value in _descriptor_fields(k_step * k * element_bytes, a_leading, stride, swizzle_mode):
        _box(bits, first, 0, count, 1, _shade(TENSOR_CORES, 0.3), fill=True, lw=1)
        _box(bits, first, 0, count, 1, "k", lw=1)
        bits.text(first + count / 2, 0.5, f"{name}\n= {value}" if count > 2 else f"{value}", ha="center",
                  va="center", fontsize=8)
        bits.text(first, 1.1, f"bit {first}", ha="left", va="top", fontsize=7)
    bits.text(32, -0.15, f"A's descriptor for the red k16 step, 64 bits (bits 62–63: swizzle mode "
              f"{swizzle_mode} = 128 bytes)", ha="center", va="bottom", fontsize=8.5)
    bits.set_xlim(-0.5, 64.5)
    bits.set_ylim(1.6, -0.8)
    bits.set_xticks([])
    bits.set_yticks([])
    bits.set_axis_off()
    fig.suptitle(f"One wgmma.m{m}n{n}k{k}: A and B read from shared memory through descriptors, "
                 f"the sums in the registers of a warpgroup (128 threads)", fontsize=12)
    return fig


# ------------------------------------------------------------- (4) warp specialization: roles and registers

def warp_specialized_registers(threads: int, consumers: int, launch_regs: int, producer_regs: int,
                               consumer_regs: int, regs_per_sm: int, copies_per_k_tile: int, wgmmas_per_k_tile: int,
                               accumulator_regs: int):
    """The block's warpgroups (128 threads each): a producer whose one thread issues `copies_per_k_tile` TMA copies
    per k-tile, and `consumers` warpgroups issuing `wgmmas_per_k_tile` wgmmas on it; the SM's `regs_per_sm`
    registers as the launch deals them (`launch_regs` a thread) and after setmaxnreg (`producer_regs`,
    `consumer_regs`)."""
    groups = threads // 128
    producers = groups - consumers
    fig = _figure(12, 4.6)
    ax = fig.add_axes((0.02, 0.12, 0.96, 0.7))
    scale = 12.0 / regs_per_sm                             # drawing units per register
    rows = [("at launch", [launch_regs] * groups), ("after setmaxnreg",
                                                   [producer_regs] * producers + [consumer_regs] * consumers)]
    for i, (name, per_thread) in enumerate(rows):
        y, x = i * 2.1, 0.0
        for g, regs in enumerate(per_thread):
            width = 128 * regs * scale
            color = IN_FLIGHT if g < producers else _shade(TENSOR_CORES, 0.55)
            _box(ax, x, y, width, 1, color, fill=True, lw=1)
            _box(ax, x, y, width, 1, "k", lw=1)
            role = "producer" if g < producers else "consumer"
            label = f"WG{g} {role}\n{regs} registers × 128 threads" if width > 2.5 else f"WG{g}\n{regs}"
            ax.text(x + width / 2, y + 0.5, label, ha="center", va="center", fontsize=8)
            x += width
        _box(ax, 0, y, 12, 1, "0.3", lw=1.2, ls="--")
        ax.text(-0.15, y + 0.5, name, ha="right", va="center", fontsize=9)
        ax.text(12.15, y + 0.5, f"{128 * sum(per_thread)} of {regs_per_sm}\nregisters", ha="left", va="center",
                fontsize=8)
    ax.text(0, 3.45, f"producer (WG0): one thread issues {copies_per_k_tile} TMA copies a k-tile, then waits; "
            f"{producer_regs} registers a thread.\n"
            f"consumers (WG1–WG{groups - 1}): {wgmmas_per_k_tile} wgmma a k-tile each, into "
            f"{accumulator_regs} accumulator registers a thread, of its {consumer_regs}.", ha="left", va="top",
            fontsize=9)
    _bare(ax, -2.2, 14.0, -0.2, 4.4)
    ax.set_aspect("auto")
    fig.suptitle(f"Warp specialization: {threads} threads = {producers} producer and {consumers} consumer "
                 f"warpgroups; setmaxnreg moves registers from the producer to the consumers", fontsize=11)
    _key(fig, [("producer warpgroup", IN_FLIGHT), ("consumer warpgroup", _shade(TENSOR_CORES, 0.55))], y=0.0)
    return fig


# ------------------------------------------------------------- (5) a cluster's multicast

def cluster_multicast(cluster: int, bk: int, bn: int, element_bytes: int = 2):
    """A cluster of `cluster` CTAs on as many SMs that need the same bk x bn k-tile of B: each CTA's producer copies
    1/cluster of it with one multicast TMA load, which lands at the same offset in every CTA's shared memory (and
    counts its bytes on every CTA's full[s]): B leaves L2 once per cluster instead of once per CTA."""
    part = bn // cluster
    shades = [_shade(CUDA, a) for a in (0.85, 0.5, 0.7, 0.35)[:cluster]] if cluster <= 4 else \
        [_shade(CUDA, 0.3 + 0.6 * i / cluster) for i in range(cluster)]
    fig = _figure(10, 4.8)
    ax = fig.add_axes((0.02, 0.1, 0.96, 0.76))
    u = bn / 8.0                                           # elements per drawing unit
    l2x = 1.0
    for r in range(cluster):
        _box(ax, l2x + r * part / u, 0, part / u, 1, shades[r], fill=True, lw=1)
        ax.text(l2x + (r + 0.5) * part / u, 0.5, f"part {r}: {bk}×{part}", ha="center", va="center", fontsize=8)
    ax.text(l2x - 0.15, 0.5, "L2", ha="right", va="center", fontsize=10)
    box_w, gap = bn / u + 0.6, 1.0
    for t in range(cluster):
        x0 = t * (box_w + gap)
        _box(ax, x0, 2.6, box_w, 1.9, "0.3", lw=1.2)
        ax.text(x0 + 0.15, 4.4, f"CTA {t}, its own SM: B's stage s", ha="left", va="bottom", fontsize=9)
        for r in range(cluster):
            _box(ax, x0 + 0.3 + r * part / u, 3.0, part / u, 1, shades[r], fill=True, lw=1)
            ax.text(x0 + 0.3 + (r + 0.5) * part / u, 3.5, f"part {r}", ha="center", va="center", fontsize=8)
        for r in range(cluster):
            _arrow(ax, (l2x + (r + 0.5) * part / u, 1.0), (x0 + 0.3 + (r + 0.5) * part / u, 3.0), shades[r])
    right = cluster * (box_w + gap) - gap
    _bare(ax, -0.6, right + 0.2, -0.4, 4.9)
    fig.suptitle(f"A cluster of {cluster} CTAs: CTA r's producer loads part r of B's {bk}×{bn} k-tile once, "
                 f"multicast into every CTA", fontsize=11)
    fig.text(0.5, 0.02, f"per k-tile each CTA reads {bk * part * element_bytes // 1024} KiB of B from L2 instead of "
             f"{bk * bn * element_bytes // 1024} KiB; each copy counts its bytes on the full[s] of every CTA it "
             f"lands in (lesson 02c)", ha="center", fontsize=9)
    return fig
