"""Assignment 02: the naive matmul's thread -> (row, col) mapping, made coalesced.

The student writes two C expressions of threadIdx, blockIdx and blockDim. The check, in order:
(1) the whole launch grid (a square grid of 32x32-thread blocks covering max(M, N), as
kernels/cuda/exercises/matmul_mapping.cu is launched) maps one-to-one onto the M x N elements of C at
ragged shapes: every element computed by exactly one thread, no negative index; (2) the model of the
warps' accesses: 32-byte sectors per warp-wide load of B and store of C; (3) a compile for sm_80 with
NVRTC; (4) on a GPU, a run compared with torch: "correct" only when that comparison passes too.
"""
from __future__ import annotations

import numpy as np
import torch

import kernels.matmul as mm
from kernels.cuda import matmul as cm
from ladder.runtime import cuda
from ladder.check import compare
from ladder.runtime.errors import NotAvailable
from ladder.exercises.grading import Result, first_line, not_answered, not_yet, passed, unanswered
from ladder.timing import bench
from ladder.runtime.world import WORLD


TASK = "mapping"
SECTOR_BYTES = 32
BLOCK = (32, 32)
GRID_SHAPES = [(70, 45), (45, 70), (64, 64), (1, 33)]  # (M, N): ragged both ways, whole tiles, one row
MODEL_BLOCKS = [(0, 0), (1, 0), (0, 1), (1, 1)]        # the warps whose sectors are counted


class _CInt(np.ndarray):
    """Integers that divide as C's do (3 / 2 == 1)."""

    def __truediv__(self, other):
        return np.floor_divide(self, other)

    def __rtruediv__(self, other):
        return np.floor_divide(other, self)


class _Dim3:
    def __init__(self, x=0, y=0, z=0):
        self.x, self.y, self.z = x, y, z


def _ints(a) -> _CInt:
    return np.asarray(a, dtype=np.int64).view(_CInt)


def evaluate(row_expr: str, col_expr: str, threads: dict) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of every thread in `threads` (arrays tx, ty, bx, by), from the C expressions."""
    names = {"threadIdx": _Dim3(_ints(threads["tx"]), _ints(threads["ty"])),
             "blockIdx": _Dim3(_ints(threads["bx"]), _ints(threads["by"])),
             "blockDim": _Dim3(*BLOCK, 1), "__builtins__": {}}
    shape = np.shape(threads["tx"])
    out = []
    for expr in (row_expr, col_expr):
        value = eval(str(expr), names)  # noqa: S307 (the student's own expression)
        value = np.asarray(value)
        if value.dtype.kind not in "iub":
            raise TypeError(f"{expr!r} is not an integer expression")
        out.append(np.broadcast_to(value.astype(np.int64), shape))
    return out[0], out[1]


def grid_threads(side: int) -> dict:
    """Every thread of a side x side grid of 32x32 blocks."""
    by, bx, ty, tx = np.meshgrid(*(np.arange(n) for n in (side, side, BLOCK[1], BLOCK[0])), indexing="ij")
    return {"tx": tx.ravel(), "ty": ty.ravel(), "bx": bx.ravel(), "by": by.ravel()}


def warp_threads(block=(0, 0), warp: int = 0) -> dict:
    lane = np.arange(32) + 32 * warp
    return {"tx": lane % BLOCK[0], "ty": lane // BLOCK[0], "bx": np.full(32, block[0]), "by": np.full(32, block[1])}


def warp_indices(row_expr: str, col_expr: str, block=(0, 0), warp: int = 0) -> list[tuple[int, int]]:
    rows, cols = evaluate(row_expr, col_expr, warp_threads(block, warp))
    return list(zip(rows.tolist(), cols.tolist()))


def sectors_per_request(byte_addresses) -> int:
    """32-byte sectors one warp-wide access touches: 1-2 when coalesced, up to 32 when strided."""
    return len({int(a) // SECTOR_BYTES for a in byte_addresses})


def warp_access_report(row_expr: str, col_expr: str, K: int = 4096, N: int = 4096, block=(0, 0),
                       warp: int = 0) -> dict[str, int]:
    """Sectors per request of one warp's first loads (A[row][0], B[0][col]) and its store of C."""
    rc = warp_indices(row_expr, col_expr, block, warp)
    return {"load A": sectors_per_request([2 * (r * K) for r, _ in rc]),
            "load B": sectors_per_request([2 * c for _, c in rc]),
            "store C": sectors_per_request([2 * (r * N + c) for r, c in rc])}


