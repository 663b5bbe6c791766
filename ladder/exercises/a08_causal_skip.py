"""Assignment 08: causal block skipping in the flash attention kernel (kernels/triton/attention.py).

One program holds the queries start_m .. start_m + BLOCK_M - 1 (BLOCK_M a multiple of BLOCK_N) and walks
the keys in two passes: [0, unmasked_end) in blocks that need no mask at all, then [unmasked_end, end)
with the causal (and past-S) mask; keys from `end` on are never loaded. The student writes
causal_ranges(start_m, block_m, S) -> (unmasked_end, end). The check tries every query block of
ragged and whole sequences: no key after a query may reach the unmasked pass, no key a query needs may
be skipped, and neither pass may do work that the other (or skipping) makes unneeded.
"""
from __future__ import annotations

from kernels.triton.attention import causal_key_range as _reference  # the kernel's rule, in Python
from ladder.exercises.grading import Fail, Result, check_number, judge

TASK = "causal ranges"
CASES = [(64, 16, 16), (70, 32, 16), (100, 64, 32), (33, 16, 16), (128, 128, 64), (1, 16, 16)]  # (S, BLOCK_M, BLOCK_N)




def _blocks_computed(S: int, block_m: int, block_n: int) -> int:
    """Key blocks of BLOCK_N that all query blocks visit, causal."""
    return sum(-(-_reference(s, block_m, S)[1] // block_n) for s in range(0, S, block_m))


class CausalSkip:
    def check_ranges(self, causal_ranges) -> Result:
        def body() -> str:
            for S, bm, bn in CASES:
                for start_m in range(0, S, bm):
                    got = causal_ranges(start_m, bm, S)
                    try:
                        lo, hi = int(got[0]), int(got[1])
                    except (TypeError, ValueError, IndexError):
                        raise Fail(f"causal_ranges({start_m}, {bm}, {S}) = {got!r}: return (unmasked_end, end)") from None
                    last = min(S, start_m + bm) - 1     # the last query of this block
                    where = f"S = {S}, BLOCK_M = {bm}, queries {start_m} to {last}"
                    if lo % bn:
                        raise Fail(f"at {where}: unmasked_end = {lo} is not a whole number of key blocks "
                                   f"({bn}): the passes step BLOCK_N keys at a time")
                    if lo > start_m:
                        raise Fail(f"at {where}: the unmasked pass reaches key {lo - 1}, after query {start_m}: "
                                   f"without a mask that key gets a weight it must not have")
                    if hi < last + 1:
                        raise Fail(f"at {where}: end = {hi} skips key {hi}, which query {last} attends to")
                    if hi > last + 1:
                        raise Fail(f"at {where}: end = {hi} visits keys past the last query ({last})"
                                   + (" and past S" if hi > S else "") + ": they are all masked; stop there")
                    if lo < start_m:
                        raise Fail(f"at {where}: keys {lo} to {start_m - 1} come before every query of the block, "
                                   f"yet go through the masked pass: its compares are wasted there")
            return ("correct: keys before start_m unmasked, the diagonal blocks masked, nothing after the "
                    "block's last query (or S) loaded")
        return judge(TASK, (causal_ranges,), body)

    def check_fraction(self, answer, S: int, block_m: int, block_n: int) -> Result:
        blocks = -(-S // block_n) * -(-S // block_m)
        want = _blocks_computed(S, block_m, block_n) / blocks
        return check_number(f"fraction of score blocks computed (S = {S}, {block_m}x{block_n})", answer, want, [
            (0.5, "the blocks on the diagonal are computed whole (masked inside): a little more than half"),
            (1.0, "that is without skipping: blocks wholly after the diagonal are never loaded"),
            ((S + 1) / (2 * S), "that counts single scores; the kernel computes whole blocks")], "", rel=0.0002)
