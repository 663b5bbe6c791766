"""Lessons 04a-04c, attention in CUDA C++ (rungs 1-3, then 4-6 on tensor cores) and in Triton: the count of the bytes
each family of rungs moves, the checks, the searches, the live memory check, and the SASS of every rung built as
its launcher builds it, which the later attention lessons (04d-04f) read too.
"""
from __future__ import annotations

import dataclasses
import warnings

import torch

import kernels.attention as at
from kernels.cuda import attention as cuda_attention
from kernels.triton import attention as ta
from ladder import autotune, roofline, runner, sass
from ladder.runtime import world
from ladder.lessons.signatures import signature_table


# Passes over the B·H·S² fp32 score matrix, counted in the kernels (the same in CUDA and Triton).
SCORE_PASSES = {"1_naive": dict(writes=2, reads=4), "2_coalesced": dict(writes=2, reads=3)}
ATTENTION_FAMILIES = {"1_naive": "rung 1 (materialized)", "2_coalesced": "rung 2 (materialized)",
                      "3_fused": "rungs 3-6, SDPA (fused)"}


def attention_traffic_bytes(name: str, shape: tuple) -> float:
    """DRAM bytes an attention rung named `name` moves if every pass streams its operands once: Q, K, V, O,
    plus each pass over the score matrix (rungs 1-2); the fused rungs and SDPA move Q, K, V and O only."""
    B, H, S, D, _ = shape
    p = SCORE_PASSES.get(name)
    return at.min_bytes(shape) + (4 * B * H * S * S * (p["writes"] + p["reads"]) if p else 0)


def _shape_name(shape: tuple) -> str:
    return f"D{shape[3]}" + (" causal" if shape[4] else "")


def attention_fits(gpu, shape: tuple) -> bool:
    """Can `gpu` check a rung at `shape`? The fp32 math reference holds two S×S matrices, rungs 1-2 one."""
    return gpu is None or 3 * at.workspace_bytes("triton:1_naive", shape) < gpu.memory_bytes


def attention_count(shapes: list[tuple], ceil: dict, source: str) -> str:
    """Count first: per family, the bytes it moves, its intensity at each shape and the roof that bounds it on
    the unit it computes with (materialized and rung 3: CUDA cores; rungs 4-6: tensor cores)."""
    bw = ceil["copy_TBps"]
    lines = [f"ceilings, {source}: copy {bw:.2f} TB/s, fp32 {ceil['fp32_TFLOPs']:.0f} TFLOP/s, fp16 tensor cores "
             f"{ceil['fp16_tc_TFLOPs']:.0f} TFLOP/s; ridge points {roofline.ridge(bw, ceil['fp32_TFLOPs']):.0f} "
             f"and {roofline.ridge(bw, ceil['fp16_tc_TFLOPs']):.0f} FLOP/B",
             f"{'':25s} {'GB moved':>9s}  " + "".join(f"{_shape_name(s):>22s}" for s in shapes)]
    for name, family in ATTENTION_FAMILIES.items():
        roofs = ("fp32_TFLOPs",) if name != "3_fused" else ("fp32_TFLOPs", "fp16_tc_TFLOPs")
        for roof in roofs:
            cells = []
            for s in shapes:
                i = at.flops(s) / attention_traffic_bytes(name, s)
                cells.append(f"{i:6.0f} F/B <={roofline.attainable(i, bw, ceil[roof]):5.0f} TF")
            label = family if roof == roofs[0] else "  ... on tensor cores"
            gb = f"{attention_traffic_bytes(name, shapes[0]) / 1e9:9.2f}" if roof == roofs[0] else " " * 9
            lines.append(f"{label:25s} {gb}  " + "".join(f"{c:>22s}" for c in cells))
    lines.append(f"(GB moved at {_shape_name(shapes[0])}; F/B: FLOP per byte; TF: the roof in TFLOP/s)")
    return "\n".join(lines)


