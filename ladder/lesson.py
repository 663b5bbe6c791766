"""Small helpers the notebooks call: show a rung's source, the diff from the previous rung,
and the SASS signature table."""
from __future__ import annotations

import difflib
import inspect
from pathlib import Path

from ladder import results, sass

ROOT = Path(__file__).resolve().parent.parent


def show_source(path: str) -> None:
    print((ROOT / path).read_text())


def show_diff(before: str, after: str) -> None:
    """Unified diff between two rungs' files: the one idea the second rung adds."""
    a, b = (ROOT / before).read_text().splitlines(), (ROOT / after).read_text().splitlines()
    print("\n".join(difflib.unified_diff(a, b, before, after, lineterm="", n=2)))


def _python_function(obj):
    """The Python function behind a Triton kernel (jit, heuristics, autotune, interpreter wrappers)."""
    while not inspect.isfunction(obj) and hasattr(obj, "fn"):
        obj = obj.fn
    return obj


def code(obj) -> str:
    return inspect.getsource(_python_function(obj)).rstrip()


def show_code(*objects) -> None:
    """The source of Python functions or Triton kernels, one after another."""
    print("\n\n".join(code(o) for o in objects))


def show_code_diff(before, after) -> None:
    """Unified diff between two functions or kernels: the one idea the second adds."""
    a, b = code(before).splitlines(), code(after).splitlines()
    print("\n".join(difflib.unified_diff(a, b, _python_function(before).__name__, _python_function(after).__name__,
                                         lineterm="", n=2)))


def lines_of_code(text: str, comment: str = "#") -> int:
    """Lines that are neither blank nor only a comment (docstrings count as code)."""
    return sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith(comment))


def load_widths(variants: dict[str, sass.Sass]) -> str:
    """'name: 16-bit global loads' per variant (stable across compiler versions)."""
    return "\n".join(f"{name:28s} global loads: " + ", ".join(f"{b}-bit" for b in sorted(s.global_load_bits()))
                     for name, s in variants.items())


# Opcode families that mark each step of a ladder, in the order a lesson meets them.
SIGNATURE_FAMILIES = ("LDG", "LDS", "BAR", "HMMA", "LDSM", "LDGSTS", "HGMMA")


def signature_table(variants: dict[str, sass.Sass], families: tuple[str, ...] = SIGNATURE_FAMILIES) -> str:
    """Which opcode families each variant's SASS contains ('x' = present): compiler-version stable."""
    widths = [max(7, len(f) + 1) for f in families]   # a column: the family's name and a space, at least 7
    head = f"{'':26s}" + "".join(f"{f:>{w}s}" for f, w in zip(families, widths))
    rows = [f"{name:26s}" + "".join(f"{'x' if s.count(f) else '-':>{w}s}" for f, w in zip(families, widths))
            for name, s in variants.items()]
    return "\n".join([head] + rows)


def speed_table(rows: list[dict], shape: tuple, anchor: str | tuple[str, ...] = "torch:cublas") -> str:
    """TFLOP/s per rung at `shape`, its % of the anchor (one column per anchor if several), and its
    speed-up over the rung before. The anchor is the one timed in the rung's own run (a recorded row's
    session); a run that timed none leaves the cell as "-" and a footnote says so."""
    at = [r for r in rows if tuple(r["shape"]) == tuple(shape)]
    anchors = (anchor,) if isinstance(anchor, str) else tuple(anchor)
    live = {a: next((r for r in at if f"{r['backend']}:{r['rung']}" == a and "recorded" not in r), None)
            for a in anchors}

    def reference(row, a):  # the anchor timed in `row`'s run
        return results.run_anchor(row, a) if "recorded" in row else live[a]

    titles = ["% " + a.split(":")[1] for a in anchors]
    widths = [max(9, len(t)) for t in titles]
    lines = [f"{'rung':26s} {'ms':>9s} {'TFLOP/s':>8s} " + " ".join(f"{t:>{w}s}" for t, w in zip(titles, widths))
             + f" {'vs previous':>12s}"]
    previous, unanchored = {}, set()
    for r in at:
        label = f"{r['backend']}:{r['rung']}"
        before = previous.get(r["backend"])
        step = f"{r['tflops'] / before:11.2f}x" if before else ""
        refs = [reference(r, a) for a in anchors]
        if None in refs:
            unanchored.add(r.get("recorded"))
        pcts = [f"{100 * r['tflops'] / ref['tflops']:8.1f}%" if ref else "-" for ref in refs]
        lines.append(f"{label:26s} {r['ms']:9.3f} {r['tflops']:8.1f} "
                     + " ".join(f"{p:>{w}s}" for p, w in zip(pcts, widths)) + f" {step:>12s}"
                     + ("" if r["correct"] else "  WRONG"))
        previous[r["backend"]] = r["tflops"]
    if unanchored:
        lines.append("- : the run that timed this rung timed no " + " or ".join(a.split(":")[1] for a in anchors)
                     + " at this shape (or it was not kept): no fair % to give")
    return "\n".join(lines)


