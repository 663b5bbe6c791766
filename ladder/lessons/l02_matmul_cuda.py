"""Lessons 02a-02c, the CUDA matmul ladder (rungs 1-6 on any GPU, 7-9 on Hopper, 10-12 with clusters): the roofs it
meets, its SASS signatures per architecture, its search spaces and searches, and what each rung costs in lines.
"""
from __future__ import annotations

import inspect
import re
from pathlib import Path

import kernels.matmul as mm
from kernels.cuda import matmul as cm
from kernels.triton import matmul as tm
from ladder import autotune, roofline, sass
from ladder.runtime import hardware
from ladder.lessons.signatures import signature_table
from ladder.lessons.source import ROOT, code, lines_of_code


def roofs_summary(problem, roofs: dict, label: str, shape: tuple) -> str:
    """The roofs a matmul meets (copy, fp32, fp16 tensor cores: the highest tensor-core instruction ceiling, lesson
    00's microbenchmarks), each compute roof's ridge point and the least time `shape` can take under it; then both
    instructions' ceilings, and cuBLAS's speed, an anchor under the roof."""
    tc = roofs.get("fp16_tc_TFLOPs")
    lines = [f"roofs ({label}): copy {roofs['copy_TBps']:.2f} TB/s, fp32 {roofs['fp32_TFLOPs']:.0f} TFLOP/s, "
             + (f"fp16 tensor cores {tc:.0f} TFLOP/s" if tc else "fp16 tensor cores: no instruction ceiling measured")]
    for key in ("fp32_TFLOPs", "fp16_tc_TFLOPs"):
        if not roofs.get(key):
            continue
        best = problem.flops(shape) / (roofs[key] * 1e12) * 1e3
        lines.append(f"{roofline.ROOFS[key]:17s}: ridge point {roofline.ridge(roofs['copy_TBps'], roofs[key]):4.0f} "
                     f"FLOP/B; {'x'.join(map(str, shape))} at least {best:.3f} ms")
    if roofs.get("mma_sync_TFLOPs") and roofs.get("wgmma_TFLOPs"):
        lines.append(f"instruction ceilings: mma.sync {roofs['mma_sync_TFLOPs']:.0f} TFLOP/s, wgmma "
                     f"{roofs['wgmma_TFLOPs']:.0f} TFLOP/s ({roofs['wgmma_TFLOPs'] / roofs['mma_sync_TFLOPs']:.2f}x)")
    if roofs.get("cublas_TFLOPs") and tc:
        lines.append(f"cuBLAS at 8192³ (an anchor, not a roof): {roofs['cublas_TFLOPs']:.0f} TFLOP/s, "
                     f"{100 * roofs['cublas_TFLOPs'] / tc:.0f}% of the tensor-core roof")
    return "\n".join(lines)


def matmul_signatures_by_arch() -> str:
    """The CUDA matmul rungs' opcode families per architecture (rung 7 on sm_90a), compiled here."""
    out = []
    for arch in sass.ARCHS:
        pipelined = dict(cm.TWO_STAGES) if arch == "sm_75" else dict(cm.PIPELINED)
        variants = {name: sass.cuda_sass(f"matmul/{name}.cu", arch, pipelined if name[0] in "56" else None)
                    for name in ("1_naive", "2_coalesced", "3_smem_tiled", "3b_register_blocked",
                                 "4_tensor_core", "5_pipelined", "6_autotuned")}
        if arch == "sm_90":
            variants["7_wgmma (sm_90a)"] = sass.cuda_sass("matmul/7_wgmma.cu", "sm_90a", cm.WGMMA)
        out += [arch, signature_table(variants)]
    return "\n".join(out)


def _h100():
    """A Hopper GPU's limits for the search-space tables (an H100's; an H200 has the same per-SM limits)."""
    return hardware.GPU("NVIDIA H100 80GB HBM3", (9, 0), 132, 50 << 20, 227 << 10, 80 << 30, None)


