"""Lesson 04e, attention on Hopper (CUDA rungs 7-10, Triton's rung 7): the count under the tensor-core and wgmma
ceilings, the blocks an SM holds (lesson 04f's rungs too), each rung's lines of code beside its speed, and Triton
rung 7's barriers as compiled and through ladder/ptx.py.
"""
from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

import torch

import kernels.attention as at
from kernels.cuda import attention as cuda_attention
from kernels.triton import attention as ta
from ladder import autotune, profile, ptx, results, sass
from ladder.runtime import cuda, hardware
from ladder.runtime.hardware import detect
from ladder.runtime.errors import NotAvailable
from ladder.runtime.world import require_gpu
from ladder.lessons.l04_attention import recorded_winner
from ladder.lessons.source import (compiled_lines, lines_of_code, python_code_lines, python_file_code_lines,
                                   switched_off)
from ladder.verdicts import shape_label


def hopper_attention_count(problem, shapes: list[tuple], roofs: dict, label: str) -> str:
    """Count first for the Hopper rungs: per shape the work, the fewest bytes, the intensity and the least time
    under the tensor-core roof the measure lines use (the highest instruction ceiling: wgmma's on Hopper, lesson
    00's microbenchmark)."""
    tc, wgmma, mma = roofs.get("fp16_tc_TFLOPs"), roofs.get("wgmma_TFLOPs"), roofs.get("mma_sync_TFLOPs")
    lines = [f"roofs ({label}): copy {roofs['copy_TBps']:.2f} TB/s; instruction ceilings: "
             + ", ".join(f"{name} {v:.0f} TFLOP/s" if v else f"{name} not measured"
                         for name, v in (("mma.sync", mma), ("wgmma", wgmma)))
             + (f"; the tensor-core roof: {tc:.0f}" if tc else "; no tensor-core roof measured")]
    if not tc:
        return lines[0]
    lines.append(f"{'shape':>11s} {'GFLOP':>7s} {'Q,K,V,O MB':>11s} {'FLOP/B':>7s} {'least ms at ' + f'{tc:.0f}':>16s}")
    for s in shapes:
        f = problem.flops(s)
        lines.append(f"{shape_label(problem, s):>11s} {f / 1e9:7.1f} {problem.min_bytes(s) / 1e6:11.0f} "
                     f"{problem.intensity(s):7.0f} {f / tc / 1e9:16.3f}")
    return "\n".join(lines)


# An sm_90 SM (H100, H200): what the blocks resident on it share.
SM90 = dict(registers=65536, shared_bytes=228 * 1024, reserved_per_block=cuda_attention.SHARED_KEPT_PER_BLOCK,
            warps=64, blocks=32)


def setmaxnreg_split(text: str) -> tuple[int, int] | None:
    """(producer, consumer) registers a thread after setmaxnreg, read from a kernel's SASS (USETMAXREG's DEALLOC
    and TRY_ALLOC operands); None where the kernel moves none."""
    down = re.search(r"USETMAXREG\.DEALLOC\S*\s+(0x[0-9a-f]+)", text)
    up = re.search(r"USETMAXREG\.TRY_ALLOC\S*\s+\w+,\s*(0x[0-9a-f]+)", text)
    return (int(down.group(1), 16), int(up.group(1), 16)) if down and up else None


