// Matmul rung 6 - autotuned: rung 5's kernel with every tile parameter chosen by a search.
//
// Idea:       the best BM, BN, BK, warp layout and STAGES depend on the GPU (shared memory,
//             registers, SM count) and on the shape (enough blocks to fill 132 SMs?). The launcher
//             compiles one variant per configuration (-D), prunes those that cannot fit, times the
//             rest and caches the winner (ladder/autotune.py, kernels/matmul.py). One more knob:
//             GROUP_M, the order blocks run in, so that blocks running together share tiles in L2.
// Prediction: 1.1-1.3x rung 5 at large sizes (kernels/predictions/matmul_cuda.toml); more where
//             rung 5's fixed tile fits badly.
// Signature:  as rung 5 (HMMA, LDGSTS); the choice shows in the search report, not the SASS.
#include "5_pipelined.cu"

#ifndef GROUP_M
#define GROUP_M 8
#endif

// Blocks are numbered down GROUP_M block-rows at a time, then across: the GROUP_M x (N/BN) blocks
// that run close together read the same GROUP_M row strips of A and share each column strip of B.
extern "C" __global__ void __launch_bounds__(THREADS)
matmul_grouped(const half* A, const half* B, half* C, int M, int N, int K, int ldb) {
    const int grid_m = (M + BM - 1) / BM, grid_n = (N + BN - 1) / BN;
    const int per_group = GROUP_M * grid_n, first_m = blockIdx.x / per_group * GROUP_M;
    const int rows = min(grid_m - first_m, GROUP_M), in_group = blockIdx.x % per_group;
    matmul_block(A, B, C, M, N, K, ldb, (first_m + in_group % rows) * BM, in_group / rows * BN);
}
