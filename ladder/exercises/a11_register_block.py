"""Assignment 11: a thread's register block in CUDA matmul rung 3b (kernels/cuda/matmul/3b_register_blocked.cu).

A block of THREADS = (BM/TM)·(BN/TN) threads computes a BM×BN tile of C. Thread tid keeps a TM×TN block of
it in registers (`acc[TM][TN]`), starting at row `tm` and column `tn` of the tile; at each k it loads
As[k][tm + i] (TM values of A) and Bs[k][tn + j] (TN values of B) and does all TM·TN products.

The student writes thread_block(tid, BM, BN, TM, TN) -> (rows, cols): the tile rows and columns thread tid
holds. The check compares it with the kernel's own map (its `tm` and `tn` expressions and #defines, read
from the .cu) for the kernel's constants and for other block shapes, non-square ones included, so a
map that swaps the roles of rows and columns shows; it names the first thread that holds an element
twice, outside the tile, or not the kernel's. Two numbers follow: shared-memory loads per FMA, and the
distinct shared-memory values one warp reads at one k.
"""
from __future__ import annotations

import re

from ladder.runtime import cuda
from ladder.exercises.grading import Fail, Result, check_number, first_line, judge, still_blank
from ladder.lessons.source import cu_define


TASK = "register block"
PATH = "matmul/3b_register_blocked.cu"
WARP = 32


def kernel_constants() -> dict[str, int]:
    """BM, BN, BK, TM, TN as the kernel #defines them."""
    return {name: cu_define(PATH, name) for name in ("BM", "BN", "BK", "TM", "TN")}


def kernel_expressions() -> dict[str, str]:
    """The kernel's `tm = ...` and `tn = ...` (this thread's sub-tile corner), as written in the .cu."""
    source = cuda.source(PATH)
    found = {}
    for name in ("tm", "tn"):
        m = re.search(rf"(?:\bconst\s+int\s+|,\s*){name}\s*=\s*([^,;]+)[,;]", source)
        if not m:
            raise KeyError(f"{PATH} has no `{name} = ...`")
        found[name] = m.group(1).strip()
    return found


def _reference(tid: int, bm: int, bn: int, tm_: int, tn_: int) -> tuple[list[int], list[int]]:
    """The kernel's map: its tm, tn expressions evaluated (C's `/` on ints >= 0 is Python's `//`), then the
    loops a[i] = As[k][tm + i], b[j] = Bs[k][tn + j]."""
    scope = {"tid": tid, "BM": bm, "BN": bn, "TM": tm_, "TN": tn_, "__builtins__": {}}
    row0, col0 = (eval(e.replace("/", "//"), scope) for e in kernel_expressions().values())  # noqa: S307 (our own .cu)
    return list(range(row0, row0 + tm_)), list(range(col0, col0 + tn_))


def shapes() -> list[tuple[int, int, int, int]]:
    """(BM, BN, TM, TN): the kernel's own, then others, non-square and with TM != TN."""
    k = kernel_constants()
    return [(k["BM"], k["BN"], k["TM"], k["TN"]), (64, 64, 4, 4), (128, 64, 8, 4), (64, 128, 4, 8), (32, 128, 8, 4)]


def _warp_values(bm: int, bn: int, tm_: int, tn_: int, warp: int = 0) -> tuple[int, int]:
    """(distinct A values, distinct B values) the threads of one warp read from shared memory at one k."""
    rows, cols = set(), set()
    for tid in range(warp * WARP, (warp + 1) * WARP):
        r, c = _reference(tid, bm, bn, tm_, tn_)
        rows.update(r)
        cols.update(c)
    return len(rows), len(cols)


def _span(xs: list[int]) -> str:
    return f"{xs[0]}..{xs[-1]}" if xs == list(range(xs[0], xs[0] + len(xs))) else str(xs)


def _as_ints(got, tid: int) -> tuple[list[int], list[int]]:
    try:
        rows, cols = got
        return [int(r) for r in rows], [int(c) for c in cols]
    except (TypeError, ValueError):
        raise Fail(f"thread_block({tid}, ...) = {got!r}: return (rows, cols), two lists of tile indices") from None