def matmul_search_space() -> str:
    """CUDA rung 6's search space, and how many configurations the pruning rules keep, before any compile, on a
    Hopper GPU (H100 and H200 share the limits the rules read) and on a T4."""
    t4 = hardware.GPU("Tesla T4", (7, 5), 40, 4 << 20, 64 << 10, 16 << 30, None)
    lines = [f"search space: {mm.SEARCH_SPACE}", f"{len(mm.TUNER.configs())} configurations before pruning"]
    lines += [f"{name}: {sum(1 for c in mm.TUNER.configs() if not mm.prune_reason(c, g))} kept before compiling"
              for name, g in (("Hopper (H100, H200)", _h100()), ("Turing (T4)", t4))]
    return "\n".join(lines)


def _matmul_reports(gpu, tuner, shape: tuple) -> list:
    """`tuner`'s search at `shape`, run here where this GPU can run it (not emulated); else all its recorded ones."""
    needs = "wgmma" if tuner is mm.HOPPER_TUNER else "tensor_cores"
    if gpu is not None and gpu.has(needs) and not gpu.emulated_on:
        return mm.tune([shape], tuner)
    return [r for r in autotune.recorded_reports() if r.problem == "matmul" and r.tuner == tuner.name]


def matmul_searches(gpu, shape: tuple = (4096, 4096, 4096), tuner=None) -> str:
    """CUDA rung 6's search (or `tuner`'s: kernels.matmul.HOPPER_TUNER, rung 12's) at `shape`, run here on a GPU
    that can run it; else the recorded searches."""
    return "\n\n".join(r.summary() for r in _matmul_reports(gpu, tuner or mm.TUNER, shape))


def t4_floors(problem, rows: list[dict], label: str, rungs: dict, shape: tuple) -> str:
    """For each rung ({label: datasheet roof key}): the least time a T4 could take at `shape`, against the time
    measured (or recorded) here."""
    t4 = roofline.datasheet_gpu("T4").datasheet
    lines = []
    for rung, key in rungs.items():
        floor = problem.flops(shape) / (getattr(t4, key) * 1e12) * 1e3
        here = next(r["ms"] for r in rows if f"{r['backend']}:{r['rung']}" == rung and tuple(r["shape"]) == tuple(shape))
        lines.append(f"{rung}: a T4 needs at least {floor:.2f} ms at {'x'.join(map(str, shape))}, "
                     f"{floor / here:.1f}x the time ({label})")
    return "\n".join(lines)


def wgmma_signatures(families: tuple = ("LDGSTS", "BAR", "UTMALDG", "SYNCS", "HGMMA", "USETMAXREG"),
                     rungs: tuple = ("7_wgmma", "8_tma_warp_specialized")) -> str:
    """The Hopper matmul rungs' opcode families side by side (sm_90a SASS, compiled here: no GPU needed)."""
    configs = {"7_wgmma": cm.WGMMA, "8_tma_warp_specialized": cm.TMA_WS, "9_persistent": cm.PERSISTENT,
               "10_cluster_multicast": cm.CLUSTER_MULTICAST, "11_tma_store": cm.TMA_STORE,
               "12_autotuned": cm.HOPPER_DEFAULT}
    return signature_table({name: sass.cuda_sass(f"matmul/{name}.cu", "sm_90a", configs[name]) for name in rungs},
                           families)


