"""Lesson 06, shipping a kernel as a PyTorch operator: the operator's template as ladder/ops.py writes it, its host
cost per call, the shape sweep against cuBLAS and what the dispatch table launches where, why rung 6 loses where it
does (its tiles, its loads), rung 12's search at the goal shapes, and a stale dispatch table refused.
"""
from __future__ import annotations

import ast
import collections
import math
import re
import statistics
import tempfile
from pathlib import Path
from unittest import mock

import kernels.matmul as mm
from kernels.cuda import matmul as cm
from kernels.triton import matmul as tm
from ladder import autotune, dispatch, sass
from ladder.runtime import hardware
from ladder.roofline import datasheet_gpu

OPS = Path(__file__).resolve().parents[1] / "ops.py"


def _excerpt(lines: list[str], node: ast.stmt, keep: list[str]) -> list[str]:
    """Function `node`'s first and last lines and, between them, the runs of lines from each `keep` marker (the
    first line after the previous marker's that starts with it, stripped: a marker may repeat) to the next line that
    does not indent deeper, with "..." for what is left out."""
    body = lines[node.lineno - 1:node.end_lineno]
    indent = lambda line: len(line) - len(line.lstrip())  # noqa: E731
    kept, start = {0, len(body) - 1}, 0
    for marker in keep:
        start = next(i for i in range(start + 1, len(body)) if body[i].strip().startswith(marker))
        end = start + 1
        while end < len(body) and (not body[end].strip() or indent(body[end]) > indent(body[start])):
            end += 1
        kept.update(range(start, end))
    out = []
    for i, line in enumerate(body):
        if i in kept:
            out.append(line)
        elif i - 1 in kept:
            out.append(" " * indent(body[min(j for j in kept if j > i)]) + "...")
    return out


def show_op_template(op: str = "matmul") -> None:
    """The pieces of ladder/ops.py that make a Triton kernel the operator ladder::`op`, printed from the file itself
    in the order a student writes them: the body that launches the kernel through wrap_triton, the fake, the
    registration (triton_op on a GPU, custom_op with the fake in the interpreter), and the backward with
    register_autograd and its setup_context. Reads the file, imports nothing: the same text in every world."""
    lines = OPS.read_text().splitlines()
    functions = {n.name: n for n in ast.parse("\n".join(lines)).body if isinstance(n, ast.FunctionDef)}
    def function(name: str) -> list[str]:
        return lines[functions[name].lineno - 1:functions[name].end_lineno]
    def statement(start: str) -> list[str]:
        return [next(line for line in lines if line.startswith(start))]
    parts = [
        ("1. the body: the case's pick (fixed where torch traces the call); cuBLAS as torch ops, else the kernel, "
         "through wrap_triton where traced",
         function(f"_{op}_impl") + [""] + _excerpt(lines, functions[f"_{op}_run"],
                                                   ["if traced:", "if picked == CUBLAS:", "out = a.new_empty",
                                                    "if traced:", "elif out.numel():"])),
        ("2. the fake: the output's shape, dtype and device, no launch", function(f"_{op}_fake")),
        ("3. the operator: a triton_op on a GPU, a custom_op with the fake in Triton's interpreter",
         function("_register") + statement(f'_register("{op}"')),
        ("4. the backward: what to save (setup_context), the gradients, and their registration",
         function(f"_{op}_setup") + [""] + function("_linear_grads") * (op == "matmul") + [""] * (op == "matmul")
         + function(f"_{op}_backward")
         + statement(f'torch.library.register_autograd("ladder::{op}"')),
    ]
    print("\n\n".join(f"# ladder/ops.py, {title}\n" + "\n".join(body) for title, body in parts))


def host_cost_table(rows: list[dict]) -> str:
    """ladder.launch's rows: host µs per call of each of our calls beside its anchor's, timed in the same rounds,
    their ratio, and each call's kernel µs (an upper bound on the GPU's time a call: where it is under the host µs,
    the GPU waited for the host, and the host µs is the call's host cost)."""
    op_w = max(len("op"), *(len(r["op"]) for r in rows))
    call_w = max(len("call"), *(len(r["call"]) for r in rows))
    anchor_w = max(len("anchor"), *(len(r["anchor"]) for r in rows))
    lines = [f"{'op':{op_w}s} {'call':{call_w}s} {'host µs':>8s} {'kernel µs':>9s}  {'anchor':{anchor_w}s} "
             f"{'host µs':>8s} {'kernel µs':>9s} {'host ratio':>10s}"]
    lines += [f"{r['op']:{op_w}s} {r['call']:{call_w}s} {r['us']:8.1f} {_us(r.get('kernel_us')):>9s}  "
              f"{r['anchor']:{anchor_w}s} {r['anchor_us']:8.1f} {_us(r.get('anchor_kernel_us')):>9s} "
              f"{r['ratio']:10.2f}" for r in rows]
    return "\n".join(lines)


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


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
    found = {}
    for entry in dispatch.DispatchTable.from_rows({}, rows).entries.values():
        shape = entry.shape
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
    ratios = grid_ratios(rows)
    table = dispatch.DispatchTable.from_rows({}, rows)
    lines = []
    for name, shapes in (("grid", [s for s in dispatch.GRID if s in ratios]),
                         ("goal shapes", [s for s in dispatch.GOAL_SHAPES.values() if s in ratios])):
        six = statistics.median(ratios[s]["rung 6"] for s in shapes)
        op = [ratios[s]["the op"] for s in shapes]
        def launches(among) -> str:
            picks = collections.Counter(table.entries[dispatch.Case(*s)].pick(among) for s in shapes)
            return ", ".join(f"{label} at {picks[c]}" for c, label in (
                (dispatch.RUNG6, "rung 6"), (dispatch.RUNG7, "rung 7"), (dispatch.CUBLAS, "cuBLAS")) if c in among)
        lines += [f"{name} ({len(shapes)} shapes): rung 6 alone, median {six:.3f}x cuBLAS -> "
                  f"{'HIT' if six >= dispatch.GOAL else 'MISS'} (>= {dispatch.GOAL}x)",
                  f"  the op launches {launches(dispatch.EAGER_CANDIDATES)}: "
                  f"median {statistics.median(op):.3f}x, lowest {min(op):.3f}x, highest {max(op):.3f}x cuBLAS",
                  f"  under torch.compile: {launches(dispatch.OP_CANDIDATES)}"]
    return "\n".join(lines)