def measured_intensity(profiles: list[dict], labels: list[str], problem) -> str:
    """FLOP per DRAM byte each rung really moved (ncu), at its profiled shape."""
    cells = []
    for p in profiles:
        label = f"{p['backend']}:{p['rung']}"
        if label in labels:
            m = p["metrics"]
            cells.append(f"{label} {problem.flops(tuple(p['shape'])) / (m['dram_bytes_read'] + m['dram_bytes_write']):,.0f}")
    return "FLOP per DRAM byte (ncu): " + (", ".join(cells) or "not profiled")


def search_summary(reports) -> str:
    """One line per autotuning search: its shape, how many configurations it timed and pruned, the winner."""
    lines = []
    for r in reports:
        timing = f"{r.best_ms:.3f} ms" if r.timed else "not timed"
        lines.append(f"{r.tuner:18s} {_shape_name(tuple(r.shape)):11s} timed {len(r.timed):2d}, pruned {len(r.pruned):2d}: "
                     f"{autotune.format_config(r.best)}  {timing}")
    reasons = autotune.fold_reasons([p["reason"] for r in reports for p in r.pruned])
    lines += [f"  pruned {k:3d} in all: {reason}" for reason, k in sorted(reasons.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines)


def memory_check(problem, labels: list[str], sizes=(1024, 2048, 4096), bh: tuple[int, int] = (1, 4)) -> str:
    """On a GPU: what each rung's call allocates beyond its inputs and output (the caching allocator's peak)
    against the model `workspace_bytes`, at (B, H, D) = (*bh, 64) for each S; summarized, a line per miss."""
    if not world.WORLD.gpu:
        return "the live check needs a GPU (torch.cuda.max_memory_allocated); the model above is what it checks"
    held, missed, unmodelled = 0, [], {}
    for S in sizes:
        shape = (*bh, S, 64, 0)
        inputs = problem.make_inputs(shape, "cuda", torch.Generator("cuda").manual_seed(0))
        out = problem.new_output(shape, "cuda")
        for rung in (r for r in problem.rungs if r.label in labels and not runner.unavailable(r)):
            rung.run(*inputs, out=out)           # first call: compilation, searches
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            rung.run(*inputs, out=out)
            torch.cuda.synchronize()
            extra, model = torch.cuda.max_memory_allocated() - base, at.workspace_bytes(rung.label, shape)
            if model is None:
                unmodelled.setdefault(rung.label, []).append(extra)
            elif extra == model:
                held += 1
            else:
                missed.append(f"  {rung.label} S={S}: allocated {extra / 1e6:.2f} MB, model {model / 1e6:.2f} MB")
    lines = [f"model holds for {held} of {held + len(missed)} (rung, S) calls at B={bh[0]} H={bh[1]} D=64, "
             f"S = {', '.join(map(str, sizes))}"] + missed
    lines += [f"  {label}: allocates {min(v) / 1e6:.2f}-{max(v) / 1e6:.2f} MB (not modelled)" for label, v in unmodelled.items()]
    return "\n".join(lines)


_P16, _P32, _I32, _CE = "*fp16", "*fp32", "i32", "constexpr"


def _materialized_triton() -> dict:
    """(kernel, signature, constexprs, num_warps) of Triton attention rungs 1-2, as their launchers use them."""
    return {
        "1_naive": [(ta.naive_scores_kernel, dict(q_ptr=_P16, k_ptr=_P16, s_ptr=_P32, S=_I32, D=_I32, scale="fp32", CAUSAL=_CE),
                     dict(CAUSAL=False), 1),
                    (ta.naive_softmax_kernel, dict(s_ptr=_P32, S=_I32), {}, 1),
                    (ta.naive_pv_kernel, dict(p_ptr=_P32, v_ptr=_P16, o_ptr=_P16, S=_I32, D=_I32), {}, 1)],
        "2_coalesced": [(ta.coalesced_scores_kernel, dict(q_ptr=_P16, k_ptr=_P16, s_ptr=_P32, S=_I32, scale="fp32", HEAD_DIM=_CE,
                                                          BLOCK_N=_CE, CAUSAL=_CE), dict(HEAD_DIM=64, BLOCK_N=128, CAUSAL=False), 4),
                        (ta.coalesced_softmax_kernel, dict(s_ptr=_P32, S=_I32, BLOCK=_CE), dict(BLOCK=1024), 4),
                        (ta.coalesced_pv_kernel, dict(p_ptr=_P32, v_ptr=_P16, o_ptr=_P16, S=_I32, HEAD_DIM=_CE, BLOCK_N=_CE),
                         dict(HEAD_DIM=64, BLOCK_N=128), 4)]}


def cuda_attention_tiles(name: str, head_dim: int) -> dict:
    """The defines kernels/cuda/attention.py compiles CUDA attention rung `name` with at `head_dim` where they are
    fixed: rung 3's tiles (FUSED_TILES), rungs 7-10's key tile and stages (their launch in HOPPER); {} for rungs 4-6
    (rung 6's are searched: the files' defaults)."""
    if name in cuda_attention.HOPPER:
        return cuda_attention.hopper_launch(name, head_dim)[0]
    return dict({"3_fused": cuda_attention.FUSED_TILES}.get(name, {}).get(head_dim, {}))


def recorded_winner(tuner: str, head_dim: int, causal: int = 0) -> dict | None:
    """The configuration a recorded search of `tuner` (e.g. "triton:7_tma") chose at S 4096 and `head_dim`."""
    return next((r.best for r in autotune.recorded_reports() if r.tuner == tuner
                 and tuple(r.shape)[2:] == (4096, head_dim, causal)), None)


def attention_sass(rung, arch: str, head_dim: int = 64, config: dict | None = None, causal: bool = False):
    """The SASS of an attention rung at `head_dim`, built as its launcher builds it on a GPU (CUDA with NVRTC, the
    launcher's tiles where they are fixed: cuda_attention_tiles; Triton with triton.compile as at the headline
    shapes, `causal` its own build: CAUSAL is a constexpr of Triton's fused kernel, a runtime flag of CUDA's);
    None for the torch rungs, and for Triton's searched rungs unless given the `config` to build (rung 7's TMA
    kernel; rung 6 is rung 5's kernel)."""
    if rung.backend == "cuda":
        return sass.cuda_sass(f"attention/{rung.name}.cu", arch,
                              dict(HEAD_DIM=head_dim, **cuda_attention_tiles(rung.name, head_dim)))
    if rung.backend == "triton" and rung.name in ("7_tma", "8_barrier_pass"):
        through = rung.name == "8_barrier_pass"
        if not config or (through and not arch.startswith("sm_90")):   # the pass is for Hopper's TMA loop
            return None
        return at.tma_sass(config, arch, head_dim, ptx_pass=through)
    materialized = _materialized_triton()
    if rung.name in materialized:
        parts = [sass.triton_sass(kernel, sig, const, arch, tuple(a for a in sig if a.endswith("_ptr") or a == "S"),
                                  num_warps=w) for kernel, sig, const, w in materialized[rung.name]]
        return sass.Sass(arch, {name: body for p in parts for name, body in p.functions.items()})
    if rung.backend == "triton" and rung.name in ta.GPU_TILES:
        return sass.triton_sass(**at.flash_sass_case(rung.name, head_dim=head_dim, causal=causal), arch=arch)
    return None


ATTENTION_FAMILIES_SASS = ("LDG", "LDS", "BAR", "SHFL", "MUFU.EX2", "HMMA", "LDSM", "HGMMA", "LDGSTS", "LDL")


def attention_signatures(problem, archs=("sm_80", "sm_90"), families=ATTENTION_FAMILIES_SASS,
                         recorded_winners: bool = False) -> str:
    """Which opcode families each rung's SASS contains, per architecture (`×3`: three kernels); with
    `recorded_winners`, Triton's searched rung 7 too, built with its recorded search's winner at D64."""
    out = []
    for arch in archs:
        variants = {}
        for rung in problem.rungs:
            searched = recorded_winners and rung.backend == "triton" and rung.searches
            s = attention_sass(rung, arch, config=recorded_winner(rung.label, 64) if searched else None)
            if s is not None:
                variants[rung.label + (f" ×{len(s.functions)}" if len(s.functions) > 1 else "")] = s
        out += [arch, signature_table(variants, families)]
    return "\n".join(out)


# What PyTorch warns while the checks pin SDPA to each backend in turn (a backend refusing a shape, the first
# cuBLAS call finding no CUDA context yet): noise beside the report, which names every refused shape itself
_SDPA_REFUSALS = (".*kernel not used because", ".*has been runtime disabled", ".*does not support",
                  "Attempting to run cuBLAS, but there was no current CUDA context")


def attention_checks(problem) -> str:
    """runner.format_checks; in the interpreter (no GPU) the slow Triton rungs at one small ragged S instead of
    the usual three (rung 1 runs a scalar program per score: ~40 s there)."""
    if world.WORLD.gpu:
        with warnings.catch_warnings():   # PyTorch saying which SDPA backends refuse a shape: the report says it
            for message in _SDPA_REFUSALS:
                warnings.filterwarnings("ignore", message=message, category=UserWarning)
            return runner.format_checks(problem)
    small = dataclasses.replace(problem, interpret_shapes=[(1, 1, 9, 64, 1)])
    return "\n".join(runner.format_checks(small if r.slow and r.backend == "triton" else problem, [r])
                     for r in problem.rungs)


def opcode_counts(problem, labels: list[str], arch: str, head_dims=(64, 128), families=("FFMA", "LDS", "LDL", "STL"),
                  causal: tuple = (False,)) -> str:
    """How many of each opcode family the SASS of each rung holds (static counts), per head dimension, and per
    mask in `causal` where the mask is a build of its own (Triton's fused rungs); then the registers a thread gets
    and its stack frame, the local memory that holds the values left out of them."""
    lines = [f"{arch} SASS, instructions in the code (not executed counts); regs: registers a thread, "
             "stack: its bytes of local memory"]
    for label in labels:
        rung = problem.rung(*label.split(":"))
        for d in head_dims:
            for masked in causal:
                if masked and rung.backend != "triton":   # CUDA's causal is a runtime flag: the same code
                    continue
                s = attention_sass(rung, arch, d, causal=masked)
                shape = f"D{d}" + (" causal" if masked else "")
                use = s.resources or {}
                lines.append(f"  {label:16s} {shape:12s}" + "".join(f"{f:>6s} {s.count(f):5d}" for f in families)
                             + (f"   regs {use['registers']:3d}   stack {use['stack_bytes']:5d} B" if use else ""))
    return "\n".join(lines)


def _per_warp_fma(profiles: list[dict], labels: list[str], problem, metric: str):
    """(label, the metric's count, the count per warp-wide FMA the two products need: FLOPs / 2 / 32 lanes) of
    each profiled rung in `labels`."""
    for p in profiles:
        label = f"{p['backend']}:{p['rung']}"
        if label in labels and p["metrics"].get(metric) is not None:
            yield label, p["metrics"][metric], p["metrics"][metric] / (problem.flops(tuple(p["shape"])) / 2 / 32)


def bank_conflicts_per_fma(profiles: list[dict], labels: list[str], problem) -> str:
    """Shared-memory bank conflicts (ncu) per warp-wide FMA the two products need."""
    return "\n".join(f"{label:16s} {n:.2e} bank conflicts, {each:.3f} per warp-wide FMA"
                     for label, n, each in _per_warp_fma(profiles, labels, problem, "shared_bank_conflicts"))


def instructions_per_fma(profiles: list[dict], labels: list[str], problem) -> str:
    """Warp instructions issued (ncu) per warp-wide FMA the two products need, and the share of the fp32 peak (one
    warp-wide FMA a scheduler a cycle, the datasheet's rate; the measured roof is lower) that leaves at one
    instruction a cycle."""
    return "\n".join(f"{label:16s} {n:.3g} warp instructions, {each:.3g} per warp-wide FMA: at one instruction a "
                     f"cycle, {100 / each:.2g}% of the fp32 peak"
                     for label, n, each in _per_warp_fma(profiles, labels, problem, "instructions"))
