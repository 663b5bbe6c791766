"""Assignment 07: the order in which a persistent matmul walks C's tiles (Triton rung 6's GROUP_M), and
the A and B bytes the tiles in flight at once share in L2.

The student writes tile_coords(tile, tiles_m, tiles_n, group_m) -> (tile_m, tile_n) in plain Python
(the same arithmetic as `tile_coords` in kernels/triton/matmul.py): groups of group_m tile rows, each
walked down its column before moving right; the last group may be shorter. The check compares it with
that rule on ragged grids, naming the first tile that is visited twice, never, or out of order.
"""
from __future__ import annotations

from ladder.exercises.grading import Fail, Result, check_number, judge

TASK = "tile order"
GRIDS = [(4, 4, 1), (4, 4, 2), (8, 6, 4), (7, 5, 3), (5, 9, 8), (3, 2, 4), (32, 16, 16)]  # (tiles_m, tiles_n, group_m)


def _reference(tile: int, tiles_m: int, tiles_n: int, group_m: int) -> tuple[int, int]:
    per_group = group_m * tiles_n
    first_m = (tile // per_group) * group_m
    rows = min(tiles_m - first_m, group_m)          # the last group may be shorter
    return first_m + (tile % per_group) % rows, (tile % per_group) // rows


def order_picture(tiles_m: int, tiles_n: int, group_m: int) -> str:
    """The kernel's order on one grid: the number of the tile computed in each place of C."""
    grid = [[0] * tiles_n for _ in range(tiles_m)]
    for t in range(tiles_m * tiles_n):
        m, n = _reference(t, tiles_m, tiles_n, group_m)
        grid[m][n] = t
    return "\n".join(f"  {' '.join(f'{x:2d}' for x in row)}" for row in grid)


def footprint(order, tiles_m: int, tiles_n: int, group_m: int, in_flight: int) -> tuple[int, int]:
    """(tile rows of A, tile columns of B) that the first `in_flight` tiles read."""
    tiles = [order(t, tiles_m, tiles_n, group_m) for t in range(min(in_flight, tiles_m * tiles_n))]
    return len({m for m, _ in tiles}), len({n for _, n in tiles})


def _panel_bytes(M: int, N: int, K: int, bm: int, bn: int, group_m: int, in_flight: int) -> float:
    """fp16 bytes of the A row panels and B column panels (K long) that the tiles in flight read."""
    rows, cols = footprint(_reference, -(-M // bm), -(-N // bn), group_m, in_flight)
    return 2 * K * (rows * bm + cols * bn)


class GroupOrder:
    def check_order(self, tile_coords) -> Result:
        def body() -> str:
            for tiles_m, tiles_n, group_m in GRIDS:
                seen = {}
                for t in range(tiles_m * tiles_n):
                    got = tile_coords(t, tiles_m, tiles_n, group_m)
                    try:
                        got = (int(got[0]), int(got[1]))
                    except (TypeError, ValueError, IndexError):
                        raise Fail(f"tile_coords({t}, ...) = {got!r}: return (tile_m, tile_n)") from None
                    where = f"on a {tiles_m}x{tiles_n} grid of tiles with group_m = {group_m}, tile {t}"
                    if not (0 <= got[0] < tiles_m and 0 <= got[1] < tiles_n):
                        raise Fail(f"{where} goes to {got}, outside the grid"
                                   + (": the last group has only tiles_m - first_m rows" if tiles_m % group_m else ""))
                    if got in seen:
                        raise Fail(f"{where} goes to {got}, where tile {seen[got]} went already"
                                   + (": the last group is shorter (min(tiles_m - first_m, group_m) rows)"
                                      if tiles_m % group_m else ""))
                    seen[got] = t
                    want = _reference(t, tiles_m, tiles_n, group_m)
                    if got != want:
                        raise Fail(f"{where} goes to {got}, not {want}: within a group, walk down the group's "
                                   f"rows first (tile % rows), then move right one column")
            return "correct: every tile once, in groups of group_m rows walked column by column, short last group too"
        return judge(TASK, (tile_coords,), body)

    def check_panels(self, answer, M, N, K, bm, bn, group_m, in_flight) -> Result:
        want = _panel_bytes(M, N, K, bm, bn, group_m, in_flight)
        tm, tn = -(-M // bm), -(-N // bn)
        rows, cols = footprint(_reference, tm, tn, group_m, in_flight)
        return check_number(f"panels in flight (group_m = {group_m})", answer, want, [
            (want / 2, "an fp16 element is 2 bytes"),
            (2 * K * (rows * bm + cols * bn) / K, "each panel is K long: A's panel is BM x K, B's is K x BN"),
            (_panel_bytes(M, N, K, bm, bn, 1, in_flight), "that is row-major order (group_m = 1)"),
            (2 * K * (rows * bm), "count B's column panels too"),
            (2 * K * (cols * bn), "count A's row panels too")], "bytes")