def hopper_search_space() -> str:
    """CUDA rung 12's search space, what the pruning keeps on an H100, and each kept block of C: the most stages
    that fit, its shared memory, and how many blocks 4096^2 and 8192^2 of C hold (against the H100's 132 SMs)."""
    h100 = _h100()
    kept = [c for c in mm.HOPPER_TUNER.configs() if not mm.hopper_prune_reason(c, h100)]
    lines = [f"search space: {mm.HOPPER_SEARCH_SPACE}",
             f"{len(mm.HOPPER_TUNER.configs())} configurations, {len(kept)} kept on sm_90 (H100, H200: 132 SMs)",
             f"{'BM x BN':>9s} {'stages':>7s} {'KiB (most stages)':>18s} {'blocks 4096^2':>14s} {'8192^2':>7s}"]
    for bm, bn in sorted({(c["BM"], c["BN"]) for c in kept}):
        stages = sorted({c["STAGES"] for c in kept if (c["BM"], c["BN"]) == (bm, bn)})
        most = min((c for c in kept if (c["BM"], c["BN"], c["STAGES"]) == (bm, bn, stages[-1])),
                   key=cm.hopper_shared_bytes)
        depth = f"{stages[0]}-{stages[-1]}" if len(stages) > 1 else str(stages[0])
        lines.append(f"{bm:>4d} x {bn:<3d} {depth:>7s} {cm.hopper_shared_bytes(most) // 1024:>18d} "
                     + "".join(f"{-(-n // bm) * -(-n // bn):>{w}d}" for n, w in ((4096, 15), (8192, 8))))
    return "\n".join(lines)


def hopper_search_gain(gpu, shape: tuple) -> str:
    """At `shape`: rung 12's search (run here on a Hopper GPU, else the recorded one), its winner against rung 11's
    configuration timed in the same search, and the blocks of C each makes there against the GPU's SMs."""
    report = next((r for r in _matmul_reports(gpu, mm.HOPPER_TUNER, shape) if tuple(r.shape) == tuple(shape)), None)
    if report is None:
        return f"no search of rung 12 at {'x'.join(map(str, shape))} recorded"
    sms = (gpu or roofline.datasheet_gpu(report.gpu)).sm_count
    rung_11 = next(t for t in report.timed if cm.hopper_config(t["config"]) == cm.HOPPER_DEFAULT)
    lines = [f"{'x'.join(map(str, shape))} ({'live' if gpu is not None and gpu.has('wgmma') else 'recorded'} "
             f"on {report.gpu}, {sms} SMs)"]
    for name, config, ms in (("the search's winner", report.best, report.best_ms),
                             ("rung 11's configuration", rung_11["config"], rung_11["ms"])):
        blocks = cm.hopper_grid(config, shape[0], shape[1], sms=1 << 30)  # of BM x BN, in whole clusters
        lines.append(f"  {name:24s} {autotune.format_config(config):52s} {ms:.4f} ms  "
                     f"{blocks} blocks of {config['BM']}x{config['BN']} = {blocks / sms:.2f} per SM")
    lines.append(f"  winner / rung 11's: {rung_11['ms'] / report.best_ms:.2f}x as fast")
    return "\n".join(lines)