def datasheet_gpu(name: str):
    """The GPU of `name`'s datasheet row (ladder.hardware), as a model: its limits and peak rates, no device."""
    from ladder.hardware import GPU, datasheet_for
    sheet = datasheet_for(name)
    if sheet is None:
        raise ValueError(f"no datasheet row matches {name!r}")
    return GPU(sheet.name, sheet.capability, sheet.sm_count, 0, sheet.smem_per_block_bytes, 0, sheet)


def compute_unit(problem, rung, gpu) -> str:
    """What does a rung's arithmetic on `gpu`: the tensor cores, or the CUDA cores where it needs none or its
    tensor-core path falls back to them there (Triton's tl.dot before sm_80). The anchors (cuBLAS, SDPA) use
    the unit of the problem's compute roof."""
    if rung.backend == "torch":
        return "tensor cores" if problem.compute_roof == "fp16_tc_TFLOPs" else "CUDA cores"
    if rung.needs not in ("tensor_cores", "wgmma"):
        return "CUDA cores"
    if rung.fallback and not gpu.has(rung.fallback[0]) and "CUDA cores" in rung.fallback[1]:
        return "CUDA cores"
    return "tensor cores"


def gpu_model(problem, shape: tuple, name: str = "T4") -> str:
    """What each rung does on the GPU of `name`'s datasheet and the least time it could take there at `shape`:
    the roofline bound max(FLOPs / peak of the unit it uses, minimum bytes / DRAM bandwidth). A model from the
    datasheet, never a measurement; the same for every reader."""
    gpu = datasheet_gpu(name)
    sheet = gpu.datasheet
    flops, nbytes = problem.flops(shape), problem.min_bytes(shape)
    peak = {"tensor cores": sheet.fp16_tc_TFLOPs, "CUDA cores": sheet.fp32_TFLOPs}
    memory_ms = nbytes / (sheet.hbm_TBps * 1e12) * 1e3
    lines = [f"model, not a measurement: {sheet.name} ({gpu.arch}) from its datasheet: {sheet.hbm_TBps * 1000:.0f} GB/s, "
             f"fp32 {sheet.fp32_TFLOPs} TFLOP/s, fp16 tensor cores {sheet.fp16_tc_TFLOPs} TFLOP/s; shape {shape}",
             f"{'rung':24s} {'bound by':13s} {'at least ms':>11s} {'at most TFLOP/s':>15s}  how it runs there"]
    for rung in problem.rungs:
        reason = rung.unavailable_reason(gpu)
        if reason:
            lines.append(f"{rung.label:24s} {'-':13s} {'-':>11s} {'-':>15s}  N/A: {reason.split(': ', 1)[-1]}")
            continue
        unit = compute_unit(problem, rung, gpu)
        compute_ms = flops / (peak[unit] * 1e12) * 1e3
        ms, bound = max((compute_ms, unit), (memory_ms, "DRAM"))
        how = rung.fallback_note(gpu) or "as on any GPU"
        lines.append(f"{rung.label:24s} {bound:13s} {ms:11.3f} {flops / ms / 1e9:15.1f}  {how}")
    return "\n".join(lines)
