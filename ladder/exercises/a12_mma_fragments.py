"""Assignment 12: which lane holds which element in mma.sync.m16n8k16 (CUDA matmul rung 4,
kernels/cuda/matmul/tensor_core.cuh).

One warp multiplies A (16x16, fp16) by B (16x8, fp16) into C (16x8, fp32). No thread holds a whole row or
column: each of the 32 lanes holds 4 elements of C (c0..c3, one fp32 register each), 8 of A (a0..a7, two
fp16 per 32-bit register) and 4 of B (b0..b3). The student writes c_element(lane, i), a_element(lane, i)
and b_element(lane, i) -> (row, col). The check compares them with the layout the PTX ISA gives for
this instruction ("Matrix Fragments for mma.m16n8k16 with floating point type"), written out below as
the reference; first it asks that the map cover the matrix one-to-one, then names the first lane and
register that differ, with the usual mix-ups (row and column, lane / 4 and lane % 4, which register
goes 8 rows down and which 8 columns right).
"""
from __future__ import annotations

import re

from ladder.runtime import cuda
from ladder.exercises.grading import Fail, Result, first_line, judge, still_blank


LANES = 32
# operand: (rows, cols, elements per lane)
SHAPES = {"C": (16, 8, 4), "A": (16, 16, 8), "B": (16, 8, 4)}