def matmul_lines_vs_speed(rows: list[dict], shape: tuple = (4096, 4096, 4096)) -> str:
    """Lines of code (neither blank nor comment) of what each matmul rung runs, beside its TFLOP/s at `shape`:
    the CUDA rung's file (rungs 4-12 also include tensor_core.cuh, rungs 8-12 tma.cuh, rungs 10-12 cluster.cuh, each
    counted once; rung 6 includes rung 5's file) and the Triton rung's kernel functions (rungs 3-5 share one kernel
    and its helpers). Launchers not counted."""
    at = {f"{r['backend']}:{r['rung']}": r["tflops"] for r in rows if tuple(r["shape"]) == tuple(shape)}
    cuda = {r.name: lines_of_code((ROOT / r.source).read_text(), "//") for r in mm.PROBLEM.rungs if r.backend == "cuda"}
    header = lines_of_code((ROOT / mm.CUDA_DIR / "tensor_core.cuh").read_text(), "//")
    tiled = [tm.tile_coords, tm.tile_product, tm.store_tile]
    kernels = {"1_naive": [tm.naive_kernel], "2_coalesced": [tm.coalesced_kernel],
               **{n: [*tiled, tm.matmul_kernel] for n in ("3_tiled", "4_tensor_core", "5_pipelined")},
               "6_autotuned": [*tiled, tm.persistent_kernel],
               "7_tma_persistent": [tm.tile_coords, tm.store_tile, tm.tma_persistent_kernel]}
    triton = {n: sum(lines_of_code(code(k)) for k in ks) for n, ks in kernels.items()}
    twins = {c: next((t for t in triton if t.split("_")[0] == c.split("_")[0]), None) for c in cuda}
    def speed(label):
        return f"{at[label]:8.1f}" if label in at else f"{'-':>8s}"
    tma, cluster = (lines_of_code((ROOT / mm.CUDA_DIR / name).read_text(), "//") for name in ("tma.cuh", "cluster.cuh"))
    lines = [f"tensor_core.cuh (included by the CUDA tensor-core rungs): {header} lines, tma.cuh (rungs 8-12): {tma}, "
             f"cluster.cuh (rungs 10-12): {cluster}; rung 6 adds a few lines to rung 5's file; "
             f"TFLOP/s at {'x'.join(map(str, shape))}",
             f"{'CUDA rung':28s} {'lines':>5s} {'TFLOP/s':>8s}   {'Triton rung':18s} {'lines':>5s} {'TFLOP/s':>8s}"]
    for c, t in twins.items():
        right = f"{t:18s} {triton[t]:5d} {speed('triton:' + t)}" if t and c[1] != "b" else ""
        lines.append(f"{c:28s} {cuda[c]:5d} {speed('cuda:' + c)}   {right}")
    lines.append(f"{'torch:cublas':28s} {'':5s} {speed('torch:cublas')}")
    return "\n".join(lines)


# ------------------------------------------------------------- lesson 02b's Hopper primer

HOPPER_RUNGS = {7: "kernels/cuda/matmul/7_wgmma.cu", 8: "kernels/cuda/matmul/8_tma_warp_specialized.cu",
                9: "kernels/cuda/matmul/9_persistent.cu", 10: "kernels/cuda/matmul/10_cluster_multicast.cu"}
_HEADERS = {"tma": "kernels/cuda/matmul/tma.cuh", "tensor_core": "kernels/cuda/matmul/tensor_core.cuh"}


def _search(pattern: str, text: str, where: str) -> re.Match:
    found = re.search(pattern, text)
    if not found:
        raise KeyError(f"{where} no longer has {pattern!r}: the primer's constants need it")
    return found


