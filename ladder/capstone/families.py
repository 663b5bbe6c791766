"""Where a forward pass spends its time, by op family, from torch.profiler.

On a GPU the profiler's device rows are the kernels that ran (cuBLAS GEMMs, the SDPA kernel, PyTorch's
elementwise kernels, Inductor's generated Triton kernels, ours), and their time is GPU time. On a CPU the
rows are ATen ops (aten::addmm, aten::native_layer_norm, ...) and their self time is CPU time. Either way
each row is sorted into one family by its name, and a family's share is its time over the total.
"""
from __future__ import annotations

import contextlib
import os
import re

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity


FAMILIES = ("matmul", "attention", "layer norm", "GELU/bias", "softmax", "elementwise", "copies", "other")

# Inductor's generated kernels are named after what they fused: triton_poi_fused_add_native_layer_norm_3.
# They are never a matmul (those are extern cuBLAS calls or "triton_tem_" templates).
_INDUCTOR_FUSED = re.compile(r"^triton_(poi|per|red)_")
_COPY_OPS = {"clone", "view", "transpose", "permute", "cat", "copy", "unsafe", "contiguous", "embedding",
             "expand", "select", "slice", "index", "reshape", "t", "split", "with", "sizes", "fused", "default"}
# (family, pattern) in the order they are tried: attention before matmul (some attention kernels are
# CUTLASS-built), GELU and copies before the generic elementwise kernels they are instances of.
_RULES = [
    ("attention", r"flash|fmha|attention|sdpa|scaled_dot_product"),
    ("matmul", r"gemm|cutlass|xmma|nvjet|cublas|matmul|linear|persistent_kernel|triton_tem_|"
               r"(^|[^a-z])(mm|addmm|bmm|baddbmm|_addmm_activation)([^a-z]|$)"),
    ("layer norm", r"layer_?norm"),
    ("GELU/bias", r"gelu"),
    ("softmax", r"softmax"),
    ("copies", r"copy|memcpy|memset|clone|contiguous|catarray|(^|[^a-z])cat([^a-z]|$)|transpose|permute|"
               r"index_?select|embedding|gather|indexselect"),
    ("elementwise", r"elementwise|(^|[^a-z])(add|mul|sub|div|pow|tanh|exp|neg|fill|where|arange|add_)([^a-z]|$)"),
]


def family_of(name: str) -> str:
    """The op family of one profiler row: an ATen op ("aten::addmm"), a CUDA kernel, or an Inductor kernel."""
    low = name.lower()
    fused = _INDUCTOR_FUSED.match(low)
    if fused:
        parts = set(re.sub(r"_\d+$", "", low[fused.end():]).split("_"))
        if "layer" in parts or "norm" in parts:
            return "layer norm"
        if "gelu" in parts:
            return "GELU/bias"
        if "softmax" in parts:
            return "softmax"
        return "copies" if parts <= _COPY_OPS else "elementwise"
    for family, pattern in _RULES:
        if re.search(pattern, low):
            return family
    return "other"


def rows(prof, on_gpu: bool) -> list[tuple[str, float]]:
    """(name, µs) of every row of the profile's key averages that holds time of its own: kernels on a
    GPU (a CPU op's device time is its kernels' again, so those rows would count it twice), ATen ops'
    self time on a CPU."""
    out = []
    for row in prof.key_averages():
        if on_gpu and row.device_type == DeviceType.CUDA:
            out.append((row.key, row.self_device_time_total))
        elif not on_gpu and row.device_type == DeviceType.CPU:
            out.append((row.key, row.self_cpu_time_total))
    return [(name, us) for name, us in out if us > 0]


def family_times(named_times: list[tuple[str, float]]) -> dict[str, float]:
    """µs per family (every family listed, in FAMILIES order)."""
    totals = dict.fromkeys(FAMILIES, 0.0)
    for name, us in named_times:
        totals[family_of(name)] += us
    return totals


def shares(times: dict[str, float]) -> dict[str, float]:
    total = sum(times.values())
    return {family: (t / total if total else 0.0) for family, t in times.items()}


@contextlib.contextmanager
def _native_stderr_silenced():
    """The profiler's native library writes a time-stamped start/stop line to stderr at every profile, with
    no level that turns it off; this sends the process's stderr (file descriptor 2) to /dev/null meanwhile."""
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def profile(run, on_gpu: bool, steps: int = 3) -> dict:
    """Profile `steps` calls of `run()` (after one call outside the profile: compiles and searches stay out)
    -> {"us_per_step": {family: µs}, "top": [(name, family, µs per step)] of the ten heaviest rows}."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with torch.no_grad():
        run()
        if on_gpu:
            torch.cuda.synchronize()
        with _native_stderr_silenced(), torch.profiler.profile(activities=activities) as prof:
            for _ in range(steps):
                run()
            if on_gpu:
                torch.cuda.synchronize()
    named = rows(prof, on_gpu)
    top = sorted(named, key=lambda r: -r[1])[:10]
    return {"us_per_step": {f: t / steps for f, t in family_times(named).items()},
            "top": [(name, family_of(name), us / steps) for name, us in top]}


def share_table(profiles: dict[str, dict], label: str = "") -> str:
    """One line per family, a column per profiled variant: its share of the variant's time."""
    names = list(profiles)
    head = f"{'op family':12s}" + "".join(f"{n:>16s}" for n in names)
    lines = ([label] if label else []) + [head]
    per_variant = {n: shares(p["us_per_step"]) for n, p in profiles.items()}
    for family in FAMILIES:
        cells = [per_variant[n][family] for n in names]
        if any(c >= 0.0005 for c in cells):
            lines.append(f"{family:12s}" + "".join(f"{100 * c:15.1f}%" for c in cells))
    totals = [sum(p["us_per_step"].values()) / 1e3 for p in profiles.values()]
    lines.append(f"{'total ms':12s}" + "".join(f"{t:16.3f}" for t in totals))
    return "\n".join(lines)
