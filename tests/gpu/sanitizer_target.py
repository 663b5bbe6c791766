"""A compute-sanitizer target: every CUDA matmul rung once, at two ragged shapes.

    compute-sanitizer --tool memcheck --error-exitcode 9 python tests/gpu/sanitizer_target.py
    compute-sanitizer --tool racecheck --error-exitcode 9 python tests/gpu/sanitizer_target.py
"""
import torch
import kernels.matmul as mm
from ladder.check import compare
for shape in [(255, 257, 71), (130, 260, 64)]:
    M, N, K = shape
    a, b = torch.randn(M, K, device="cuda").half(), torch.randn(K, N, device="cuda").half()
    for r in mm.PROBLEM.rungs:
        if r.backend == "cuda":
            out = r.run(a, b)
            torch.cuda.synchronize()
            print(shape, r.name, compare(out, a.double() @ b.double()))
