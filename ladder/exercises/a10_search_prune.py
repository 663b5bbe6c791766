"""Assignment 10: designing a search space's prune (Triton matmul rung 6, kernels/triton/matmul.py).

Before timing anything, an autotuner should drop the configurations that cannot run or cannot win.
The student writes prune_reason(c, smem_per_block, hopper) -> a reason (str) or None for a config
c = {BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages}: too many fp32 accumulators per thread (the
registers spill), or pipeline buffers larger than the shared memory a block may use (num_stages
buffers of an fp16 A and B tile on Hopper, num_stages - 1 before it). The check compares the kept set
with the repository's own rule on three GPUs' limits and names the first configuration judged wrongly.
"""
from __future__ import annotations

import itertools

from ladder.exercises.grading import Fail, Result, judge

TASK = "search-space prune"
MAX_ACCUMULATORS = 128   # fp32 accumulator registers per thread; more spill (a thread has 255 registers in all)
SPACE = dict(BLOCK_M=[64, 128, 256], BLOCK_N=[64, 128, 256], BLOCK_K=[32, 64, 128],
             num_warps=[4, 8], num_stages=[2, 3, 4, 5])
GPUS = [("H100", 227 * 1024, True), ("A100", 163 * 1024, False), ("T4", 64 * 1024, False)]


def configs() -> list[dict]:
    return [dict(zip(SPACE, values)) for values in itertools.product(*SPACE.values())]


def accumulators(c: dict) -> int:
    return c["BLOCK_M"] * c["BLOCK_N"] // (32 * c["num_warps"])


def shared_bytes(c: dict, hopper: bool) -> int:
    buffers = c["num_stages"] if hopper else max(1, c["num_stages"] - 1)
    return 2 * buffers * c["BLOCK_K"] * (c["BLOCK_M"] + c["BLOCK_N"])


def reference(c: dict, smem_per_block: int, hopper: bool) -> str | None:
    if accumulators(c) > MAX_ACCUMULATORS:
        return f"{accumulators(c)} accumulators per thread"
    if shared_bytes(c, hopper) > smem_per_block:
        return f"{shared_bytes(c, hopper) // 1024} KiB of shared memory"
    return None


def _name(c: dict) -> str:
    return f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']}, {c['num_warps']} warps, {c['num_stages']} stages"


class SearchPrune:
    def check(self, prune_reason) -> Result:
        def body() -> str:
            kept = {}
            for gpu, smem, hopper in GPUS:
                kept[gpu] = 0
                for c in configs():
                    want, got = reference(c, smem, hopper), prune_reason(dict(c), smem, hopper)
                    if got is not None and not isinstance(got, str):
                        raise Fail(f"return a reason (a str) or None, not {got!r}")
                    kept[gpu] += want is None
                    if (got is None) == (want is None):
                        continue
                    acc, sb = accumulators(c), shared_bytes(c, hopper)
                    where = f"on the {gpu} ({smem // 1024} KiB per block{', Hopper' if hopper else ''}), {_name(c)}"
                    if got is None:
                        raise Fail(f"{where} is kept, but needs {want}: "
                                   + (f"{c['BLOCK_M']}·{c['BLOCK_N']} sums over {32 * c['num_warps']} threads"
                                      if acc > MAX_ACCUMULATORS else
                                      f"{'num_stages' if hopper else 'num_stages - 1'} buffers of an fp16 A and "
                                      f"B tile, 2·BK·(BM + BN) bytes each"))
                    raise Fail(f"{where} is pruned ({got}), but it fits: {acc} accumulators per thread "
                               f"(<= {MAX_ACCUMULATORS}), {sb // 1024} KiB of buffers"
                               + ("" if hopper else " (before Hopper, num_stages - 1 buffers)"))
            return ("correct: the same configurations kept as the repository's rule ("
                    + ", ".join(f"{g} {n} of {len(configs())}" for g, n in kept.items()) + ")")
        return judge(TASK, (prune_reason,), body)