class RegisterBlock:
    def check_map(self, thread_block) -> Result:
        def body() -> str:
            for bm, bn, tm_, tn_ in shapes():
                threads = (bm // tm_) * (bn // tn_)
                where = f"with BM={bm}, BN={bn}, TM={tm_}, TN={tn_} ({threads} threads)"
                owner: dict[tuple[int, int], int] = {}
                maps = {}
                for tid in range(threads):      # first: every element of the tile held by one thread
                    rows, cols = maps[tid] = _as_ints(thread_block(tid, bm, bn, tm_, tn_), tid)
                    if (len(rows), len(cols)) != (tm_, tn_):
                        raise Fail(f"{where}, thread {tid} holds {len(rows)} rows x {len(cols)} columns; "
                                   f"its accumulators are acc[TM][TN] = {tm_} x {tn_}")
                    for r in rows:
                        for c in cols:
                            if not (0 <= r < bm and 0 <= c < bn):
                                raise Fail(f"{where}, thread {tid} holds element ({r}, {c}), outside the "
                                           f"{bm}x{bn} tile: the thread grid is (BM/TM) x (BN/TN) = "
                                           f"{bm // tm_} x {bn // tn_} threads, one TM x TN block each")
                            if (r, c) in owner:
                                raise Fail(f"{where}, threads {owner[r, c]} and {tid} both hold element ({r}, {c}): "
                                           f"each element of C is summed by exactly one thread")
                            owner[r, c] = tid
                for tid, (rows, cols) in maps.items():   # then: the kernel's own map
                    want = _reference(tid, bm, bn, tm_, tn_)
                    if (rows, cols) != want:
                        if sorted(rows) == want[0] and sorted(cols) == want[1]:
                            why = "the same elements, in another order: acc[i][j] is row tm + i, column tn + j"
                        elif rows != list(range(rows[0], rows[0] + tm_)) or cols != list(range(cols[0], cols[0] + tn_)):
                            why = ("the kernel's rows and columns are contiguous: a[i] = As[k][tm + i], "
                                   "b[j] = Bs[k][tn + j]")
                        else:
                            why = ("consecutive threads (those of a warp) take consecutive column blocks, "
                                   "tid % (BN/TN), and a new row of blocks starts every BN/TN threads")
                        raise Fail(f"{where}, thread {tid} holds rows {_span(rows)} x columns {_span(cols)}; "
                                   f"the kernel's holds rows {_span(want[0])} x columns {_span(want[1])}: a "
                                   f"one-to-one map, but not the kernel's: {why}")
                if len(owner) != bm * bn:
                    raise Fail(f"{where}, {bm * bn - len(owner)} elements of the tile are held by no thread")
            return (f"correct: the kernel's map, every element of the tile held by one thread, for "
                    f"{len(shapes())} block shapes")
        return judge(TASK, (thread_block,), body)

    def check_loads_per_fma(self, answer, tm_: int, tn_: int) -> Result:
        want = (tm_ + tn_) / (tm_ * tn_)
        return check_number("shared-memory loads per FMA", answer, want, [
            (2.0, "that is rung 3 (one A and one B value per FMA); here each value loaded feeds TN or TM FMAs"),
            (1 / want, "that is FMAs per load; the question asks loads per FMA"),
            (tm_ / (tm_ * tn_), "count the TN values of B too"),
            ((tm_ + tn_) / 4 / (tm_ * tn_), "count floats loaded, not LDS.128 instructions (4 floats each)")], "")

    def check_warp_values(self, answer, bm: int, bn: int, tm_: int, tn_: int) -> Result:
        a, b = _warp_values(bm, bn, tm_, tn_)
        rows_of_threads = -(-WARP // (bn // tn_))
        return check_number("distinct values warp 0 reads per k", answer, a + b, [
            (WARP * (tm_ + tn_), "that counts every thread's loads; threads that share rows read the same A "
                                 "values (shared memory broadcasts them)"),
            (tm_ + tn_, "that is one thread's; a warp is 32 threads"),
            (bm + bn, f"warp 0 covers only {rows_of_threads} rows of threads: {a} rows of A, not {bm}"),
            (a, "count the B values too"), (b, "count the A values too")], "floats", rel=0.001)


def thread_picture(thread_block, bm: int, bn: int, tm_: int, tn_: int, threads: list[int]) -> str:
    """The tile in blocks of TM x TN, each labelled with the thread your map gives it ('.' for none), for the
    threads listed; or why it cannot be drawn yet."""
    if still_blank(thread_block):
        return "not answered yet"
    grid = [["." for _ in range(bn // tn_)] for _ in range(bm // tm_)]
    try:
        for tid in threads:
            rows, cols = thread_block(tid, bm, bn, tm_, tn_)
            r, c = int(min(rows)) // tm_, int(min(cols)) // tn_
            if 0 <= r < len(grid) and 0 <= c < len(grid[0]):
                grid[r][c] = str(tid)
    except Exception as e:  # noqa: BLE001 (the student's code)
        return f"your code fails ({first_line(e)})"
    width = max(len(x) for row in grid for x in row)
    return "\n".join(" ".join(x.rjust(width) for x in row) for row in grid)