def hopper_attention_blocks(head_dims=(64, 128), sm: dict | None = None, names=None) -> str:
    """The Hopper rungs compiled here for sm_90a with the launcher's tiles (no GPU needed): per head dimension the
    key tile and stages, threads, registers a thread (the compiler's; setmaxnreg's split after it), shared memory a
    block, and so how many blocks an SM holds and what limits it, the consumer warps an SM runs and the queries each
    K/V tile the TMA brings serves (a block's). names: only these rungs (default: every Hopper rung)."""
    sm = sm or SM90
    lines = [f"{'rung':24s} {'D':>4s} {'keys':>5s} {'stages':>6s} {'threads':>7s} {'registers':>12s} {'KiB':>5s} "
             f"{'blocks/SM':>9s}  {'limited by':26s} {'consumer warps/SM':>17s} {'queries/tile':>12s}"]
    for name in names or cuda_attention.HOPPER:
        path = f"attention/{name}.cu"
        for d in head_dims:
            tiles, rows, threads = cuda_attention.hopper_launch(name, d)
            consumers = rows // 64   # a consumer warpgroup's 64 queries
            cubin = cuda.compile_cubin(path, "sm_90a", tuple(sorted(dict(HEAD_DIM=d, **tiles).items())))
            use, split = sass.resource_usage(cubin), setmaxnreg_split(sass.disassemble(cubin, "sm_90a").text)
            smem = cuda_attention.wgmma_tma_shared_bytes(d, tiles, rows) + use["shared_bytes"]
            per_warp = -(-use["registers"] * 32 // 256) * 256   # registers go to a warp in units of 256,
            warps_by_registers = 4 * (sm["registers"] // 4 // per_warp)   # whole warps in each quarter's file
            limits = {"registers": warps_by_registers // (threads // 32),
                      "shared memory": sm["shared_bytes"] // (smem + sm["reserved_per_block"]),
                      "warps": sm["warps"] // (threads // 32), "blocks": sm["blocks"]}
            blocks = min(limits.values())
            limiting = " = ".join(k for k, v in limits.items() if v == blocks)
            regs = f"{use['registers']}" + (f" ({split[0]}/{split[1]})" if split else "")
            lines.append(f"cuda:{name:19s} {d:4d} {tiles['BLOCK_N']:5d} {tiles['STAGES']:6d} {threads:7d} {regs:>12s} "
                         f"{smem / 1024:5.0f} {blocks:9d}  {limiting:26s} {blocks * 4 * consumers:17d} {rows:12d}")
    lines.append(f"(an sm_90 SM: {sm['registers']:,} registers, {sm['shared_bytes'] // 1024} KiB of shared memory, "
                 f"{sm['reserved_per_block']} B of it kept per block; registers: the compiler's, "
                 "(producer/consumer) after setmaxnreg)")
    return "\n".join(lines)


def attention_kernel_lines(label: str) -> tuple[int, int, str]:
    """(lines of the rung's own code, lines of the shared code it also runs, what was counted) for an attention
    rung: CUDA, its .cu file and the earlier rungs' files it includes, then the headers (.cuh) they include, each
    once, the versions of code a later rung switches on left out (compiled_lines); Triton, its @triton.jit kernel,
    then `attend` and `key_passes` (the loop and its split, which rungs 3-8 share), and for rung 8 the PTX pass it is
    compiled through (ladder/ptx.py); docstrings, comments, blank lines and launchers not counted."""
    backend, name = label.split(":", 1)
    if backend == "cuda":
        files = cuda._expand(f"attention/{name}.cu")[1]
        own = [f for f in files if f.suffix == ".cu"]
        shared = [f for f in files if f.suffix != ".cu"]
        off = switched_off(f"kernels/cuda/attention/{name}.cu")
        count = lambda fs: sum(lines_of_code("\n".join(compiled_lines(f.read_text().splitlines(), off)), "//")  # noqa: E731
                               for f in fs)
        return count(own), count(shared), " + ".join(f.name for f in own) + "; " + " + ".join(f.name for f in shared)
    kernel = ta.flash_tma_kernel if name in ("7_tma", "8_barrier_pass") else ta.flash_kernel
    own, what = python_code_lines(kernel), kernel.__name__
    if name == "8_barrier_pass":   # rung 7's kernel and the PTX pass it is compiled through
        own, what = own + python_file_code_lines(ptx.__file__), f"{what} + ladder/ptx.py"
    return own, python_code_lines(ta.attend) + python_code_lines(ta.key_passes), f"{what}; attend + key_passes"


def attention_lines_vs_speed(rows: list[dict], shapes: list[tuple], labels: list[str],
                             anchor: str = "torch:sdpa") -> str:
    """Each rung's lines of kernel code (attention_kernel_lines) beside its TFLOP/s at each shape in `rows` (a
    lesson's measured rows, or the recording's) and its speed as a fraction of `anchor`'s in the same rows."""
    by = {(f"{r['backend']}:{r['rung']}", tuple(r["shape"])): r for r in rows}
    lines = [f"{'rung':24s} {'lines':>5s} {'+ shared':>8s}  "
             + "".join(f"{shape_label('attention', s):>16s}" for s in shapes)
             + "   (TFLOP/s, x " + anchor.split(":", 1)[1] + ")"]
    counted = []
    for label in labels + [anchor]:
        own, shared, what = attention_kernel_lines(label) if label != anchor else (None, None, "")
        cells = []
        for s in shapes:
            row, ref = by.get((label, tuple(s))), by.get((anchor, tuple(s)))
            cells.append(f"{'-':>16s}" if row is None else
                         f"{row['tflops']:7.1f} ({ref['ms'] / row['ms']:.2f}x)" if ref and label != anchor else
                         f"{row['tflops']:16.1f}")
        lines.append(f"{label:24s} {own if own is not None else '':>5} {shared if shared is not None else '':>8}  "
                     + "".join(f"{c:>16s}" for c in cells))
        if what:
            counted.append(f"  {label}: {what}")
    return "\n".join(lines + ["lines: neither blank nor comment (docstrings left out); + shared: headers or helpers "
                               "other rungs run too; launchers not counted"] + counted)


def refill_barriers(head_dim: int = 128, families=("BAR.SYNC", "BAR.ARV", "HGMMA", "UTMALDG")) -> str:
    """Triton's rungs 7 and 8 at `head_dim` on one tile of two warpgroups (rung 8's recorded winner, else rung 7's: 8
    warps at D128), compiled here for sm_90a as Triton compiles it (rung 7) and through ladder/ptx.py's pass (rung
    8): each family's count in the SASS, and what the pass says it changed in the PTX. The counts move with the
    Triton version compiling it, so the lesson's cell prints them unchecked."""
    config = recorded_winner("triton:8_barrier_pass", head_dim) or recorded_winner("triton:7_tma", head_dim)
    rung7, rung8 = (at.tma_compile(config, "sm_90a", head_dim, ptx_pass=through) for through in (False, True))
    tile = f"{config['BLOCK_M']}x{config['BLOCK_N']}, {config['num_warps']} warps"
    rows = [(f"D{head_dim}, {tile}", families),
            ("rung 7 (as Triton compiles it)", [sass.compiled_sass(rung7, "sm_90a").count(f) for f in families]),
            ("rung 8 (through ladder/ptx.py)", [sass.compiled_sass(rung8, "sm_90a").count(f) for f in families])]
    applied = ptx.applied(rung8)
    return "\n".join([f"{name:38s}" + "".join(f"{c:>9}" for c in cells) for name, cells in rows]
                     + [f"ladder/ptx.py: {applied['dropped']} CTA barriers dropped from the PTX, {applied['split']} "
                        "split into sync and arrive"])


# ------------------------------------------------------------- rungs 6-10: instructions and issue rate

# Each of CUDA rungs 6-10 and Triton's rung 7 timed and counted by ncu (occupancy, issue rate, instructions), CUDA
# rung 7 also launched asking for more shared memory than it uses, so that at most N blocks fit an SM (its own count
# first), and CUDA rung 8 at D = 128 with rung 7's 64-key tiles:
# python -m ladder.lessons.l04e_attention_hopper --record
OCCUPANCY_SHAPES = ((4, 32, 4096, 64, 0), (4, 32, 4096, 128, 0))
OCCUPANCY_BLOCKS = {64: (3, 2, 1), 128: (2, 1)}
NARROW_KEY_TILE = {128: 64}   # rung 8's keys a tile where rung 7's were fewer
OCCUPANCY_COUNTERS = {**profile.ISSUE, "limit_shared_mem": profile.WARP_STATE["limit_shared_mem"],
                      "limit_registers": profile.WARP_STATE["limit_registers"]}
RUNG6, RUNG7 = "cuda:6_autotuned", "cuda:7_wgmma_tma"
RUNG8 = "cuda:8_warp_specialized"
LATER_RUNGS = (RUNG8, "cuda:9_pingpong", "cuda:10_intra_overlap", "triton:7_tma")
RUNG8_64_KEYS = f"{RUNG8}, 64-key tiles"   # the table's name for rung 8 with rung 7's keys a tile
MODULE = __spec__.name   # this module run as a program (__name__ is "__main__" there)


def occupancy_cases(head_dim: int) -> list[tuple[str, int | None, int | None]]:
    """(backend:rung, blocks an SM asked for, keys a tile asked for: None, as it launches) in the table's order."""
    narrow = [(RUNG8, None, NARROW_KEY_TILE[head_dim])] if head_dim in NARROW_KEY_TILE else []
    return ([(RUNG6, None, None)] + [(RUNG7, b, None) for b in OCCUPANCY_BLOCKS[head_dim]]
            + [(RUNG8, None, None)] + narrow + [(r, None, None) for r in LATER_RUNGS[1:]])


def _occupancy_inputs(shape: tuple, where: str = "cuda") -> tuple[tuple, bool]:
    """((q, k, v), causal) at `shape`, the same data every case and process (seed 0)."""
    *qkv, causal = at.PROBLEM.make_inputs(shape, where, torch.Generator(where).manual_seed(0))
    return tuple(qkv), causal


def _occupancy_call(rung: str, blocks: int | None, key_tile: int | None, inputs: tuple, causal: bool, out):
    """One case's launch on (q, k, v) = inputs into out: rung 6 as searched, CUDA rung 7 at `blocks` an SM, rung 8
    with `key_tile` keys a tile, a later CUDA rung as it launches, or Triton's rung 7 in its recorded configuration."""
    if rung == RUNG6:
        return lambda: at.cuda_autotuned(*inputs, causal, out)
    if rung == RUNG7:
        return lambda: cuda_attention.wgmma_tma(*inputs, causal, out, blocks_per_sm=blocks)
    if key_tile is not None:
        return lambda: cuda_attention.warp_specialized(*inputs, causal, out, key_tile=key_tile)
    if rung == "triton:7_tma":
        return lambda: at.triton_tma(*inputs, causal, out)
    return lambda: cuda_attention.RUNGS[rung.removeprefix("cuda:")](*inputs, causal, out)


def measure_occupancy(rounds: int = 5) -> list[dict]:
    """Each case of each OCCUPANCY_SHAPES checked against the fp32 reference (output poisoned first), timed in
    `rounds` interleaved rounds (event_bench, L2 flushed), then run once under ncu (OCCUPANCY_COUNTERS; None
    each where ncu is not on PATH or fails). A case that fails or is wrong is left out, and said so on stderr."""
    from ladder import check, timing   # GPU only
    rows = []
    for shape in OCCUPANCY_SHAPES:
        inputs, causal = _occupancy_inputs(shape)
        want = at.reference(*inputs, causal)
        calls = {}
        for case in occupancy_cases(shape[3]):
            out = torch.full_like(inputs[0], float("nan"))
            call = _occupancy_call(*case, inputs, causal, out)
            try:
                call()
                failed = None if check.compare(out, want).ok else "wrong against the fp32 reference"
            except (RuntimeError, ValueError) as e:
                failed = f"{type(e).__name__}: {e}"
            if failed:
                print(f"left out: attention {_case_name(*case)} at {shape}: {failed}", file=sys.stderr)
            else:
                calls[case] = call
        times = {case: [] for case in calls}
        for _ in range(rounds):
            for case, call in calls.items():
                times[case].append(timing.event_bench(call, 25, 100, [0.5])[0])
        for (label, blocks, key_tile), ms in times.items():
            counted = {}
            if profile.available():
                try:
                    counted = profile.program_profile([sys.executable, "-m", MODULE, "--once", label, str(blocks or 0),
                                                       str(key_tile or 0), *map(str, shape)], OCCUPANCY_COUNTERS)
                except RuntimeError as e:
                    print(f"no ncu counts for {_case_name(label, blocks, key_tile)} at {shape}: {e}", file=sys.stderr)
            backend, rung = label.split(":")
            rows.append({"problem": "attention", "backend": backend, "rung": rung, "shape": list(shape),
                         "blocks_per_sm": blocks, "key_tile": key_tile, "ms": statistics.median(ms), "ms_min": min(ms),
                         "ms_max": max(ms), "rounds": rounds, **{k: counted.get(k) for k in OCCUPANCY_COUNTERS}})
    return rows


def occupancy_table(recording, rungs: tuple | None = None, fewer_blocks: bool = True) -> str:
    """The recorded experiment: per shape, each case of `rungs` (rows as the table names them: "backend:rung", or
    RUNG8_64_KEYS; all where None) in the order measured, its time, speed over rung 6, and ncu's blocks an SM,
    occupancy, issue rate and instructions; rung 7 held to fewer blocks an SM than it fits only where `fewer_blocks`."""
    rows = recording.data.get("occupancy", [])
    if not rows:
        return f"no occupancy experiment {recording.label} (python -m {MODULE} --record on a Hopper GPU)"
    lines = [f"{'shape':>6s} {'rung':37s} {'blocks/SM':>9s} {'ms':>7s} {'x rung 6':>8s} {'occupancy':>9s} "
             f"{'issued':>7s} {'instr. (G)':>10s}"]
    shown_held = shown_narrow = False   # a footnote for each kind of row, where one is shown
    for shape in OCCUPANCY_SHAPES:
        at_shape = [r for r in rows if tuple(r["shape"]) == shape]
        base = next((r for r in at_shape if results.rung_label(r) == RUNG6), None)
        for r in at_shape:
            name = _case_name(results.rung_label(r), None, r.get("key_tile"))   # as the table names the row
            if rungs is not None and name not in rungs:
                continue
            held = r["blocks_per_sm"] and r["blocks_per_sm"] < OCCUPANCY_BLOCKS[shape[3]][0]
            if held and not fewer_blocks:
                continue
            shown_held, shown_narrow = shown_held or held, shown_narrow or r.get("key_tile")
            limits = [r[k] for k in ("limit_shared_mem", "limit_registers") if r.get(k)]
            blocks = min(limits) if limits else r["blocks_per_sm"]
            counted = [f"{r['occupancy_pct']:8.1f}%", f"{r['issue_active_pct']:6.1f}%",
                       f"{r['instructions'] / 1e9:10.3f}"] if r.get("instructions") else [f"{'-':>9s}", f"{'-':>7s}",
                                                                                         f"{'-':>10s}"]
            lines.append(f"{shape_label('attention', shape):>6s} {name:37s} "
                         f"{'-' if blocks is None else int(blocks):>9} {r['ms']:7.3f} "
                         f"{base['ms'] / r['ms'] if base else float('nan'):7.2f}x " + " ".join(counted))
    return "\n".join(lines + [f"({recording.label}; ms: median of {rows[0]['rounds']} rounds, L2 flushed;",
                              " blocks/SM, occupancy, issued, instructions: this experiment's ncu run, not the "
                              "verdict lines' profiles"
                              + ("; rung 7's fewer blocks/SM: launched asking for more shared memory than it uses"
                                 if shown_held else "")
                              + ("; 64-key tiles: rung 8 with rung 7's keys a tile" if shown_narrow else "") + ")"])


def _case_name(label: str, blocks: int | None, key_tile: int | None) -> str:
    return label + (f" at {blocks} blocks/SM" if blocks else "") + (f", {key_tile}-key tiles" if key_tile else "")


def _run_once(rung: str, blocks: int, key_tile: int, shape: tuple) -> None:
    """One case run once between cudaProfilerStart and Stop (compiled and warmed up before)."""
    inputs, causal = _occupancy_inputs(shape)
    profile.profiled_once(_occupancy_call(rung, blocks or None, key_tile or None, inputs, causal,
                                          torch.empty_like(inputs[0])))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description="rungs 6-10's instructions and issue rate, "
                                     "rung 7 at fewer blocks an SM, rung 8 at narrower key tiles")
    parser.add_argument("--record", action="store_true", help="merge the rows into results/<gpu>.json")
    parser.add_argument("--once", nargs="+", help=argparse.SUPPRESS)   # ncu's child: rung, blocks, key tile, shape
    args = parser.parse_args(argv)
    try:
        require_gpu("the occupancy experiment")
        if args.record:
            hardware.require_real("Recording")
        if not detect().has("wgmma"):
            raise NotAvailable(f"rung 7 needs sm_90a; this GPU is {detect().arch}")
    except NotAvailable as e:
        print(e, file=sys.stderr)
        return 2
    autotune.pin_recorded_winners()   # rung 6 in its recorded configuration: no search, under ncu or not
    if args.once:
        _run_once(args.once[0], int(args.once[1]), int(args.once[2]), tuple(int(x) for x in args.once[3:]))
        return 0
    rows = measure_occupancy()
    if args.record:
        print(results.add_rows(detect(), "occupancy", rows))
    print(occupancy_table(results.Recording(Path("-"), {"provenance": {"gpu": detect().name}, "occupancy": rows})))
    return 0


if __name__ == "__main__":
    sys.exit(main())
