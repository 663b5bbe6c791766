"""Small helpers the notebooks call: show a rung's source, the diff from the previous rung,
and the SASS signature table."""
from __future__ import annotations

import collections
import difflib
import functools
import inspect
from pathlib import Path

from ladder import results, sass

ROOT = Path(__file__).resolve().parent.parent


def _header_and_body(path: str) -> tuple[list[str], list[str]]:
    """A kernel file's leading comment block (its idea, prediction and SASS signature, which the lesson's
    prose, prediction table and SASS table give) and the code after it."""
    lines = (ROOT / path).read_text().splitlines()
    start = 0
    while start < len(lines) and (lines[start].startswith("//") or not lines[start].strip()):
        start += 1
    return lines[:start], lines[start:]


def show_source(path: str, off: set[str] = frozenset()) -> None:
    """A kernel file's code, after its header comment (a student reads the idea in the lesson's prose); `off`: the
    macros the file leaves off (switched_off), whose `#if NAME ... #else` versions of its code are folded."""
    header, body = _header_and_body(path)
    note = f"  (its {len(header)}-line header comment left out: the lesson's prose says it)" if header else ""
    print(f"// {path}{note}\n" + "\n".join(_folded(body, off, path)))


def _unified_diff(old: list[str], new: list[str], before: str, after: str, context: int = 2) -> list[str]:
    """A unified diff that ignores changes of indentation alone: code that a rung wraps in a new loop reads as
    context (indented as it is now), not as removed and added again."""
    matcher = difflib.SequenceMatcher(None, [line.strip() for line in old], [line.strip() for line in new],
                                      autojunk=False)
    lines = [f"--- {before}", f"+++ {after}"]
    for group in matcher.get_grouped_opcodes(context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        lines.append(f"@@ -{i1 + 1},{i2 - i1} +{j1 + 1},{j2 - j1} @@")
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                lines += [" " + line for line in new[b1:b2]]
            else:
                lines += ["-" + line for line in old[a1:a2]] + ["+" + line for line in new[b1:b2]]
    return lines


def show_diff(before: str, after: str, off: set[str] = frozenset()) -> None:
    """The diff between two rungs' code (header comments left out): the one idea the second rung adds.
    Where a rung rewrites more than it keeps, the diff would be longer than the file: the file instead (`off` as
    show_source's)."""
    old, new = _header_and_body(before)[1], _folded(_header_and_body(after)[1], off, after)
    diff = _unified_diff(old, new, before, after)
    if len(diff) > len(new):
        show_source(after, off)
    else:
        print("\n".join(diff))


def show_declarations(path: str) -> None:
    """What a header of helpers offers: each top-level declaration with the comment above it, bodies elided."""
    shown, depth = [], 0
    for line in _header_and_body(path)[1]:
        opens = line.count("{") - line.count("}")
        if depth == 0 and line.strip():
            shown.append(line.rstrip() + (" ... }" if opens > 0 else ""))
        depth += opens
    print(f"// {path}: its declarations (bodies left out)\n" + "\n".join(shown))


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
    if rung.needs not in ("tensor_cores", "wgmma", "tma"):   # the TMA rungs feed wgmma
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


# ---- The attention lessons (04a and 04b CUDA, 04c Triton): what their cells print, kept out of the notebooks ----

# Passes over the B·H·S² fp32 score matrix, counted in the kernels (the same in CUDA and Triton).
SCORE_PASSES = {"1_naive": dict(writes=2, reads=4), "2_coalesced": dict(writes=2, reads=3)}
ATTENTION_FAMILIES = {"1_naive": "rung 1 (materialized)", "2_coalesced": "rung 2 (materialized)",
                      "3_fused": "rungs 3-6, SDPA (fused)"}


def attention_traffic_bytes(name: str, shape: tuple) -> float:
    """DRAM bytes an attention rung named `name` moves if every pass streams its operands once: Q, K, V, O,
    plus each pass over the score matrix (rungs 1-2); the fused rungs and SDPA move Q, K, V and O only."""
    import kernels.attention as at
    B, H, S, D, _ = shape
    p = SCORE_PASSES.get(name)
    return at.min_bytes(shape) + (4 * B * H * S * S * (p["writes"] + p["reads"]) if p else 0)


def _shape_name(shape: tuple) -> str:
    return f"D{shape[3]}" + (" causal" if shape[4] else "")


def attention_fits(gpu, shape: tuple) -> bool:
    """Can `gpu` check a rung at `shape`? The fp32 math reference holds two S×S matrices, rungs 1-2 one."""
    import kernels.attention as at
    return gpu is None or 3 * at.workspace_bytes("triton:1_naive", shape) < gpu.memory_bytes


def attention_count(shapes: list[tuple], ceil: dict, source: str) -> str:
    """Count first: per family, the bytes it moves, its intensity at each shape and the roof that bounds it on
    the unit it computes with (materialized and rung 3: CUDA cores; rungs 4-6: tensor cores)."""
    import kernels.attention as at
    from ladder import roofline
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


_SHOWN_INCLUDES: set = set()
# The lesson that teaches each shared header of kernels/cuda/matmul/ that other ladders include.
BUILDING_BLOCKS = {"tensor_core.cuh": "02a", "tma.cuh": "02b", "cluster.cuh": "02c"}


def _quoted_includes(path: str) -> list[str]:
    """The files `path` (relative to the repository) includes with #include "...", relative to the repository."""
    import re
    here = (ROOT / path).parent
    return [str((here / name).resolve().relative_to(ROOT))
            for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', (ROOT / path).read_text(), re.M)]


def _include_chain(path: str) -> list[str]:
    """Every file `path` includes with #include "...", directly or through another, relative to the repository."""
    chain, todo = [], _quoted_includes(path)
    while todo:
        name = todo.pop(0)
        if name not in chain:
            chain.append(name)
            todo += _quoted_includes(name)
    return chain


def _directive(line: str) -> tuple[str, str]:
    """('if', condition), ('ifndef', name), ('endif', '') ... of a preprocessor line; ('', '') for code."""
    import re
    m = re.match(r"\s*#\s*(\w+)\s*(.*)", line)
    return (m.group(1), m.group(2).split("//")[0].strip()) if m else ("", "")


def _if_blocks(lines: list[str]) -> list[tuple[int, int | None, int]]:
    """(its #if line, its own #else or #elif line or None, its #endif line) of each #if/#ifdef/#ifndef block of
    `lines`, nested ones included, outermost first."""
    stack, found = [], []
    for i, line in enumerate(lines):
        kind = _directive(line)[0]
        if kind in ("if", "ifdef", "ifndef"):
            stack.append([i, None])
        elif kind in ("else", "elif") and stack and stack[-1][1] is None:
            stack[-1][1] = i
        elif kind == "endif" and stack:
            start, other = stack.pop()
            found.append((start, other, i))
    return sorted(found)


def _bare_if(line: str) -> str | None:
    """NAME of an `#if NAME` line (a macro tested alone), else None."""
    import re
    kind, condition = _directive(line)
    return condition if kind == "if" and re.fullmatch(r"\w+", condition) else None


def switched_off(path: str) -> set[str]:
    """The macros rung file `path` (its includes inlined) tests alone (`#if NAME`) and leaves off: never #defined,
    or #defined as 0 first (the preprocessor reads both as 0): the switches of later rungs that include it."""
    import re

    from ladder import cuda
    first: dict[str, str] = {}
    for name, value in re.findall(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]*(\S*)", cuda.source(ROOT / path), re.M):
        first.setdefault(name, value)
    tested = {name for line in cuda.source(ROOT / path).splitlines() if (name := _bare_if(line))}
    return {name for name in tested if first.get(name, "0") == "0"}


def _defined_by(path: str, name: str) -> str:
    """The rung file beside `path` that #defines `name` ("10_intra_overlap.cu"), or "a later rung"."""
    import re
    for other in sorted((ROOT / path).parent.glob("*.cu")):
        if re.search(rf"^\s*#\s*define\s+{name}\b", other.read_text(), re.M):
            return other.name
    return "a later rung"


def _later_directives(lines: list[str], off: set[str]) -> set[int]:
    """The lines of `lines` that only a later rung (its macros `off`) reads, around code the earlier rungs compile:
    the #if and #endif of each `#if !NAME ... #endif` block (code the later rung drops) and each `#ifndef NAME`
    default of one."""
    hidden = set()
    for start, other, end in _if_blocks(lines):
        kind, condition = _directive(lines[start])
        if other is None and kind == "if" and condition.startswith("!") and condition[1:].strip() in off:
            hidden.update((start, end))
        elif kind == "ifndef" and condition in off and end == start + 2:
            hidden.update(range(start, end + 1))
    return hidden


def _folded(lines: list[str], off: set[str], path: str) -> list[str]:
    """`lines` with the code a later rung switches on folded to one line, which that rung's section shows: the
    first version of each `#if NAME ... #else` block whose NAME is `off`, and each `#if NAME ... #endif` block (no
    #else: code the later rung adds) whole. An `#if !NAME ... #endif` block (code the later rung drops) shows its
    lines without the two directives, as the earlier rungs compile them; an `#ifndef NAME` default is left out."""
    if not off:
        return lines
    folds, covered = [], -1
    for start, other, end in _if_blocks(lines):   # outermost first; a block inside a folded one goes with it
        if start > covered and _bare_if(lines[start]) in off and (other is None or other > start + 1):
            folds.append((start, other, end))
            covered = end if other is None else other
    hidden = _later_directives(lines, off)
    out = [None if i in hidden else line for i, line in enumerate(lines)]
    for start, other, end in reversed(folds):
        name, first = _bare_if(lines[start]), lines[start + 1]
        stop = other if other is not None else end
        count = stop - start - 1
        note = (f"{first[:len(first) - len(first.lstrip())]}// ... {count} line{'s' * (count > 1)} of "
                f"{_defined_by(path, name)} ({name})")
        if other is not None:
            out[start + 1:other] = [note]
        else:
            out[start:stop + 1] = [note]
    return [line for line in out if line is not None]


def switched_on(path: str, macros: set[str], context: int = 1, off: set[str] = frozenset()) -> list[str]:
    """The lines of rung file `path` (its header comment left out) that the #defines `macros` of a rung including
    it change: every #if/#ifdef block whose condition names one of them, and every other line whose code reads
    one; an `#ifndef NAME` default of one of them is left out (the rung replaces it). An `#if NAME ... #else`
    block with NAME among `macros` shows its first version, the #else one (the earlier rungs') folded to one line.
    `off`: macros the rung leaves off (switched_off): their `#if NAME` versions are not what it compiles, left out
    (an #else's lines kept as code), and so are the directives around code they drop (_later_directives).
    `context` lines of the file around each, "..." between runs that are not adjacent."""
    import re
    lines = _header_and_body(path)[1]
    hidden = _later_directives(lines, off)
    notes: dict[int, str] = {}
    for start, other, end in _if_blocks(lines):
        name = _bare_if(lines[start])
        if name in off:    # this rung compiles the #else version (if any), as plain code
            hidden.update(range(start, (other if other is not None else end) + 1), [end])
        elif name in macros and other is not None and end > other + 1:
            hidden.update(range(other + 1, end))
            indent = lines[other + 1][:len(lines[other + 1]) - len(lines[other + 1].lstrip())]
            count = end - other - 1
            notes[other + 1] = (f"{indent}// ... {count} line{'s' * (count > 1)} without {name}: the earlier rungs' "
                                "version")
    kept = [i for i in range(len(lines)) if i not in hidden or i in notes]
    lines = [notes.get(i, lines[i]) for i in kept]
    names = re.compile(r"\b(" + "|".join(map(re.escape, sorted(macros))) + r")\b") if macros else None
    shown, skipped, i = set(), set(), 0
    while names and i < len(lines):
        kind, condition = _directive(lines[i])
        if kind in ("if", "ifdef", "ifndef", "elif"):
            depth, end = 0, i
            for end in range(i, len(lines)):
                k = _directive(lines[end])[0]
                depth += (k in ("if", "ifdef", "ifndef")) - (k == "endif")
                if depth == 0:
                    break
            if names.search(condition):
                (skipped if kind == "ifndef" else shown).update(range(i, end + 1))
                i = end + 1
                continue
        elif names.search(lines[i].split("//")[0]):
            shown.add(i)
        i += 1
    around = {j for i in shown for j in range(i - context, i + context + 1)
              if 0 <= j < len(lines) and j not in skipped}
    out, last = [], None
    for j in sorted(around):
        if last is not None and j != last + 1:
            out.append("    ...")
        out.append(lines[j])
        last = j
    return out


def _show_switched_on(source: str) -> None:
    """For a rung file that #defines macros and includes an earlier rung's file: what those defines change in
    the files it includes (the earlier rungs' code, shown above, is not repeated; a later rung's, off here, is
    left out)."""
    import re
    macros = set(re.findall(r"^\s*#\s*define\s+(\w+)", "\n".join(_header_and_body(source)[1]), re.M))
    off = switched_off(source)
    chain, todo = [], [p for p in _quoted_includes(source) if p.endswith(".cu")]
    while todo:
        path = todo.pop(0)
        chain.append(path)
        todo += [p for p in _quoted_includes(path) if p.endswith(".cu") and p not in chain]
    for path in chain:
        changed = switched_on(path, macros, off=off)
        if macros and changed:
            print(f"\n// the lines of {path} that read {', '.join(sorted(macros))}: "
                  "what this rung's defines change there")
            print("\n".join(changed))
    # a switch no rung file reads (rung 11's FAST_EXP2: `#if NAME` in a shared header): shown there, with the
    # function around it
    unread = {m for m in macros if not any(switched_on(path, {m}, off=off) for path in chain)}
    for path in dict.fromkeys(h for p in [source, *chain] for h in _quoted_includes(p) if h.endswith(".cuh")):
        switches = unread & {name for line in (ROOT / path).read_text().splitlines() if (name := _bare_if(line))}
        if switches:
            print(f"\n// the lines of {path} that read {', '.join(sorted(switches))}: what this rung's defines "
                  "change there")
            print("\n".join(switched_on(path, switches, context=4, off=off)))


def show_cuda_rung(problem, number: int) -> None:
    """CUDA rung `number` of `problem`: its diff from the CUDA rung before when that is shorter than the file,
    else the file; for a rung that #defines macros and includes an earlier rung's file, the lines those defines
    change there; then the headers beside it that it includes, each once per session."""
    from ladder import problems
    cuda = [r for r in problem.rungs if r.backend == "cuda"]
    mine = [r for r in cuda if r.name.split("_")[0] == str(number)]
    if not mine:
        print(f"no CUDA rung {number} in {problem.name} yet")
    try:
        ladder = [r for r in problems.get(problem.name).rungs if r.backend == "cuda"]
    except problems.UnknownName:   # a problem made for one lesson (lesson.backward_problem): no earlier lessons
        ladder = cuda
    # the rungs before this lesson's (an earlier lesson's): a header one of them includes was shown with it
    earlier = ladder[:ladder.index(cuda[0])] if cuda and cuda[0] in ladder else []

    def shown_with(path: Path):
        return next((r for r in earlier if str(path) in _include_chain(r.source)), None)

    def includes(source: str) -> None:
        here = (ROOT / source).parent
        for name in _quoted_includes(source):
            path = Path(name)
            if path.suffix == ".cu" or path in _SHOWN_INCLUDES:   # a rung file: its diff was shown
                continue
            _SHOWN_INCLUDES.add(path)
            if (ROOT / path).parent == here and shown_with(path):
                print(f"// {source} includes {path} (its declarations are shown with rung {shown_with(path).name}, "
                      "in an earlier lesson)\n")
            elif (ROOT / path).parent == here:
                print(f"// ===== {path}, included by {source}\n")
                show_declarations(str(path))
                includes(str(path))
            else:
                lesson_of = BUILDING_BLOCKS.get(path.name, "02a")
                print(f"// {source} includes {path} (lesson {lesson_of}'s building blocks)\n")

    for rung in mine:
        i = cuda.index(rung)
        off = switched_off(rung.source)   # later rungs' switches: their versions of this file's code are folded
        if i:
            show_diff(cuda[i - 1].source, rung.source, off)
        else:
            show_source(rung.source, off)
        _show_switched_on(rung.source)
        includes(rung.source)


def search_summary(reports) -> str:
    """One line per autotuning search: its shape, how many configurations it timed and pruned, the winner."""
    from ladder.autotune import format_config
    lines = []
    for r in reports:
        timing = f"{r.best_ms:.3f} ms" if r.timed else "not timed"
        lines.append(f"{r.tuner:18s} {_shape_name(tuple(r.shape)):11s} timed {len(r.timed):2d}, pruned {len(r.pruned):2d}: "
                     f"{format_config(r.best)}  {timing}")
    from ladder.autotune import fold_reasons
    reasons = fold_reasons([p["reason"] for r in reports for p in r.pruned])
    lines += [f"  pruned {k:3d} in all: {reason}" for reason, k in sorted(reasons.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines)


def memory_check(problem, labels: list[str], sizes=(1024, 2048, 4096), bh: tuple[int, int] = (1, 4)) -> str:
    """On a GPU: what each rung's call allocates beyond its inputs and output (the caching allocator's peak)
    against the model `workspace_bytes`, at (B, H, D) = (*bh, 64) for each S; summarized, a line per miss."""
    import torch

    import kernels.attention as at
    from ladder import runner
    from ladder.world import WORLD
    if not WORLD.gpu:
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


def _materialized_triton(ta) -> dict:
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
    """The defines kernels/attention.py compiles CUDA attention rung `name` with at `head_dim` where they are fixed:
    rung 3's tiles (FUSED_TILES), rungs 7-10's key tile and stages (their launch in HOPPER); {} for rungs 4-6
    (rung 6's are searched: the files' defaults)."""
    import kernels.attention as at
    if name in at.HOPPER:
        return at.hopper_launch(name, head_dim)[0]
    return dict({"3_fused": at.FUSED_TILES}.get(name, {}).get(head_dim, {}))


def recorded_winner(tuner: str, head_dim: int, causal: int = 0) -> dict | None:
    """The configuration a recorded search of `tuner` (e.g. "triton:7_tma") chose at S 4096 and `head_dim`."""
    from ladder import autotune
    return next((r.best for r in autotune.recorded_reports() if r.tuner == tuner
                 and tuple(r.shape)[2:] == (4096, head_dim, causal)), None)


def attention_sass(rung, arch: str, head_dim: int = 64, config: dict | None = None):
    """The SASS of an attention rung at `head_dim`, built as its launcher builds it on a GPU (CUDA with NVRTC, the
    launcher's tiles where they are fixed: cuda_attention_tiles; Triton with triton.compile as at the headline
    shapes); None for the torch rungs, and for Triton's searched rungs unless given the `config` to build (rung 7's
    TMA kernel; rung 6 is rung 5's kernel)."""
    from kernels.triton import attention as ta
    if rung.backend == "cuda":
        return sass.cuda_sass(f"attention/{rung.name}.cu", arch,
                              dict(HEAD_DIM=head_dim, **cuda_attention_tiles(rung.name, head_dim)))
    if rung.backend == "triton" and rung.name == "7_tma":
        return ta.tma_sass(config, arch, head_dim) if config else None
    materialized = _materialized_triton(ta)
    if rung.name in materialized:
        parts = [sass.triton_sass(kernel, sig, const, arch, tuple(a for a in sig if a.endswith("_ptr") or a == "S"),
                                  num_warps=w) for kernel, sig, const, w in materialized[rung.name]]
        return sass.Sass(arch, {name: body for p in parts for name, body in p.functions.items()})
    if rung.backend == "triton" and rung.name in ta.GPU_TILES:
        return sass.triton_sass(**ta.flash_sass_case(rung.name, head_dim=head_dim), arch=arch)
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


def refill_barriers(head_dim: int = 128, families=("BAR.SYNC", "BAR.ARV", "HGMMA", "UTMALDG")) -> str:
    """Triton's rung 7 at `head_dim` with its recorded search's winner (two warpgroups at D128), compiled here for
    sm_90a as Triton compiles it and through ladder/ptx.py's pass (tma's default): each family's count in the SASS.
    The counts move with the Triton version compiling it, so the lesson's cell prints them unchecked."""
    from kernels.triton import attention as ta
    config = recorded_winner("triton:7_tma", head_dim)
    as_compiled, through_pass = (ta.tma_sass(config, "sm_90a", head_dim, split_refills=split) for split in (False, True))
    tile = f"{config['BLOCK_M']}x{config['BLOCK_N']}, {config['num_warps']} warps"
    rows = [(f"rung 7, D{head_dim}, {tile}", families),
            ("as compiled (split_refills=False)", [as_compiled.count(f) for f in families]),
            ("through ladder/ptx.py (default)", [through_pass.count(f) for f in families])]
    return "\n".join(f"{name:38s}" + "".join(f"{c:>9}" for c in cells) for name, cells in rows)


# ---- Lesson 04f (attention on Hopper, rung 11: the softmax's instructions): what its cells print ----

# The softmax's opcodes, as the SASS names them (F2FP: two fp32 rounded into a half2 of P; FSETP and FMUL: exp2f's
# range fix-up besides the rescales).
SOFTMAX_OPCODES = ("FFMA", "MUFU.EX2", "FMNMX", "FADD", "F2FP", "FSETP", "FMUL")


@functools.lru_cache(maxsize=None)
def softmax_instruction_mix(names=("10_intra_overlap", "11_fast_exp2"), head_dim: int = 64) -> dict:
    """Per CUDA attention rung in `names` (rungs 10-11: two copies of the softmax, the first tile's and the loop's,
    each BLOCK_N / 2 scores a thread), its SASS's instructions of each SOFTMAX_OPCODES family per score (count /
    BLOCK_N), and under "kernel" the kernel's whole instruction count (code, not instructions executed). Compiled
    once per (names, D): lesson 04f's table and picture read the same SASS; do not modify the result."""
    import kernels.attention as at
    mix = {}
    for name in names:
        s = attention_sass(at.PROBLEM.rung("cuda", name), "sm_90a", head_dim)
        per_score = cuda_attention_tiles(name, head_dim)["BLOCK_N"]
        mix[name] = {**{f: s.count(f) / per_score for f in SOFTMAX_OPCODES}, "kernel": sum(s.opcodes().values())}
    return mix


def softmax_instructions(names=("10_intra_overlap", "11_fast_exp2"), head_dims=(64, 128)) -> str:
    """softmax_instruction_mix as a table: a row per rung and D (not the kernel's total, which moves with the CUDA
    version compiling it)."""
    lines = [f"{'rung':18s}{'D':>4s}" + "".join(f"{f:>9s}" for f in SOFTMAX_OPCODES) + f"{'sum':>7s}"]
    for D in head_dims:
        for name, m in softmax_instruction_mix(names, D).items():
            lines.append(f"{name:18s}{D:4d}" + "".join(f"{m[f]:9.2f}" for f in SOFTMAX_OPCODES)
                         + f"{sum(m[f] for f in SOFTMAX_OPCODES):7.2f}")
    lines.append("(SASS for sm_90a with the launcher's tiles; each family's count / BLOCK_N: per score a consumer thread "
                 "owns)")
    return "\n".join(lines)


def path_to_next_issue(text: str) -> list[str]:
    """The opcodes a consumer warpgroup of rungs 10-14 runs in its loop (SASS `text`) between a tile's S landing
    (WARPGROUP.DEPBAR.LE gsb0, 0x1: all but the last group done) and its first HGMMA of the next tile's S, on an
    unmasked tile: a predicated branch forward inside the loop (over the mask's code) taken, the rest of the loop
    body in order, round the loop's back branch to its head."""
    import re
    ins = [(int(a, 16), bool(p), op, rest.replace(",", " ").split())
           for a, p, op, rest in re.findall(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)([^;]*);", text)]
    index = {a: i for i, (a, *_) in enumerate(ins)}
    land = next(i for i, x in enumerate(ins) if x[2] == "WARPGROUP.DEPBAR.LE" and x[3][-1] == "0x1")
    back = next(i for i in range(land, len(ins)) if ins[i][2] == "BRA" and int(ins[i][3][0], 16) < ins[land][0])
    path, i = [], land + 1
    while not ins[i][2].startswith("HGMMA"):
        address, predicated, op, operands = ins[i]
        path.append(op)
        if op == "BRA" and (i == back or predicated and address < int(operands[0], 16) <= ins[back][0]):
            i = index[int(operands[0], 16)]
        else:
            i += 1
    return path


@functools.lru_cache(maxsize=None)
def next_issue_paths(names=("13_persistent", "14_critical_path"), head_dim: int = 128) -> dict[str, list[str]]:
    """Per CUDA attention rung in `names`, path_to_next_issue of its SASS for sm_90a at `head_dim` with the
    launcher's tiles. Compiled once per (names, D): lesson 04f's table and picture read the same SASS; do not
    modify the result."""
    import kernels.attention as at
    return {name: path_to_next_issue(attention_sass(at.PROBLEM.rung("cuda", name), "sm_90a", head_dim).text)
            for name in names}


def critical_path(names=("13_persistent", "14_critical_path"), head_dims=(64, 128)) -> str:
    """Lesson 04f's rung 14 count: per rung and D, the instructions of path_to_next_issue (next_issue_paths) and of
    them the FMULs (the softmax's own and O's rescale) and MUFU.EX2s."""
    lines = [f"{'rung':18s}{'D':>4s}{'instructions':>14s}{'FMUL':>6s}{'MUFU.EX2':>10s}"]
    for D in head_dims:
        for name, path in next_issue_paths(tuple(names), D).items():
            lines.append(f"{name:18s}{D:4d}{len(path):14d}{path.count('FMUL'):6d}{path.count('MUFU.EX2'):10d}")
    lines.append("(SASS for sm_90a: a consumer warpgroup's loop from S landing to the next S's first HGMMA, "
                 "an unmasked tile)")
    return "\n".join(lines)


def query_block_fill(shapes: list[tuple], rows=(192, 128), block_n: int = 128) -> str:
    """Lesson 04f's rung 15 count: per shape (B, H, S, D, causal), the query blocks a head and the scores computed
    over those needed (kernels/attention.py, scores_computed) with blocks of each of `rows` queries."""
    import kernels.attention as at
    lines = [f"{'shape (B, H, S, D, causal)':28s}" + "".join(f"{f'blocks of {r}':>18s} {'computed':>11s}" for r in rows)]
    for shape in shapes:
        lines.append(f"{str(tuple(shape)):28s}" + "".join(
            f"{-(-shape[2] // r):18d} {at.scores_computed(shape, r, block_n) / at.scores_needed(shape):10.3f}x"
            for r in rows))
    lines.append(f"(computed: the scores a block's rows compute, each up to its last {block_n}-key tile, over those "
                 "attention needs)")
    return "\n".join(lines)


def search_steps(tuner: str = "cuda:15_autotuned") -> str:
    """Lesson 04f's rung 15 Why: per recorded search of `tuner` (kernels.attention.HOPPER_TUNERS), the winner and,
    timed in the same search on the same inputs, rung 14's configuration: the step the search made there."""
    import kernels.attention as at
    from ladder.autotune import format_config, recorded_reports
    lines = [f"{'shape (B, H, S, D, causal)':28s} {'winner':36s} {'ms':>7s} {'rung 14 ms':>11s} {'step':>6s}"]
    for r in recorded_reports():
        if r.tuner != tuner:
            continue
        own = next(t["ms"] for t in r.timed if t["config"] == at.rung14_config(r.shape[3]))
        lines.append(f"{str(tuple(r.shape)):28s} {format_config(r.best):36s} {r.best_ms:7.4f} {own:11.4f} "
                     f"{own / r.best_ms:5.3f}x")
    lines.append("(one search each: every configuration timed on the same inputs, L2 flushed; rung 14's is one of them)")
    return "\n".join(lines)


def persistent_gain(runs: list[dict], shapes: list[tuple], before: str = "12_three_consumers",
                    after: str = "13_persistent") -> str:
    """Lesson 04f's rung 13 Why: per shape (a sweep over S), the key tiles an item walks (S / BLOCK_N), the two
    rungs' recorded times (`runs`: a recording's rows, both rungs timed in its run) and the speed of `after` over
    `before`: a saving made once an item shrinks as items get longer."""
    import kernels.attention as at
    ms = {(r["rung"], tuple(r["shape"])): r["ms"] for r in runs if r.get("backend") == "cuda"}
    one, two = before.split("_")[0], after.split("_")[0]
    lines = [f"{'shape (B, H, S, D, causal)':28s} {'key tiles an item':>17s} {f'rung {one} ms':>11s} "
             f"{f'rung {two} ms':>11s} {f'{two} / {one} speed':>13s}"]
    for shape in shapes:
        if (before, shape) not in ms or (after, shape) not in ms:
            continue
        tiles = -(-shape[2] // at.hopper_launch(after, shape[3])[0]["BLOCK_N"])
        lines.append(f"{str(shape):28s} {tiles:17d} {ms[before, shape]:11.4f} {ms[after, shape]:11.4f} "
                     f"{ms[before, shape] / ms[after, shape]:12.3f}x")
    return "\n".join(lines)


# ---- Lesson 04e (attention on Hopper, CUDA rungs 7-10): what its cells print ----

# An sm_90 SM (H100, H200): what the blocks resident on it share.
SM90 = dict(registers=65536, shared_bytes=228 * 1024, reserved_per_block=1024, warps=64, blocks=32)


def hopper_attention_count(problem, shapes: list[tuple], roofs: dict, label: str) -> str:
    """Count first for the Hopper rungs: per shape the work, the fewest bytes, the intensity and the least time
    under the tensor-core roof the measure lines use (a cuBLAS matmul) and under wgmma's own ceiling (lesson 00's
    microbenchmark; that column left out where it was not measured)."""
    tc, wgmma, mma = roofs["fp16_tc_TFLOPs"], roofs.get("wgmma_TFLOPs"), roofs.get("mma_sync_TFLOPs")
    lines = [f"roofs ({label}): copy {roofs['copy_TBps']:.2f} TB/s; fp16 tensor cores {tc:.0f} TFLOP/s (a cuBLAS "
             "matmul: the roof of the measure lines' %)",
             "instruction ceilings: " + ", ".join(f"{name} {v:.0f} TFLOP/s" if v else f"{name} not measured"
                                                  for name, v in (("mma.sync", mma), ("wgmma", wgmma))),
             f"{'shape':>11s} {'GFLOP':>7s} {'Q,K,V,O MB':>11s} {'FLOP/B':>7s} {'least ms at ' + f'{tc:.0f}':>16s} "
             + (f"{'at ' + f'{wgmma:.0f}':>8s}" if wgmma else "")]
    from ladder.verdicts import shape_label
    for s in shapes:
        f = problem.flops(s)
        lines.append(f"{shape_label(problem, s):>11s} {f / 1e9:7.1f} {problem.min_bytes(s) / 1e6:11.0f} "
                     f"{problem.intensity(s):7.0f} {f / tc / 1e9:16.3f} "
                     + (f"{f / wgmma / 1e9:8.3f}" if wgmma else ""))
    return "\n".join(lines)


def setmaxnreg_split(text: str) -> tuple[int, int] | None:
    """(producer, consumer) registers a thread after setmaxnreg, read from a kernel's SASS (USETMAXREG's DEALLOC
    and TRY_ALLOC operands); None where the kernel moves none."""
    import re

    down = re.search(r"USETMAXREG\.DEALLOC\S*\s+(0x[0-9a-f]+)", text)
    up = re.search(r"USETMAXREG\.TRY_ALLOC\S*\s+\w+,\s*(0x[0-9a-f]+)", text)
    return (int(down.group(1), 16), int(up.group(1), 16)) if down and up else None


def hopper_attention_blocks(head_dims=(64, 128), sm: dict | None = None, names=None) -> str:
    """The Hopper rungs compiled here for sm_90a with the launcher's tiles (no GPU needed): per head dimension the
    key tile and stages, threads, registers a thread (the compiler's; setmaxnreg's split after it), shared memory a
    block, and so how many blocks an SM holds and what limits it, the consumer warps an SM runs and the queries each
    K/V tile the TMA brings serves (a block's). names: only these rungs (default: every Hopper rung)."""
    import kernels.attention as at
    from ladder import cuda
    sm = sm or SM90
    lines = [f"{'rung':24s} {'D':>4s} {'keys':>5s} {'stages':>6s} {'threads':>7s} {'registers':>12s} {'KiB':>5s} "
             f"{'blocks/SM':>9s}  {'limited by':26s} {'consumer warps/SM':>17s} {'queries/tile':>12s}"]
    for name in names or at.HOPPER:
        path = f"attention/{name}.cu"
        for d in head_dims:
            tiles, rows, threads = at.hopper_launch(name, d)
            consumers = rows // 64   # a consumer warpgroup's 64 queries
            cubin = cuda.compile_cubin(path, "sm_90a", tuple(sorted(dict(HEAD_DIM=d, **tiles).items())))
            use, split = sass.resource_usage(cubin), setmaxnreg_split(sass.disassemble(cubin, "sm_90a").text)
            smem = at.wgmma_tma_shared_bytes(d, tiles, rows) + use["shared_bytes"]
            per_warp = -(-use["registers"] * 32 // 256) * 256   # registers go to a warp in units of 256
            limits = {"registers": sm["registers"] // (threads // 32 * per_warp),
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


def _python_code_lines(obj) -> int:
    """Lines of a function's code, neither blank nor comment, its docstring left out."""
    import ast
    import textwrap
    text = textwrap.dedent(code(obj))
    node = ast.parse(text).body[0]
    doc = node.body[0] if node.body and isinstance(node.body[0], ast.Expr) and isinstance(
        getattr(node.body[0], "value", None), ast.Constant) and isinstance(node.body[0].value.value, str) else None
    kept = text.splitlines()
    if doc is not None:
        del kept[doc.lineno - 1:doc.end_lineno]
    return lines_of_code("\n".join(kept))


def compiled_lines(lines: list[str], off: set[str]) -> list[str]:
    """`lines` without the versions of code a rung does not compile: the first version of each `#if NAME` block
    whose NAME is `off` (with its directives), the #else version of one whose NAME is on (its #if and #endif kept,
    as a block's the rung compiles)."""
    dropped: set[int] = set()
    for start, other, end in _if_blocks(lines):
        name = _bare_if(lines[start])
        if name is None:
            continue
        if name in off:
            dropped.update(range(start, (other if other is not None else end) + 1), [end])
        elif other is not None:
            dropped.update(range(other, end))
    return [line for i, line in enumerate(lines) if i not in dropped]


def attention_kernel_lines(label: str) -> tuple[int, int, str]:
    """(lines of the rung's own code, lines of the shared code it also runs, what was counted) for an attention
    rung: CUDA, its .cu file and the earlier rungs' files it includes, then the headers (.cuh) they include, each
    once, the versions of code a later rung switches on left out (compiled_lines); Triton, its @triton.jit kernel,
    then `attend` and `key_passes` (the loop and its split, which rungs 3-7 share); docstrings, comments, blank lines and launchers not counted."""
    from ladder import cuda
    backend, name = label.split(":", 1)
    if backend == "cuda":
        files = cuda._expand(f"attention/{name}.cu")[1]
        own = [f for f in files if f.suffix == ".cu"]
        shared = [f for f in files if f.suffix != ".cu"]
        off = switched_off(f"kernels/cuda/attention/{name}.cu")
        count = lambda fs: sum(lines_of_code("\n".join(compiled_lines(f.read_text().splitlines(), off)), "//")  # noqa: E731
                               for f in fs)
        return count(own), count(shared), " + ".join(f.name for f in own) + "; " + " + ".join(f.name for f in shared)
    from kernels.triton import attention as ta
    kernel = ta.flash_tma_kernel if name == "7_tma" else ta.flash_kernel
    return (_python_code_lines(kernel), _python_code_lines(ta.attend) + _python_code_lines(ta.key_passes),
            f"{kernel.__name__}; attend + key_passes")


def attention_lines_vs_speed(rows: list[dict], shapes: list[tuple], labels: list[str],
                             anchor: str = "torch:sdpa") -> str:
    """Each rung's lines of kernel code (attention_kernel_lines) beside its TFLOP/s at each shape in `rows` (a
    lesson's measured rows, or the recording's) and its speed as a fraction of `anchor`'s in the same rows."""
    from ladder.verdicts import shape_label
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


def attention_checks(problem) -> str:
    """runner.format_checks; in the interpreter (no GPU) the slow Triton rungs at one small ragged S instead of
    the usual three (rung 1 runs a scalar program per score: ~40 s there)."""
    import dataclasses

    from ladder import runner
    from ladder.world import WORLD
    if WORLD.gpu:
        return runner.format_checks(problem)
    small = dataclasses.replace(problem, interpret_shapes=[(1, 1, 9, 64, 1)])
    return "\n".join(runner.format_checks(small if r.slow and r.backend == "triton" else problem, [r])
                     for r in problem.rungs)


def measured_intensity(profiles: list[dict], labels: list[str], problem) -> str:
    """FLOP per DRAM byte each rung really moved (ncu), at its profiled shape."""
    cells = []
    for p in profiles:
        label = f"{p['backend']}:{p['rung']}"
        if label in labels:
            m = p["metrics"]
            cells.append(f"{label} {problem.flops(tuple(p['shape'])) / (m['dram_bytes_read'] + m['dram_bytes_write']):,.0f}")
    return "FLOP per DRAM byte (ncu): " + (", ".join(cells) or "not profiled")


def opcode_counts(problem, labels: list[str], arch: str, head_dims=(64, 128), families=("FFMA", "LDS", "LDL", "STL")) -> str:
    """How many of each opcode family the SASS of each rung holds (static counts), per head dimension."""
    lines = [f"{arch} SASS, instructions in the code (not executed counts)"]
    for label in labels:
        rung = problem.rung(*label.split(":"))
        for d in head_dims:
            s = attention_sass(rung, arch, d)
            lines.append(f"  {label:16s} D{d:<4d}" + "".join(f"{f:>6s} {s.count(f):5d}" for f in families))
    return "\n".join(lines)


def bank_conflicts_per_fma(profiles: list[dict], labels: list[str], problem) -> str:
    """Shared-memory bank conflicts (ncu) per warp-wide FMA the two products need (FLOPs / 2 / 32 lanes)."""
    lines = []
    for p in profiles:
        label = f"{p['backend']}:{p['rung']}"
        if label in labels:
            fmas = problem.flops(tuple(p["shape"])) / 2 / 32
            lines.append(f"{label:16s} {p['metrics']['shared_bank_conflicts']:.2e} bank conflicts, "
                         f"{p['metrics']['shared_bank_conflicts'] / fmas:.3f} per warp-wide FMA")
    return "\n".join(lines)


# ---- Lesson 03 (Triton matmul): what its cells print, kept out of the notebook ----

def matmul_lines_vs_speed(rows: list[dict], shape: tuple = (4096, 4096, 4096)) -> str:
    """Lines of code (neither blank nor comment) of what each matmul rung runs, beside its TFLOP/s at `shape`:
    the CUDA rung's file (rungs 4-12 also include tensor_core.cuh, rungs 8-12 tma.cuh, rungs 10-12 cluster.cuh, each
    counted once; rung 6 includes rung 5's file, rung 12 rung 11's) and the Triton rung's kernel functions (rungs 3-5 share one kernel and its helpers). Launchers not counted."""
    import kernels.matmul as mm
    from kernels.triton import matmul as tm
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
             f"cluster.cuh (rungs 10-12): {cluster}; rungs 6 and 12 add a line or a few to rung 5's and 11's files; "
             f"TFLOP/s at {'x'.join(map(str, shape))}",
             f"{'CUDA rung':28s} {'lines':>5s} {'TFLOP/s':>8s}   {'Triton rung':18s} {'lines':>5s} {'TFLOP/s':>8s}"]
    for c, t in twins.items():
        right = f"{t:18s} {triton[t]:5d} {speed('triton:' + t)}" if t and c[1] != "b" else ""
        lines.append(f"{c:28s} {cuda[c]:5d} {speed('cuda:' + c)}   {right}")
    lines.append(f"{'torch:cublas':28s} {'':5s} {speed('torch:cublas')}")
    return "\n".join(lines)


def profiled_kernels(recording, problem: str, width: int = 34) -> str:
    """Per recorded profile of `problem`: DRAM MB read and written (ncu) and the kernels that ran, short names."""
    lines = [f"{'variant':18s} {'DRAM read MB':>13s} {'written MB':>11s}  kernels (ncu)"]
    for p in recording.profiles(problem):
        m = p["metrics"]
        names = ", ".join(k.split("(")[0].split("<")[0][:width] for k in m.get("kernels", []))
        lines.append(f"{p['backend'] + ':' + p['rung']:18s} {m['dram_bytes_read'] / 1e6:13.0f} "
                     f"{m['dram_bytes_write'] / 1e6:11.0f}  {names}")
    shape = recording.profiles(problem)[0]["shape"] if recording.profiles(problem) else None
    lines.append(f"(ncu at {'x'.join(map(str, shape)) if shape else '-'}, {recording.label})")
    return "\n".join(lines)


def compare_schedules(sizes: tuple = (4096, 8192), rounds: int = 5) -> str:
    """Lesson 03's experiment (GPU only): rung 6's tile schedules (kernels.triton.matmul.schedules) against
    cuBLAS in interleaved rounds, each round starting one later (the clocks drift, ratios less so), every
    variant checked first; median TFLOP/s, x cuBLAS and the range of that ratio over the rounds."""
    import statistics
    import torch
    import kernels.matmul as mm
    from kernels.triton import matmul as tm
    from ladder import autotune
    from ladder.check import compare
    from ladder.timing import bench
    lines = []
    for n in sizes:
        a, b = mm.PROBLEM.make_inputs((n, n, n), "cuda", torch.Generator("cuda").manual_seed(1))
        out = torch.empty(n, n, dtype=torch.float16, device="cuda")
        tm.autotuned(a, b, out)  # rung 6's search at this shape, if it has not run yet
        config = tm.config_dict(tm.autotuned_kernel.best_config)
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


def wgmma_signatures(families: tuple = ("LDGSTS", "BAR", "UTMALDG", "SYNCS", "HGMMA", "USETMAXREG"),
                     rungs: tuple = ("7_wgmma", "8_tma_warp_specialized")) -> str:
    """The Hopper matmul rungs' opcode families side by side (sm_90a SASS, compiled here: no GPU needed)."""
    import kernels.matmul as mm
    configs = {"7_wgmma": mm.WGMMA, "8_tma_warp_specialized": mm.TMA_WS, "9_persistent": mm.PERSISTENT,
               "10_cluster_multicast": mm.CLUSTER_MULTICAST, "11_tma_store": mm.TMA_STORE,
               "12_autotuned": mm.HOPPER_DEFAULT}
    return signature_table({name: sass.cuda_sass(f"matmul/{name}.cu", "sm_90a", configs[name]) for name in rungs},
                           families)


# ---------------------------------------------------------------- lessons 02a-02c's tables

def roofs_summary(problem, roofs: dict, label: str, shape: tuple) -> str:
    """The roofs a matmul meets (copy, fp32, fp16 tensor cores), each compute roof's ridge point and the least
    time `shape` can take under it; then the two tensor-core instructions' own ceilings where measured (lesson
    00's microbenchmarks): what a rung on `mma.sync` or `wgmma` could reach at most."""
    from ladder import roofline
    lines = [f"roofs ({label}): copy {roofs['copy_TBps']:.2f} TB/s, fp32 {roofs['fp32_TFLOPs']:.0f} TFLOP/s, "
             f"fp16 tensor cores {roofs['fp16_tc_TFLOPs']:.0f} TFLOP/s"]
    for key in ("fp32_TFLOPs", "fp16_tc_TFLOPs"):
        best = problem.flops(shape) / (roofs[key] * 1e12) * 1e3
        lines.append(f"{roofline.ROOFS[key]:17s}: ridge point {roofline.ridge(roofs['copy_TBps'], roofs[key]):4.0f} "
                     f"FLOP/B; {'x'.join(map(str, shape))} at least {best:.3f} ms")
    if roofs.get("mma_sync_TFLOPs") and roofs.get("wgmma_TFLOPs"):
        lines.append(f"instruction ceilings: mma.sync {roofs['mma_sync_TFLOPs']:.0f} TFLOP/s, wgmma "
                     f"{roofs['wgmma_TFLOPs']:.0f} TFLOP/s ({roofs['wgmma_TFLOPs'] / roofs['mma_sync_TFLOPs']:.2f}x)")
    return "\n".join(lines)


def matmul_signatures_by_arch() -> str:
    """The CUDA matmul rungs' opcode families per architecture (rung 7 on sm_90a), compiled here."""
    import kernels.matmul as mm
    out = []
    for arch in sass.ARCHS:
        pipelined = dict(mm.TWO_STAGES) if arch == "sm_75" else dict(mm.PIPELINED)
        variants = {name: sass.cuda_sass(f"matmul/{name}.cu", arch, pipelined if name[0] in "56" else None)
                    for name in ("1_naive", "2_coalesced", "3_smem_tiled", "3b_register_blocked",
                                 "4_tensor_core", "5_pipelined", "6_autotuned")}
        if arch == "sm_90":
            variants["7_wgmma (sm_90a)"] = sass.cuda_sass("matmul/7_wgmma.cu", "sm_90a", mm.WGMMA)
        out += [arch, signature_table(variants)]
    return "\n".join(out)


def matmul_search_space() -> str:
    """CUDA rung 6's search space, and how many configurations the pruning keeps on an H100 and on a T4."""
    import kernels.matmul as mm
    from ladder import hardware
    h100 = _h100()
    t4 = hardware.GPU("Tesla T4", (7, 5), 40, 4 << 20, 64 << 10, 16 << 30, None)
    lines = [f"search space: {mm.SEARCH_SPACE}", f"{len(mm.TUNER.configs())} configurations before pruning"]
    lines += [f"{g.name}: {sum(1 for c in mm.TUNER.configs() if not mm.prune_reason(c, g))} kept" for g in (h100, t4)]
    return "\n".join(lines)


def _h100():
    """The H100 the search-space tables prune for (the GPU the lessons' recordings come from)."""
    from ladder import hardware
    return hardware.GPU("NVIDIA H100 80GB HBM3", (9, 0), 132, 50 << 20, 227 << 10, 80 << 30, None)


def _matmul_reports(gpu, tuner, shape: tuple) -> list:
    """`tuner`'s search at `shape`, run here where this GPU can run it (not emulated); else all its recorded ones."""
    import kernels.matmul as mm
    from ladder import autotune
    needs = "wgmma" if tuner is mm.HOPPER_TUNER else "tensor_cores"
    if gpu is not None and gpu.has(needs) and not gpu.emulated_on:
        return mm.tune([shape], tuner)
    return [r for r in autotune.recorded_reports() if r.problem == "matmul" and r.tuner == tuner.name]


def matmul_searches(gpu, shape: tuple = (4096, 4096, 4096), tuner=None) -> str:
    """CUDA rung 6's search (or `tuner`'s: kernels.matmul.HOPPER_TUNER, rung 12's) at `shape`, run here on a GPU
    that can run it; else the recorded searches."""
    import kernels.matmul as mm
    return "\n\n".join(r.summary() for r in _matmul_reports(gpu, tuner or mm.TUNER, shape))


def hopper_search_gain(gpu, shape: tuple) -> str:
    """At `shape`: rung 12's search (run here on a Hopper GPU, else the recorded one), its winner against rung 11's
    configuration timed in the same search, and the blocks of C each makes there against the GPU's SMs."""
    import kernels.matmul as mm
    from ladder import autotune
    report = next((r for r in _matmul_reports(gpu, mm.HOPPER_TUNER, shape) if tuple(r.shape) == tuple(shape)), None)
    if report is None:
        return f"no search of rung 12 at {'x'.join(map(str, shape))} recorded"
    sms = (gpu or datasheet_gpu(report.gpu)).sm_count
    rung_11 = next(t for t in report.timed if mm.hopper_config(t["config"]) == mm.HOPPER_DEFAULT)
    lines = [f"{'x'.join(map(str, shape))} ({'live' if gpu is not None and gpu.has('wgmma') else 'recorded'} "
             f"on {report.gpu}, {sms} SMs)"]
    for name, config, ms in (("the search's winner", report.best, report.best_ms),
                             ("rung 11's configuration", rung_11["config"], rung_11["ms"])):
        blocks = mm.hopper_grid(config, shape[0], shape[1], sms=1 << 30)  # of BM x BN, in whole clusters
        lines.append(f"  {name:24s} {autotune.format_config(config):52s} {ms:.4f} ms  "
                     f"{blocks} blocks of {config['BM']}x{config['BN']} = {blocks / sms:.2f} per SM")
    lines.append(f"  winner / rung 11's: {rung_11['ms'] / report.best_ms:.2f}x as fast")
    return "\n".join(lines)


def hopper_search_space() -> str:
    """CUDA rung 12's search space, what the pruning keeps on an H100, and each kept block of C: the most stages
    that fit, its shared memory, and how many blocks 4096^2 and 8192^2 of C hold (against the H100's 132 SMs)."""
    import kernels.matmul as mm
    h100 = _h100()
    kept = [c for c in mm.HOPPER_TUNER.configs() if not mm.hopper_prune_reason(c, h100)]
    lines = [f"search space: {mm.HOPPER_SEARCH_SPACE}",
             f"{len(mm.HOPPER_TUNER.configs())} configurations, {len(kept)} kept on an H100",
             f"{'BM x BN':>9s} {'stages':>7s} {'KiB (most stages)':>18s} {'blocks 4096^2':>14s} {'8192^2':>7s}"]
    for bm, bn in sorted({(c["BM"], c["BN"]) for c in kept}):
        stages = sorted({c["STAGES"] for c in kept if (c["BM"], c["BN"]) == (bm, bn)})
        most = min((c for c in kept if (c["BM"], c["BN"], c["STAGES"]) == (bm, bn, stages[-1])),
                   key=mm.hopper_shared_bytes)
        depth = f"{stages[0]}-{stages[-1]}" if len(stages) > 1 else str(stages[0])
        lines.append(f"{bm:>4d} x {bn:<3d} {depth:>7s} {mm.hopper_shared_bytes(most) // 1024:>18d} "
                     + "".join(f"{-(-n // bm) * -(-n // bn):>{w}d}" for n, w in ((4096, 15), (8192, 8))))
    return "\n".join(lines)


def hopper_choices(shape: tuple, gpu_slug: str | None = None) -> str:
    """Rung 12's recorded search at `shape`, at its winner's block of C: each ring depth, epilogue (the whole tile
    staged, or box by box) and cluster size it timed, the best over tile orders, against the winner; and what each
    cluster size puts in the SASS at the start and exit (compiled here): the cluster barrier and its fences."""
    import kernels.matmul as mm
    from ladder import autotune
    report = autotune.recorded_report(mm.HOPPER_TUNER.name, shape, gpu_slug)
    if report is None:
        return f"no search of rung 12 at {'x'.join(map(str, shape))} recorded"
    tile = (report.best["BM"], report.best["BN"])
    best: dict[tuple, float] = {}
    for t in report.timed:
        c = mm.hopper_config(t["config"])
        if (c["BM"], c["BN"]) == tile:
            key = (c["STAGES"], c["BOX_BY_BOX"], c["CLUSTER"])
            best[key] = min(best.get(key, t["ms"]), t["ms"])
    lines = [f"rung 12's search at {'x'.join(map(str, shape))}, blocks of {tile[0]}x{tile[1]} "
             f"(recorded on {report.gpu}); winner = 1.00",
             f"{'stages':>6s} {'C staged':>10s} {'cluster':>8s} {'ms':>8s} {'winner / this':>14s}"]
    fastest = min(best.values())
    for stages, box, cluster in sorted(best, key=lambda k: (-k[2], k[0], k[1])):
        ms = best[stages, box, cluster]
        lines.append(f"{stages:>6d} {'box by box' if box else 'whole tile':>10s} {cluster:>8d} {ms:>8.4f} "
                     f"{fastest / ms:>14.2f}")
    lines.append("the whole kernel's SASS (none of these in the k loop), per cluster size:")
    for cluster in (2, 1):
        code = sass.cuda_sass("matmul/12_autotuned.cu", "sm_90a", dict(report.best, CLUSTER=cluster, BOX_BY_BOX=0))
        lines.append(f"  {cluster}: " + ", ".join(f"{family} {code.count(family)}"
                                                  for family in ("UCGABAR_WAIT", "MEMBAR", "ERRBAR", "BAR.SYNC")))
    return "\n".join(lines)


def t4_floors(problem, rows: list[dict], label: str, rungs: dict, shape: tuple) -> str:
    """For each rung ({label: datasheet roof key}): the least time a T4 could take at `shape`, against the time
    measured (or recorded) here."""
    t4 = datasheet_gpu("T4").datasheet
    lines = []
    for rung, key in rungs.items():
        floor = problem.flops(shape) / (getattr(t4, key) * 1e12) * 1e3
        here = next(r["ms"] for r in rows if f"{r['backend']}:{r['rung']}" == rung and tuple(r["shape"]) == tuple(shape))
        lines.append(f"{rung}: a T4 needs at least {floor:.2f} ms at {'x'.join(map(str, shape))}, "
                     f"{floor / here:.1f}x the time ({label})")
    return "\n".join(lines)


# A student's reading pace (words a minute): technical prose and printed tables at 200 (general non-fiction
# is read at about 240), a kernel's code at half that; a figure takes half a minute.
PROSE_WPM, CODE_WPM, FIGURE_MINUTES = 200, 100, 0.5
_KERNEL_TEXT = ("show_source", "show_diff", "show_declarations", "show_cuda_rung", "show_code")


def reading_minutes(notebook) -> dict[str, float]:
    """How long a lesson takes to read, by part: its prose, the code cells, their printed text, the kernel text
    they print (sources and diffs) and the figures. `notebook`: a path or an nbformat notebook."""
    import re

    import nbformat
    nb = nbformat.read(str(notebook), 4) if isinstance(notebook, (str, Path)) else notebook
    words = {"prose": 0, "code": 0, "printed": 0, "kernel": 0}
    figures = 0
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            words["prose"] += len(re.sub(r"<!--.*?-->", "", cell.source, flags=re.S).split())
            continue
        if cell.cell_type != "code" or cell.source.startswith("# @title Colab"):  # the install cell: not read
            continue
        words["code"] += len(cell.source.split())
        kernel = any(name + "(" in cell.source for name in _KERNEL_TEXT)
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "image/png" in data or "image/svg+xml" in data:
                figures += 1
                continue
            text = output.get("text") or data.get("text/plain", "")
            words["kernel" if kernel else "printed"] += len("".join(text).split())
    minutes = {part: n / (CODE_WPM if part == "kernel" else PROSE_WPM) for part, n in words.items()}
    minutes["figures"] = figures * FIGURE_MINUTES
    minutes["total"] = sum(minutes.values())
    return minutes


# ------------------------------------------------------------- lesson 06: shipping a kernel

def host_cost_table(rows: list[dict]) -> str:
    """ladder.launch's rows: host µs per call of each of our calls beside its anchor's, timed in the same rounds."""
    lines = [f"{'op':12s} {'call':28s} {'host µs':>8s}  {'anchor':30s} {'host µs':>8s} {'× anchor':>8s}"]
    lines += [f"{r['op']:12s} {r['call']:28s} {r['us']:8.1f}  {r['anchor']:30s} {r['anchor_us']:8.1f} "
              f"{r['ratio']:8.2f}" for r in rows]
    return "\n".join(lines)


def launch_verdict(rows: list[dict], call: str = "ladder.ops.matmul", goal: float = 1.3) -> str:
    """Hit or miss: `call`'s host cost at the matmul shape against `goal` × torch.matmul's, same rounds."""
    r = next(r for r in rows if r["op"] == "matmul" and r["call"] == call)
    hit = r["ratio"] <= goal
    return (f"{call}: {r['us']:.1f} µs per call, torch.matmul {r['anchor_us']:.1f} µs: {r['ratio']:.2f}× "
            f"-> {'HIT' if hit else 'MISS'} (goal ≤ {goal}×)")


def grid_ratios(rows: list[dict]) -> dict[tuple, dict[str, float]]:
    """Per swept shape (a "shape_sweep" row set), × cuBLAS (cuBLAS's median over ours: over 1, ours is faster) of
    rung 6, of the best rung timed (6, 7 or 12) and of what ladder.ops.matmul launches there in an eager call on
    the recording's GPU (the dispatch table's pick of rung 6, rung 7 where it was timed, and cuBLAS: 1.0 where it
    picks cuBLAS)."""
    from ladder import dispatch
    found = {}
    for shape, entry in dispatch.DispatchTable.from_rows({}, rows).entries.items():
        t = entry.timings
        if dispatch.CUBLAS not in t or dispatch.RUNG6 not in t:
            continue
        cublas = t[dispatch.CUBLAS].ms
        best = min(t[label].ms for label in t if label != dispatch.CUBLAS)
        picked = entry.pick(dispatch.EAGER_CANDIDATES)
        found[shape] = {"rung 6": cublas / t[dispatch.RUNG6].ms, "best rung": cublas / best,
                        "the op": cublas / t[picked].ms}
    return found


def op_summary(rows: list[dict]) -> str:
    """Over the grid and the goal shapes: rung 6's median × cuBLAS (hit or miss against dispatch.GOAL), what the op
    launches in an eager call (the dispatch table's pick) and its own × cuBLAS there, and what it launches under
    torch.compile (no rung 7)."""
    import statistics

    from ladder import dispatch
    ratios = grid_ratios(rows)
    table = dispatch.DispatchTable.from_rows({}, rows)
    lines = []
    for name, shapes in (("grid", [s for s in dispatch.GRID if s in ratios]),
                         ("goal shapes", [s for s in dispatch.GOAL_SHAPES.values() if s in ratios])):
        six = statistics.median(ratios[s]["rung 6"] for s in shapes)
        op = [ratios[s]["the op"] for s in shapes]
        def launches(among) -> str:
            picks = collections.Counter(table.entries[s].pick(among) for s in shapes)
            return ", ".join(f"{label} at {picks[c]}" for c, label in (
                (dispatch.RUNG6, "rung 6"), (dispatch.RUNG7, "rung 7"), (dispatch.CUBLAS, "cuBLAS")) if c in among)
        lines += [f"{name} ({len(shapes)} shapes): rung 6 alone, median {six:.3f}x cuBLAS -> "
                  f"{'HIT' if six >= dispatch.GOAL else 'MISS'} (>= {dispatch.GOAL}x)",
                  f"  the op launches {launches(dispatch.EAGER_CANDIDATES)}: "
                  f"median {statistics.median(op):.3f}x, lowest {min(op):.3f}x, highest {max(op):.3f}x cuBLAS",
                  f"  under torch.compile: {launches(dispatch.OP_CANDIDATES)}"]
    return "\n".join(lines)


def stale_table_demo(gpu_name: str, changed: str = "triton", to: str = "0.0.0") -> str:
    """Write a dispatch table that this process's key would accept except for one version (`changed` -> `to`)
    into a scratch cache directory, and show what ladder.dispatch.load makes of it, then of the same table under
    this process's key, on this GPU (none: `gpu_name`'s datasheet). The real cache is left alone."""
    import tempfile
    from unittest import mock

    from ladder import dispatch, hardware
    gpu = hardware.detect() or datasheet_gpu(gpu_name)   # no GPU here: the recording's, as a model
    entry = dispatch.Entry((4096, 4096, 4096), {dispatch.CUBLAS: dispatch.Timed(None, 1.0)})
    mine = dispatch.process_key(gpu.slug)
    lines = [f"this process's key: {mine}"]
    with tempfile.TemporaryDirectory() as scratch, mock.patch.object(dispatch, "CACHE_DIR", Path(scratch)):
        for key in ({**mine, changed: to}, mine):
            dispatch.DispatchTable(key, {entry.shape: entry}).write(dispatch.cache_path(gpu.slug))
            loaded = dispatch.load(gpu)
            where = loaded.reason.replace(scratch, "<scratch>")
            lines.append(f"table keyed {changed} {key[changed]}: {'USED' if loaded.table else 'IGNORED'}: {where}")
    return "\n".join(lines)


def rung6_memory_instructions(arch: str = "sm_90") -> str:
    """Rung 6's loads and stores in its SASS for `arch` (compile only), specialized as Triton specializes a launch:
    with N (and every stride) a multiple of 16, and with N = 50257 (the vocabulary) while B's rows are padded to
    a multiple of 16. The mask on N must then hold over 8 neighbours for a 16-byte access, which Triton can prove
    only from N itself."""
    import re

    from kernels.triton import matmul as tm
    from ladder import sass
    signature = dict(a_ptr="*fp16", b_ptr="*fp16", c_ptr="*fp16", bias_ptr="*fp16", M="i32", N="i32", K="i32",
                     stride_am="i32", stride_ak="i32", stride_bk="i32", stride_bn="i32", stride_cm="i32",
                     stride_cn="i32")
    constexprs = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, BIAS_RELU=False, EVEN_K=True, FLATTEN=True,
                      BIAS_GELU=False, stride_ak=1, stride_bn=1, stride_cn=1, bias_ptr=None)
    aligned = ("a_ptr", "b_ptr", "c_ptr", "M", "K", "stride_am", "stride_bk")
    lines = [f"rung 6's SASS for {arch}, tile 128x256x64: memory instructions (static counts; .128: 16 bytes, "
             ".U16: one fp16)"]
    for case, divisible in (("N a multiple of 16      ", aligned + ("N", "stride_cm")),
                            ("N = 50257, B rows padded", aligned)):
        code = sass.triton_sass(tm.persistent_kernel, signature, constexprs, arch, divisible, num_warps=8)
        counts = collections.Counter(re.findall(r"\b((?:LDGSTS|LDG|STG)\.E[\.\w]*)", code.text))
        lines.append(f"  {case}  " + ", ".join(f"{op} {n}" for op, n in sorted(counts.items())))
    return "\n".join(lines)


def goal_tiles(rows: list[dict], sms: int) -> str:
    """At each goal shape (a "shape_sweep" row set), our fastest rung and its tile: how many tiles C has, in how
    many waves over the GPU's `sms` (a persistent grid deals them out the same way), how full the last wave is
    (the share of SM time a ragged last wave leaves unused: 1 - fill), and how many 64-deep K steps each tile
    takes (its pipeline fills and drains once per tile: fewer steps, more of its time in both)."""
    import math

    from ladder import dispatch
    by = {(tuple(r["shape"]), f"{r['backend']}:{r['rung']}"): r for r in rows if r.get("ms")}
    lines = [f"{'shape':24s} {'best of ours':24s} {'x cuBLAS':>8s} {'tile':>8s} {'tiles':>6s} {'waves':>6s} "
             f"{'SM time used':>12s} {'K steps':>7s}"]
    for name, shape in dispatch.GOAL_SHAPES.items():
        ours = [r for (s, label), r in by.items() if s == shape and label != dispatch.CUBLAS]
        if not ours or (shape, dispatch.CUBLAS) not in by:
            continue
        best = min(ours, key=lambda r: r["ms"])
        c = best["config"]
        bm, bn = c.get("BM", c.get("BLOCK_M")), c.get("BN", c.get("BLOCK_N"))
        M, N, K = shape
        tiles = math.ceil(M / bm) * math.ceil(N / bn)
        waves = math.ceil(tiles / sms)
        lines.append(f"{name:24s} {best['backend'] + ':' + best['rung']:24s} "
                     f"{by[(shape, dispatch.CUBLAS)]['ms'] / best['ms']:8.3f} {bm:>4d}x{bn:<3d} {tiles:6d} "
                     f"{tiles / sms:6.2f} {tiles / (waves * sms):12.0%} {math.ceil(K / 64):7d}")
    return "\n".join(lines)


def rung6_misses(rows: list[dict], sms: int, worst: int = 8) -> str:
    """The shapes where rung 6 lost most to cuBLAS (a "shape_sweep" row set): its tile, how many tiles C has
    against the GPU's `sms` (fewer than one per SM leaves SMs idle: nothing splits K), and whether N and K are
    multiples of 16 (Triton's proof of 16-byte accesses)."""
    import math
    ratios = grid_ratios(rows)
    config = {tuple(r["shape"]): r["config"] for r in rows if f"{r['backend']}:{r['rung']}" == "triton:6_autotuned"}
    lines = [f"{'M x N x K':>18s} {'x cuBLAS':>8s} {'tile':>8s} {'tiles':>6s} {'per SM':>6s}  N, K multiples of 16"]
    for shape in sorted(ratios, key=lambda s: ratios[s]["rung 6"])[:worst]:
        (M, N, K), c = shape, config[shape]
        tiles = math.ceil(M / c["BLOCK_M"]) * math.ceil(N / c["BLOCK_N"])
        lines.append(f"{M:>6d} x{N:>6d} x{K:>5d} {ratios[shape]['rung 6']:8.2f} {c['BLOCK_M']:>4d}x{c['BLOCK_N']:<3d} "
                     f"{tiles:6d} {tiles / sms:6.2f}  {'yes' if N % 16 == 0 else 'no'}, {'yes' if K % 16 == 0 else 'no'}")
    return "\n".join(lines)


# ------------------------------------------------------------- lesson 04d: attention backward

def backward_problem():
    """Lesson 04d's problem: on a GPU its rungs timed live at the S 4096 shapes only (S 16384 stays the
    recording's, so the lesson keeps to its minutes); without one, every headline shape from the recording."""
    import dataclasses

    import kernels.attention_backward as ab
    from ladder.world import WORLD
    return dataclasses.replace(ab.PROBLEM, bench_shapes=[s for s in ab.HEADLINE if not WORLD.gpu or s[2] == 4096])


def backward_saved_table(shapes=((4, 32, 4096, 64, 0), (4, 32, 16384, 64, 0), (4, 32, 16384, 128, 0))) -> str:
    """What each rung keeps from the forward for the backward (kernels/triton/attention_backward.saved_bytes)."""
    from kernels.triton import attention_backward as tab
    lines = [f"{'shape B H S D':>18s} {'rung 1: P + fp32 Q,K,V':>24s} {'rungs 2-4: O + LSE':>20s} {'ratio':>7s}"]
    for B, H, S, D, _ in shapes:
        one, two = tab.saved_bytes(B, H, S, D, "1_materialized"), tab.saved_bytes(B, H, S, D, "2_flash")
        lines.append(f"{'x'.join(map(str, (B, H, S, D))):>18s} {one / 2**30:20.2f} GiB {two / 2**30:16.3f} GiB "
                     f"{one / two:6.0f}x")
    return "\n".join(lines)


BACKWARD_SASS_FAMILIES = ("HGMMA", "MUFU.EX2", "UTMALDG", "REDG", "UTMAREDG", "STL", "LDL")


def backward_sass(arch: str = "sm_90", head_dims=(64, 128), families=BACKWARD_SASS_FAMILIES) -> str:
    """Static opcode counts of rung 2's two kernels and rung 3's one, as their launchers compile them
    (non-causal), per head size: tensor-core instructions, exponentials, TMA loads, atomic reductions (element
    REDG, the TMA's bulk UTMAREDG), spills. The K/V kernels as an eager launch on a GPU with the TMA takes them
    (Q and dO through it on sm_90, and rung 3's dQ where its tiles say DQ_BY_TMA)."""
    from kernels.triton import attention_backward as tab
    lines = [f"{arch} SASS, instructions in the code (not executed counts); tiles BLOCK_M x BLOCK_N, warps"]
    tma = int(arch.removeprefix("sm_").rstrip("a")) >= 90
    for d in head_dims:
        for kernel in ("dkdv", "dq", "dkdv_atomic"):
            case = tab.sass_case(kernel, d, causal=False, qdo_tma=tma and kernel != "dq")
            s = sass.triton_sass(**case, arch=arch)
            c = case["constexprs"]
            tiles = f"{c['BLOCK_M']:3d}x{c['BLOCK_N']:<3d} w{case['num_warps']}"
            lines.append(f"  D{d:<4d}{'rung 3' if kernel == 'dkdv_atomic' else 'rung 2'} {kernel:12s} {tiles}"
                         + "".join(f"{f:>9s} {s.count(f):3d}" for f in families))
    return "\n".join(lines)


def backward_atomic_traffic(shapes=((4, 32, 4096, 64, 0), (4, 32, 4096, 128, 0))) -> str:
    """Rung 3's dQ additions, counted: every K/V program adds a BLOCK_M x D fp32 tile per query step, so
    S / BLOCK_N programs add into each dQ row (non-causal); and the instructions that carry them, on a GPU
    with the TMA: one bulk reduction a tile (DQ_BY_TMA), else one REDG per four elements a thread."""
    from kernels.triton import attention_backward as tab
    lines = []
    for B, H, S, D, _ in shapes:
        tile = tab.GPU_TILES[D]["dkdv_atomic"]
        n, m = tile["BLOCK_N"], tile["BLOCK_M"]
        adds = B * H * S * D * (S // n)
        how = (f"{adds // (m * D):.2e} bulk reductions of {m}x{D}" if tile.get("DQ_BY_TMA") else
               f"{adds // 4:.2e} REDG.F32x4")
        lines.append(f"D{D}: BLOCK_N {n}: {S // n} programs add into each dQ row: {adds:.2e} fp32 adds, "
                     f"{4 * adds / 1e9:.1f} GB into L2 (dQ itself: {4 * B * H * S * D / 1e9:.2f} GB), as {how}")
    return "\n".join(lines)


def backward_tiles(reports) -> str:
    """Rung 4's recorded winners per kernel and (S, D, causal) beside the fixed tiles (GPU_TILES: rung 2's, rung
    3's for dkdv_atomic, "tma": its dQ by the TMA's bulk reductions), with the winner's speed-up over the fixed
    tiles in the same search ("-" where the search did not time those); then, per (S, D, causal), which way rung 4
    runs: rung 3's one kernel where its winner beat rung 2's two winners together."""
    from kernels.triton import attention_backward as tab
    fmt = lambda c: (f"{c['BLOCK_M']:3d}x{c['BLOCK_N']:<3d} w{c['num_warps']} s{c['num_stages']}"  # noqa: E731
                     + (" tma" if c.get("DQ_BY_TMA") else ""))
    lines = [f"{'kernel':11s} {'S':>6s} {'D':>4s} {'causal':>6s}  {'fixed':16s} {'searched':18s}"
             f"{'gain':>6s} {'timed':>6s} {'pruned':>7s}"]
    by_shape: dict = {}
    for r in sorted(reports, key=lambda r: (r.tuner, r.shape)):
        kernel = r.tuner.rsplit(":", 1)[1]
        S, D, causal = r.shape
        by_shape.setdefault(tuple(r.shape), {})[kernel] = r
        fixed = tab.GPU_TILES[D][kernel]
        fixed_ms = next((t["ms"] for t in r.timed if t["config"] == fixed), None)
        gain = f"{fixed_ms / r.best_ms:5.2f}x" if fixed_ms else f"{'-':>6s}"
        lines.append(f"{kernel:11s} {S:6d} {D:4d} {causal:6d}  {fmt(fixed):16s} {fmt(r.best):18s}{gain} "
                     f"{len(r.timed):6d} {len(r.pruned):7d}")
    lines.append("rung 4 runs, per (S, D, causal): rung 3's one kernel against rung 2's two (their searched best ms)")
    for (S, D, causal), got in sorted(by_shape.items()):
        if not {"dkdv", "dq", "dkdv_atomic"} <= set(got):
            continue
        wins = tab.one_kernel_wins([got["dkdv"], got["dq"]], got["dkdv_atomic"])
        split = got["dkdv"].best_ms + got["dq"].best_ms
        lines.append(f"  S{S:<6d} D{D:<4d} causal {causal}: {'rung 3' if wins else 'rung 2'}"
                     f"  ({got['dkdv_atomic'].best_ms:.3f} ms against {got['dkdv'].best_ms:.3f} + "
                     f"{got['dq'].best_ms:.3f} = {split:.3f})")
    return "\n".join(lines)


def backward_ratios(rows: list[dict], label: str = "triton:4_autotuned", flash_goal: float = 1.0,
                    cudnn_goal: float = 0.85) -> str:
    """Per headline shape, `label`'s TFLOP/s and its ratio to SDPA's cuDNN and FlashAttention-2 backwards timed in
    the same run; then the issue's goals, computed: >= flash_goal x FA2 everywhere, >= cudnn_goal x cuDNN at D64."""
    from ladder import verdicts
    by = {(f"{r['backend']}:{r['rung']}", tuple(r["shape"])): r for r in rows}
    shapes = sorted({s for (lab, s) in by if lab == label}, key=lambda s: (s[2], s[3], s[4]))
    lines = [f"{'shape':>16s} {'ours TFLOP/s':>12s} {'cuDNN':>7s} {'FA2':>7s} {'x cuDNN':>8s} {'x FA2':>7s}"]
    flash, cudnn = [], []
    for s in shapes:
        ours, cu, fa = by[label, s], by.get(("torch:sdpa", s)), by.get(("torch:sdpa_flash", s))
        x_cu, x_fa = cu["ms"] / ours["ms"], fa["ms"] / ours["ms"]
        flash.append(x_fa)
        if s[3] == 64:
            cudnn.append(x_cu)
        lines.append(f"{verdicts.shape_label('attention_backward', s):>16s} {ours['tflops']:12.1f} {cu['tflops']:7.1f} "
                     f"{fa['tflops']:7.1f} {x_cu:8.3f} {x_fa:7.3f}")
    lines.append(f"goal >= {flash_goal}x FA2 at every shape: {min(flash):.3f}x at worst -> "
                 f"{'HIT' if min(flash) >= flash_goal else 'MISS'}")
    hit = sum(x >= cudnn_goal for x in cudnn)
    lines.append(f"goal >= {cudnn_goal}x cuDNN at D64: {min(cudnn):.3f}-{max(cudnn):.3f}x, "
                 f"met at {hit} of {len(cudnn)} shapes -> {'HIT' if hit == len(cudnn) else 'MISS'}")
    return "\n".join(lines)


def _training_step(model, tokens):
    """Forward + backward of a next-token loss (the logits against the tokens themselves: a stand-in target)."""
    import torch
    model.zero_grad(set_to_none=True)
    logits = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tokens.flatten())
    loss.backward()
    return loss


def training_grads(preset: str = "tiny", names=("blocks.0.attn.qkv.weight", "blocks.0.mlp.fc.weight",
                                                 "blocks.1.attn.qkv.bias", "wte.weight")) -> str:
    """One training step of the capstone's model, eager and eager + ours (ladder.ops.attention and matmul with
    their backwards), same weights and tokens: the loss and a few parameters' gradients compared (ladder.check)."""
    from ladder import check
    from ladder.capstone import model as cm
    device = "cuda" if _on_gpu() else "cpu"
    model = cm.build(preset, device)
    tokens = cm.tokens(cm.PRESETS[preset], device)
    got = {}
    for ours in (False, True):
        cm.use_our_kernels(model, ours)
        loss = _training_step(model, tokens)
        got[ours] = loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if n in names}
    lines = [f"{preset}: loss eager {got[False][0]:.5f}, eager + ours {got[True][0]:.5f}"]
    lines += [f"  grad {n:26s} {check.compare(got[True][1][n], got[False][1][n])}" for n in names]
    return "\n".join(lines)


def _on_gpu() -> bool:
    from ladder.world import WORLD
    return bool(WORLD.gpu)


def training_timing(layers: int = 2, batch: int = 4, seq: int = 1024, steps: int = 10, compiled: bool = True) -> str:
    """On a GPU: ms per training step (forward + backward) of the capstone's model at GPT-2 small's widths with
    `layers` layers, eager, eager + ours, torch.compile and compile + ours (each compiled once, then timed)."""
    import dataclasses

    import torch

    from ladder.capstone import model as cm
    from ladder.timing import bench
    if not _on_gpu():
        return "the training step's timing needs a GPU: here only its correctness (above) runs"
    cfg = dataclasses.replace(cm.PRESETS["gpt2-small"], layers=layers, batch=batch, seq=seq)
    tokens = cm.tokens(cfg, "cuda")
    lines, base = [f"GPT-2 small widths, {layers} layers, batch {batch} x {seq}: forward + backward"], None
    for name, ours, comp in (("eager", False, False), ("eager + ours", True, False),
                             ("torch.compile", False, True), ("compile + ours", True, True)):
        if comp and not compiled:
            continue
        model = cm.use_our_kernels(cm.build(cfg, "cuda"), ours)
        step = torch.compile(model) if comp else model
        try:
            ms = bench(lambda: _training_step(step, tokens), warmup_ms=100, rep_ms=300).median_ms
        except Exception as e:  # noqa: BLE001 -- a step that does not compile is the finding: say it, go on
            lines.append(f"  {name:15s} did not run: {type(e).__name__}: {str(e).strip().splitlines()[0][:120]}")
            continue
        base = base or ms
        lines.append(f"  {name:15s} {ms:8.2f} ms  {base / ms:5.2f}x eager")
        del model, step
    return "\n".join(lines)