def one_to_one(row_expr: str, col_expr: str, M: int, N: int) -> str | None:
    """Why the launch grid does not give each element of M x N exactly one thread (None: it does)."""
    side = -(-max(M, N) // BLOCK[0])
    threads = grid_threads(side)
    rows, cols = evaluate(row_expr, col_expr, threads)
    if (rows < 0).any() or (cols < 0).any():
        i = int(np.argmax((rows < 0) | (cols < 0)))
        return (f"thread {_who(threads, i)} gets ({rows[i]}, {cols[i]}): a negative index passes the kernel's "
                f"bounds check and reads before A")
    inside = (rows < M) & (cols < N)
    flat = rows[inside] * N + cols[inside]
    count = np.bincount(flat, minlength=M * N)
    if (count > 1).any():
        e = int(np.argmax(count > 1))
        who = np.flatnonzero(inside)[flat == e][:2]
        return (f"element ({e // N}, {e % N}) is computed by {count[e]} threads (e.g. {_who(threads, who[0])} "
                f"and {_who(threads, who[1])}): the grid must map one-to-one onto C")
    if (count == 0).any():
        e = int(np.argmax(count == 0))
        return f"element ({e // N}, {e % N}) is computed by no thread: the grid must cover all of C"
    return None


def _who(threads: dict, i: int) -> str:
    return (f"threadIdx ({threads['tx'][i]}, {threads['ty'][i]}) of blockIdx "
            f"({threads['bx'][i]}, {threads['by'][i]})")


def gpu_here() -> bool:
    return WORLD.gpu


def check_mapping(row_expr, col_expr, run_on_gpu: bool = True) -> Result:
    if unanswered(row_expr) or unanswered(col_expr):
        return not_answered(TASK)
    if not (isinstance(row_expr, str) and isinstance(col_expr, str)):
        return not_yet(TASK, "answer each with a C expression in quotes, a string, as in "
                             "row = \"blockIdx.x * blockDim.x + threadIdx.x\"")
    try:
        report = warp_access_report(row_expr, col_expr)
        wrong = next((f"at M = {M}, N = {N}: {why}" for M, N in GRID_SHAPES
                      if (why := one_to_one(row_expr, col_expr, M, N))), None)
        worst = {k: max(warp_access_report(row_expr, col_expr, block=b, warp=w)[k] for b in MODEL_BLOCKS
                        for w in (0, 31)) for k in report}
    except Exception as e:  # the expression itself is the student's: say what is wrong with it
        return not_yet(TASK, f"cannot evaluate it ({first_line(e)}); use threadIdx.x, blockIdx.y, blockDim.x, ...")
    if wrong:
        return not_yet(TASK, f"not one-to-one {wrong}")
    print("sectors per warp request (model, K = N = 4096): " + ", ".join(f"{k} {v}" for k, v in report.items()))
    if worst["load B"] > 4 or worst["store C"] > 4:
        return not_yet(TASK, "one thread per element, but not yet coalesced: the 32 threads of a warp "
                             "(consecutive threadIdx.x) should take consecutive columns, so that B and C are "
                             "read and written in a few sectors")
    defines = {"ROW": f"({row_expr})", "COL": f"({col_expr})"}
    try:
        cuda.compile_cubin("exercises/matmul_mapping.cu", "sm_80", tuple(sorted(defines.items())))
        print("compiles for sm_80: yes")
    except cuda.CompileError as e:
        return not_yet(TASK, f"does not compile: {' / '.join(str(e).splitlines()[-3:])}")
    except NotAvailable as e:
        print(f"compile for sm_80: not available here ({e})")
    if run_on_gpu and gpu_here():
        ok, said = gpu_run(defines)
        if not ok:
            return not_yet(TASK, f"the model says coalesced, but on the GPU C is wrong: {said}")
    elif run_on_gpu:
        print("GPU run: no GPU here (the model and the compile above are the check)")
    return passed(TASK, "correct: one thread per element of C, and a warp reads neighbouring columns of B "
                        "and writes neighbouring elements of C")


def gpu_run(defines: dict) -> tuple[bool, str]:
    """Run the student's kernel: correctness at 1000^3 (and 1000x37x1000: ragged), then time against
    rung 1 at 2048^3. (ok, the comparison in words)."""

    def run(a, b):
        M, K = a.shape
        N = b.shape[1]
        out = torch.full((M, N), float("nan"), dtype=torch.float16, device="cuda")
        side = -(-max(M, N) // 32)
        cuda.launch(cuda.load("exercises/matmul_mapping.cu", defines), "matmul", (side, side), BLOCK,
                    (a, b, out) + cuda.int32s(M, N, K))
        return out

    gen = torch.Generator("cuda").manual_seed(3)
    for shape in ((1000, 1000, 1000), (1000, 37, 1000)):
        a, b = mm.PROBLEM.make_inputs(shape, "cuda", gen)
        result = compare(run(a, b), mm.reference(a, b))
        print(f"GPU run at {'x'.join(map(str, shape))}: {result}")
        if not result.ok:
            return False, f"at {'x'.join(map(str, shape))}: {result}"
    a, b = mm.PROBLEM.make_inputs((2048, 2048, 2048), "cuda", gen)
    yours, naive = bench(lambda: run(a, b)).median_ms, bench(lambda: cm.naive(a, b)).median_ms
    print(f"GPU time at 2048^3: yours {yours:.2f} ms, rung 1 (naive) {naive:.2f} ms: {naive / yours:.1f}x")
    return True, "ok"
