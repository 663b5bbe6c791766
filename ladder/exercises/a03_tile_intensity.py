"""Assignment 03: the arithmetic intensity of a tile, the tile the register file and shared memory
allow, and the bytes its loads add up to (compared with what ncu recorded)."""
from __future__ import annotations

from ladder.exercises.grading import Result, check_number, close, first_line, not_answered, not_yet, passed, unanswered

REGISTER_FILE = 65536 * 4      # bytes per SM: 64 Ki 32-bit registers (every GPU from sm_70 to sm_90)
ACCUMULATOR_SHARE = 0.5        # at most half of it for the fp32 accumulators: addresses, fragments, loop counters need the rest
GRANULE = 16                   # tile sides are multiples of 16 (a tensor-core fragment)


def _intensity(bm: int, bn: int, bk: int) -> float:
    return 2 * bm * bn * bk / (2 * (bm * bk + bk * bn))  # FMAs x 2 over the fp16 A and B tiles loaded


def accumulator_bytes(bm: int, bn: int) -> int:
    return 4 * bm * bn


def shared_bytes(bm: int, bn: int, bk: int, stages: int = 2) -> int:
    return 2 * stages * bk * (bm + bn)


def _best_intensity(register_bytes: int = REGISTER_FILE, largest: int = 1024) -> float:
    """The highest intensity of any tile whose accumulators fit (BK does not change it)."""
    sides = range(GRANULE, largest + 1, GRANULE)
    return max(_intensity(m, n, GRANULE) for m in sides for n in sides
               if accumulator_bytes(m, n) <= ACCUMULATOR_SHARE * register_bytes)


def _tile_load_bytes(M: int, N: int, K: int, bm: int, bn: int) -> float:
    """fp16 bytes the blocks' tile loads add up to: each of the M/BM x N/BN blocks reads BM rows of A
    and BN columns of B, all K long."""
    return 2 * (M * K * (N / bn) + K * N * (M / bm))


class TileIntensity:
    """The checks of FLOPs per byte of one BM x BN x BK step of a tiled fp16 matmul, of the best tile that fits,
    and of the bytes its loads add up to."""

    def check_intensity(self, fn) -> Result:
        task = "tile intensity"
        if unanswered(fn):
            return not_answered(task)
        for bm, bn, bk in [(32, 32, 32), (128, 128, 32), (128, 256, 64), (64, 256, 16)]:
            want = _intensity(bm, bn, bk)
            try:
                got = fn(bm, bn, bk)
            except Exception as e:
                return not_yet(task, f"your function fails at {bm}x{bn}x{bk} ({first_line(e)})")
            if unanswered(got) or not close(got, want):
                if close(got, want * bk) or close(got, want / bk):
                    hint = "it does not depend on BK: BK cancels"
                elif close(got, want / 2):
                    hint = "a multiply-add is 2 FLOPs"
                elif close(got, want * 2):
                    hint = "an fp16 element is 2 bytes: divide by bytes, not elements"
                elif close(got, bm * bn / (bm * bn + bm * bk + bk * bn)) or close(got, want * (bm + bn) / (bm + bn + bm * bn / bk)):
                    hint = "count only the A and B tiles loaded per K step: C stays in registers until the end"
                else:
                    hint = "count 2 FLOPs per multiply-add, and 2 bytes per fp16 element of the A and B tiles"
                return not_yet(task, f"not quite at {bm}x{bn}x{bk}: {got!r}; {hint}")
        return passed(task, "correct: BM*BN/(BM+BN) FLOP/byte, whatever BK is")

    def check_choice(self, bm, bn, bk, smem_bytes: int, register_bytes: int = REGISTER_FILE,
                     stages: int = 2) -> Result:
        task = "tile choice"
        if unanswered(bm) or unanswered(bn) or unanswered(bk):
            return not_answered(task)
        if any(not isinstance(x, int) or x <= 0 or x % GRANULE for x in (bm, bn, bk)):
            return not_yet(task, f"BM, BN and BK are whole multiples of {GRANULE} (a tensor-core fragment)")
        got, acc, smem = _intensity(bm, bn, bk), accumulator_bytes(bm, bn), shared_bytes(bm, bn, bk, stages)
        best, acc_max = _best_intensity(register_bytes), int(ACCUMULATOR_SHARE * register_bytes)
        if acc > acc_max:
            return not_yet(task, f"{bm}x{bn} needs {acc // 1024} KiB of fp32 accumulators, more than half of "
                                 f"the {register_bytes // 1024} KiB register file of an SM ({acc_max // 1024} KiB): "
                                 f"no GPU holds that tile's sums")
        if smem > smem_bytes:
            return not_yet(task, f"{stages} stages of it need {smem // 1024} KiB of shared memory (> "
                                 f"{smem_bytes // 1024} KiB): the intensity does not depend on BK, the shared "
                                 f"memory does")
        if got < 0.95 * best:
            return not_yet(task, f"{bm}x{bn} fits but gives {got:.0f} FLOP/byte, well short of the best that fits: "
                                 "more sums (up to the register budget) or, for as many sums, a squarer tile give more")
        return passed(task, f"correct: {bm}x{bn}x{bk} gives {got:.0f} FLOP/byte (the best that fits: "
                            f"{best:.0f}), {acc // 1024} KiB of accumulators, {stages} stages in "
                            f"{smem // 1024} KiB of shared memory")

    def check_load_bytes(self, fn) -> Result:
        """`fn(M, N, K, bm, bn)`: the bytes all blocks' tile loads add up to, tried at square and ragged sizes."""
        task = "tile loads"
        if unanswered(fn):
            return not_answered(task)
        for M, N, K, bm, bn in [(4096, 4096, 4096, 64, 256), (2048, 8192, 1024, 128, 64), (4096, 4096, 4096, 128, 128)]:
            want = _tile_load_bytes(M, N, K, bm, bn)
            try:
                got = fn(M, N, K, bm, bn)
            except Exception as e:
                return not_yet(task, f"your function fails at {M}x{N}x{K} in {bm}x{bn} tiles ({first_line(e)})")
            if close(got, want):
                continue
            hints = [(want / 2, "an fp16 element is 2 bytes"),
                     (2 * (M * K + K * N), "that loads every element once, the fewest bytes there are; each tile row "
                                           "of A is loaded again by every block of its row of C (N/BN of them)"),
                     (2 * M * K * (N / bn), "that is A's loads alone; B's columns are loaded by every block of their "
                                            "column too"),
                     (2 * K * N * (M / bm), "that is B's loads alone; A's rows are loaded by every block of their row "
                                            "too")]
            hint = next((h for wrong, h in hints if close(got, wrong)), "recount: which blocks load each row of A, "
                                                                          "and each column of B?")
            return not_yet(task, f"not quite at {M}x{N}x{K} in {bm}x{bn} tiles ({got!r}): {hint}")
        return passed(task, "correct: every block loads its BM rows of A and BN columns of B, K long, in fp16")
