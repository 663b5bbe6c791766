"""Lesson 03, the Triton matmul ladder: the kernels a profile of the fused epilogue recorded, and the experiment behind
rung 6's tile order (its schedules against cuBLAS in interleaved rounds, GPU only).
"""
from __future__ import annotations

import statistics

import torch

import kernels.matmul as mm
from kernels import matmul_triton_search as triton_search
from kernels.triton import matmul as tm
from ladder import autotune, verdicts
from ladder.check import compare
from ladder.timing import bench


def profiled_kernels(recording, problem: str, width: int = 40) -> str:
    """Per recorded profile of `problem`: DRAM MB read and written (ncu) and the kernels that ran, short names
    (cut at `width` characters, marked …)."""
    lines = [f"{'variant':18s} {'DRAM read MB':>13s} {'written MB':>11s}  kernels (ncu)"]
    for p in recording.profiles(problem):
        m = p["metrics"]
        short = [k.split("(")[0].split("<")[0] for k in m.get("kernels", [])]
        names = ", ".join(verdicts.cut(k, width) for k in short)
        lines.append(f"{p['backend'] + ':' + p['rung']:18s} {m['dram_bytes_read'] / 1e6:13.0f} "
                     f"{m['dram_bytes_write'] / 1e6:11.0f}  {names}")
    shape = recording.profiles(problem)[0]["shape"] if recording.profiles(problem) else None
    lines.append(f"(ncu at {'x'.join(map(str, shape)) if shape else '-'}, {recording.label})")
    return "\n".join(lines)


def compare_schedules(sizes: tuple = (4096, 8192), rounds: int = 5) -> str:
    """Lesson 03's experiment (GPU only): rung 6's tile schedules (kernels.triton.matmul.schedules) against
    cuBLAS in interleaved rounds, each round starting one later (the clocks drift, ratios less so), every
    variant checked first; median TFLOP/s, x cuBLAS and the range of that ratio over the rounds."""
    lines = []
    for n in sizes:
        a, b = mm.PROBLEM.make_inputs((n, n, n), "cuda", torch.Generator("cuda").manual_seed(1))
        out = torch.empty(n, n, dtype=torch.float16, device="cuda")
        triton_search.autotuned(a, b, out)  # rung 6's search at this shape, if it has not run yet
        config = autotune.triton_config_dict(triton_search.autotuned_kernel.best_config)
        variants = {"cuBLAS": lambda: torch.matmul(a, b, out=out), **tm.schedules(a, b, out, config)}
        ref = a.float() @ b.float()
        for name, run in variants.items():
            out.fill_(float("nan"))
            run()
            if not compare(out, ref).ok:
                raise AssertionError(f"{name} is wrong at {n}^3")
        names, ms = list(variants), {name: [] for name in variants}
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                ms[name].append(bench(variants[name], 50, 150).median_ms)  # hundreds of runs a window
        lines.append(f"{n}^3, {autotune.format_config(config)}; median of {rounds} rounds, x cuBLAS "
                     "(range over the rounds)")
        for name, t in ms.items():
            ratios = [c / x for c, x in zip(ms["cuBLAS"], t)]
            lines.append(f"  {name:32s} {2 * n ** 3 / statistics.median(t) / 1e9:7.1f} TFLOP/s "
                         f"{statistics.median(ms['cuBLAS']) / statistics.median(t):6.3f}x "
                         f"({min(ratios):.3f}-{max(ratios):.3f})")
    return "\n".join(lines)