def rung6_misses(rows: list[dict], sms: int, worst: int = 8) -> str:
    """The shapes where rung 6 lost most to cuBLAS (a "shape_sweep" row set): its tile, how many tiles C has
    against the GPU's `sms` (fewer than one per SM leaves SMs idle: nothing splits K), and whether N and K are
    multiples of 16 (Triton's proof of 16-byte accesses)."""
    ratios = grid_ratios(rows)
    config = {tuple(r["shape"]): r["config"] for r in rows if f"{r['backend']}:{r['rung']}" == "triton:6_autotuned"}
    lines = [f"{'M x N x K':>21s} {'x cuBLAS':>8s} {'tile':>8s} {'tiles':>6s} {'tiles/SM':>8s}  N, K multiples of 16"]
    for shape in sorted(ratios, key=lambda s: ratios[s]["rung 6"])[:worst]:
        (M, N, K), c = shape, config[shape]
        tiles = math.ceil(M / c["BLOCK_M"]) * math.ceil(N / c["BLOCK_N"])
        lines.append(f"{M:>6d} x{N:>6d} x{K:>5d} {ratios[shape]['rung 6']:8.2f} {c['BLOCK_M']:>4d}x{c['BLOCK_N']:<3d} "
                     f"{tiles:6d} {tiles / sms:8.2f}  {'yes' if N % 16 == 0 else 'no'}, {'yes' if K % 16 == 0 else 'no'}")
    return "\n".join(lines)


def rung6_memory_instructions(arch: str = "sm_90") -> str:
    """Rung 6's loads and stores in its SASS for `arch` (compile only), specialized as Triton specializes a launch:
    with N (and every stride) a multiple of 16, and with N = 50257 (the vocabulary) while B's rows are padded to
    a multiple of 16. The mask on N must then hold over 8 neighbours for a 16-byte access, which Triton can prove
    only from N itself."""
    signature = dict(a_ptr="*fp16", b_ptr="*fp16", c_ptr="*fp16", bias_ptr="*fp16", pre_ptr="constexpr", M="i32",
                     N="i32", K="i32", stride_am="i32", stride_ak="i32", stride_bk="i32", stride_bn="i32",
                     stride_cm="i32", stride_cn="i32")
    constexprs = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, BIAS_RELU=False, EVEN_K=True, FLATTEN=True,
                      BIAS_GELU=False, stride_ak=1, stride_bn=1, stride_cn=1, bias_ptr=None, pre_ptr=None)
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


def hopper_choices(shape: tuple, gpu_slug: str | None = None) -> str:
    """Rung 12's recorded search at `shape`, at its winner's block of C: each ring depth, epilogue (the whole tile
    staged, or box by box) and cluster size it timed, the best over tile orders, against the winner; and what each
    cluster size puts in the SASS at the start and exit (compiled here): the cluster barrier and its fences."""
    report = autotune.recorded_report(mm.HOPPER_TUNER.name, shape, gpu_slug)
    if report is None:
        return f"no search of rung 12 at {'x'.join(map(str, shape))} recorded"
    tile = (report.best["BM"], report.best["BN"])
    best: dict[tuple, float] = {}
    for t in report.timed:
        c = cm.hopper_config(t["config"])
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


def stale_table_demo(gpu_name: str, changed: str = "triton", to: str = "0.0.0") -> str:
    """Write a dispatch table that this process's key would accept except for one version (`changed` -> `to`)
    into a scratch cache directory, and show what ladder.dispatch.load makes of it, then of the same table under
    this process's key, on this GPU (none: `gpu_name`'s datasheet). The real cache is left alone."""
    gpu = hardware.detect() or datasheet_gpu(gpu_name)   # no GPU here: the recording's, as a model
    entry = dispatch.Entry(dispatch.Case(4096, 4096, 4096), {dispatch.CUBLAS: dispatch.Timed(None, 1.0)})
    mine = dispatch.process_key(gpu.slug)
    lines = [f"this process's key: {mine}"]
    with tempfile.TemporaryDirectory() as scratch, mock.patch.object(dispatch, "CACHE_DIR", Path(scratch)):
        for key in ({**mine, changed: to}, mine):
            dispatch.DispatchTable.of(key, [entry]).write(dispatch.cache_path(gpu.slug))
            loaded = dispatch.load(gpu)
            where = loaded.reason.replace(scratch, "<scratch>")
            lines.append(f"table keyed {changed} {key[changed]}: {'USED' if loaded.table else 'IGNORED'}: {where}")
    return "\n".join(lines)