def _c(group: int, pair: int, i: int) -> tuple[int, int]:
    return group + 8 * (i // 2), 2 * pair + i % 2


def _a(group: int, pair: int, i: int) -> tuple[int, int]:
    return group + 8 * ((i // 2) % 2), 2 * pair + i % 2 + 8 * (i // 4)


def _b(group: int, pair: int, i: int) -> tuple[int, int]:
    return 2 * pair + i % 2 + 8 * (i // 2), group


def _c_reference(lane: int, i: int) -> tuple[int, int]:
    """C/D, fp32: c0, c1 in row groupID = lane / 4, c2, c3 eight rows down; columns 2 * threadID_in_group
    (threadID_in_group = lane % 4) and +1."""
    return _c(lane // 4, lane % 4, i)


def _a_reference(lane: int, i: int) -> tuple[int, int]:
    """A, fp16 (row-major fragment): registers {a0,a1} top-left 8x8, {a2,a3} bottom-left, {a4,a5} top-right,
    {a6,a7} bottom-right; in each, row groupID, columns 2 * threadID_in_group and +1."""
    return _a(lane // 4, lane % 4, i)


def _b_reference(lane: int, i: int) -> tuple[int, int]:
    """B, fp16 (column fragment): column groupID; rows (k) 2 * threadID_in_group and +1, 8 more for b2, b3."""
    return _b(lane // 4, lane % 4, i)


REFERENCE = {"C": _c, "A": _a, "B": _b}
# the usual mix-ups, per operand: (what the mistaken formula gives for (groupID, threadID_in_group, i), why)
MISTAKES = {
    "C": [(lambda g, p, i: (g, 2 * p + i), "c2, c3 are 8 rows down (row lane / 4 + 8), not 2 columns right")],
    "A": [(lambda g, p, i: (g + 8 * (i // 4), 2 * p + i % 2 + 8 * ((i // 2) % 2)),
           "the registers' order: {a2, a3} are 8 rows down and {a4, a5} 8 columns right (the order of "
           "ldmatrix.x4's four 8x8 matrices: lanes 0-7 address rows 0-7, 8-15 rows 8-15, 16-23 rows 0-7 at "
           "column 8, 24-31 rows 8-15 at column 8)"),
          (lambda g, p, i: (g + 8 * (i // 2), 2 * p + i % 2),
           "A is 16 x 16: a0..a3 sit like C's c0..c3, and a4..a7 the same, 8 columns right")],
    "B": [(_c, "that is C's layout; B is k x n and a lane's B values run down one column: column lane / 4, "
               "rows (k) 2 * (lane % 4) and +1, and 8 rows down for b2, b3"),
          (lambda g, p, i: (2 * p + i, g), "b2, b3 are 8 rows (k) further down, not the next two rows")],
}


def _hint(operand: str, got: tuple[int, int], lane: int, i: int) -> str:
    group, pair = lane // 4, lane % 4
    want = REFERENCE[operand](group, pair, i)
    for mistake, why in MISTAKES[operand]:
        if got == mistake(group, pair, i):
            return why
    if got == REFERENCE[operand](pair, group, i):
        return "lane / 4 (groupID) and lane % 4 (threadID_in_group) are swapped"
    if got == want[::-1]:
        return "row and column are swapped"
    return ""


def check_operand(operand: str, element) -> str:
    """Raise Fail at the first (lane, register) of `element` that is not the PTX layout; the pass reason."""
    rows, cols, per_lane = SHAPES[operand]
    name = operand.lower()
    got = {}
    for lane in range(LANES):
        for i in range(per_lane):
            e = element(lane, i)
            try:
                got[lane, i] = (int(e[0]), int(e[1]))
            except (TypeError, ValueError, IndexError):
                raise Fail(f"{name}_element({lane}, {i}) = {e!r}: return (row, col)") from None
    owner: dict[tuple[int, int], tuple[int, int]] = {}
    for (lane, i), at in got.items():   # first: the lanes cover the matrix once
        hint = _hint(operand, at, lane, i)
        if not (0 <= at[0] < rows and 0 <= at[1] < cols):
            raise Fail(f"lane {lane}'s {name}{i} goes to {at}, outside {operand} ({rows}x{cols})"
                       + (f": {hint}" if hint else ""))
        if at in owner:
            raise Fail(f"lane {lane}'s {name}{i} and lane {owner[at][0]}'s {name}{owner[at][1]} are both element "
                       f"{at}: the {LANES} lanes x {per_lane} registers hold the {rows}x{cols} elements once each"
                       + (f" ({hint})" if hint else ""))
        owner[at] = (lane, i)
    for (lane, i), at in got.items():   # then: the hardware's own layout
        want = REFERENCE[operand](lane // 4, lane % 4, i)
        if at != want:
            hint = _hint(operand, at, lane, i)
            raise Fail(f"lane {lane}'s {name}{i} is element {want} of {operand}, not {at}"
                       + (f": {hint}" if hint else ": lane / 4 picks the row (of A, C) or the column (of B), "
                          "lane % 4 the pair of neighbours"))
    return f"correct: the PTX layout, {rows}x{cols} elements over {LANES} lanes x {per_lane} registers"


class MmaFragments:
    def check_c(self, c_element) -> Result:
        return judge("C fragment (fp32)", (c_element,), lambda: check_operand("C", c_element))

    def check_a(self, a_element) -> Result:
        return judge("A fragment (fp16)", (a_element,), lambda: check_operand("A", a_element))

    def check_b(self, b_element) -> Result:
        return judge("B fragment (fp16)", (b_element,), lambda: check_operand("B", b_element))


def lane_picture(element, operand: str, register: int | None = None) -> str:
    """The operand's elements, each labelled with the lane your map puts it in ('.' for none; only register
    `register`'s elements when given); or why it cannot be drawn yet."""
    if still_blank(element):
        return "not answered yet"
    rows, cols, per_lane = SHAPES[operand]
    grid = [["." for _ in range(cols)] for _ in range(rows)]
    try:
        for lane in range(LANES):
            for i in range(per_lane) if register is None else [register]:
                r, c = (int(x) for x in element(lane, i))
                if 0 <= r < rows and 0 <= c < cols:
                    grid[r][c] = str(lane)
    except Exception as e:  # noqa: BLE001 (the student's code)
        return f"your code fails ({first_line(e)})"
    return "\n".join(" ".join(x.rjust(2) for x in row) for row in grid)


def epilogue_expressions() -> tuple[str, str]:
    """The row and column offsets tensor_core.cuh's epilogue stores lane `lane`'s accumulators at, as written
    there (`row = row0 + mi * 16 + <row>, col = col0 + ni * 8 + <col>`)."""
    m = re.search(r"row\s*=\s*row0\s*\+\s*mi\s*\*\s*16\s*\+\s*([^,;]+),\s*col\s*=\s*col0\s*\+\s*ni\s*\*\s*8\s*\+\s*([^,;]+);",
                  cuda.source("matmul/tensor_core.cuh"))
    if not m:
        raise KeyError("tensor_core.cuh's epilogue has no `row = row0 + mi * 16 + ..., col = col0 + ni * 8 + ...;`")
    return m.group(1).strip(), m.group(2).strip()
