"""A compute-sanitizer target: every CUDA rung that runs here once, at ragged shapes (matmul, attention, or both);
under KERNEL_LADDER_EMULATE=sm_75 (or sm_80) the emulated GPU's code paths.

    compute-sanitizer --tool memcheck --error-exitcode 9 python tests/gpu/sanitizer_target.py [matmul|attention]
    compute-sanitizer --tool racecheck --error-exitcode 9 python tests/gpu/sanitizer_target.py [matmul|attention]
    KERNEL_LADDER_EMULATE=sm_75 compute-sanitizer --tool memcheck ... (the same, on the T4's code paths)
"""
import sys

import torch

import kernels.attention as at
import kernels.matmul as mm
from ladder.check import compare
from ladder.runner import unavailable
from ladder.world import WORLD

print(WORLD.name)
problems = sys.argv[1:] or ["matmul", "attention"]
wrong = []


def report(shape, name, verdict):
    print(shape, name, verdict)
    if not verdict.ok:
        wrong.append((shape, name))


if "matmul" in problems:
    for M, N, K in [(255, 257, 71), (130, 260, 64)]:
        a, b = torch.randn(M, K, device="cuda").half(), torch.randn(K, N, device="cuda").half()
        for r in mm.PROBLEM.rungs:
            if r.backend == "cuda" and unavailable(r) is None:
                out = r.run(a, b)
                torch.cuda.synchronize()
                report((M, N, K), r.name, compare(out, a.double() @ b.double()))
if "attention" in problems:
    # rung 6 also with a second configuration: 8 warps, 128 queries a block (the heavy-first order on causal)
    runs = [(r.name, r.run) for r in at.PROBLEM.rungs if r.backend == "cuda" and unavailable(r) is None]
    runs.append(("6_autotuned 128x32x8w", lambda q, k, v, c: at.run_config(dict(BLOCK_M=128, BLOCK_N=32, WARPS=8,
                                                                               STAGES=3), q, k, v, c)))
    for shape in [(1, 2, 100, 64, 1), (1, 2, 129, 64, 0), (1, 1, 130, 128, 0), (1, 1, 200, 128, 1)]:
        q, k, v = (torch.randn(*shape[:4], device="cuda").half() for _ in range(3))
        for name, run in runs:
            out = run(q, k, v, bool(shape[4]))
            torch.cuda.synchronize()
            report(shape, name, compare(out, at.reference(q, k, v, bool(shape[4]))))
sys.exit(f"wrong results: {wrong}" if wrong else 0)
