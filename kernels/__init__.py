"""The kernels: CUDA C++ sources under kernels/cuda/, Triton kernels under kernels/triton/,
and thin Python launchers (one module per problem) that validate inputs and launch."""
import ladder  # noqa: F401  (decides GPU vs interpreter before any @triton.jit runs)