def hopper_primer_constants() -> dict:
    """What the primer of lesson 02b draws, read from rungs 7-10's .cu files, their headers and launchers (no GPU):
    the block tile, the ring, the warpgroups and their registers, the TMA boxes and swizzle, the wgmma shape and
    the shared-memory matrix descriptors' fields, the cluster."""
    from ladder.lessons.source import cu_define
    from ladder.runtime import tma
    rung8 = (ROOT / HOPPER_RUNGS[8]).read_text()
    core = (ROOT / _HEADERS["tensor_core"]).read_text()
    path8 = "matmul/" + Path(HOPPER_RUNGS[8]).name
    threads, consumers = cu_define(path8, "THREADS"), cu_define(path8, "CONSUMERS")
    maps = _search(r"tma\.encode\(a, \((\d+), (\d+)\)\), tma\.encode\(b, \((\d+), (\d+)\)\)",
                   inspect.getsource(cm.tma_maps), "kernels/cuda/matmul.py's tma_maps")
    wgmma = _search(r'wgmma\.mma_async\.sync\.aligned\.m(\d+)n" #N "k(\d+)', core, "tensor_core.cuh")
    steps = _search(r"descriptor\(a \+ k \* 16, (\d+)\), descriptor\(b \+ k \* 16 \* 64, BK_ \* (\d+)\)", core,
                    "tensor_core.cuh's wgmma_k_steps")
    bk = cu_define(path8, "BK")
    regs_per_sm = 65536                                   # an sm_90 SM's register file (glossary: SM)
    return dict(
        BM=cu_define(path8, "BM"), BN=cu_define(path8, "BN"), BK=bk, STAGES=cm.TMA_WS["STAGES"],
        THREADS=threads, CONSUMERS=consumers, PRODUCERS=threads // 128 - consumers,
        STAGE_BYTES=2 * (cu_define(path8, "BM") * bk + bk * cu_define(path8, "BN")),
        producer_regs=int(_search(r"setmaxnreg\.dec\.sync\.aligned\.u32 (\d+)", rung8, HOPPER_RUNGS[8]).group(1)),
        consumer_regs=int(_search(r"setmaxnreg\.inc\.sync\.aligned\.u32 (\d+)", rung8, HOPPER_RUNGS[8]).group(1)),
        launch_regs=regs_per_sm // threads // 8 * 8,      # __launch_bounds__(THREADS, 1): registers come in 8s
        regs_per_sm=regs_per_sm,
        box_a=(int(maps.group(1)), int(maps.group(2))), box_b=(int(maps.group(3)), int(maps.group(4))),
        swizzle=inspect.signature(tma.encode).parameters["swizzle"].default,
        wgmma=(int(wgmma.group(1)), cu_define(path8, "BN"), int(wgmma.group(2))),
        a_leading=int(steps.group(1)), b_leading=bk * int(steps.group(2)),
        stride=int(_search(r"\(1024 >> 4\) << 32", core, "tensor_core.cuh's descriptor").group(0)[1:5]),
        swizzle_mode=int(_search(r"(\d)ull << 62", core, "tensor_core.cuh's descriptor").group(1)),
        CLUSTER=cu_define("matmul/" + Path(HOPPER_RUNGS[10]).name, "CLUSTER"))


def _statements(function, starts: tuple[str, ...]) -> list[tuple[int, str]]:
    """(line number, line) of each statement of `function` whose first line contains one of `starts`, to the line
    that closes its brackets."""
    lines, first = inspect.getsourcelines(function)
    out = []
    for start in starts:
        at = next((i for i, line in enumerate(lines) if start in line), None)
        if at is None:
            raise KeyError(f"{function.__name__} no longer has {start!r}: the primer prints that line")
        depth, i = 0, at
        while True:
            depth += sum(lines[i].count(c) for c in "([{") - sum(lines[i].count(c) for c in ")]}")
            out.append((first + i, lines[i].rstrip()))
            i += 1
            if depth <= 0:
                break
    return out


def hopper_host_side() -> str:
    """The host's part of a Hopper rung, the lines a student does not see in the kernel: kernels/cuda/matmul.py
    encodes A's and B's tensor maps (ladder/runtime/tma.py: what the driver's cuTensorMapEncodeTiled gets) and
    launches rung 8, compiled for sm_90a, with its threads and dynamic shared memory."""
    from ladder.runtime import tma
    picks = [("kernels/cuda/matmul.py", cm.tma_maps, ("return tma.encode",)),
             ("ladder/runtime/tma.py", tma.layout, ("spec = dict",)),
             ("ladder/runtime/tma.py", tma._encoded, ("result = encode_tiled",)),
             ("kernels/cuda/matmul.py", cm.tma_warp_specialized, ("return _tensor_core_launch",)),
             ("kernels/cuda/matmul.py", cm._tensor_core_launch, ("module = cuda.load", "inputs = operands",
                                                                "cuda.launch("))]
    out = []
    for path, function, starts in picks:
        chosen = _statements(function, starts)
        indent = min(len(line) - len(line.lstrip()) for _, line in chosen)
        out.append(f"# {path}, in {function.__name__} (line{'s' * (len(chosen) > 1)} "
                   f"{chosen[0][0]}{'-' + str(chosen[-1][0]) if len(chosen) > 1 else ''})")
        out += [line[indent:] for _, line in chosen]
    return "\n".join(out)
