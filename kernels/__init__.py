"""The kernels: CUDA C++ sources and their launchers under kernels/cuda/, Triton kernels under kernels/triton/, and
one module per problem here (matmul.py, attention.py, ...) that registers both ladders' rungs, searches and checks.
The kernel files import only torch, triton, CuPy and ladder.runtime."""
from ladder.runtime import world  # noqa: F401  (decides GPU vs interpreter before any @triton.jit runs)
