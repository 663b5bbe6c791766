// Matmul rung 2 - coalesced: the same loop, with threadIdx.x walking along a row of C.
//
// Idea:       consecutive threads take consecutive columns: a warp reads 32 neighbouring elements
//             of a row of B (64 bytes, two sectors) and one element of A that all 32 share.
// Prediction: the sectors fetched per load drop from 32 to ~2, so 5-15x faster than rung 1 (a hit:
//             >= 5x; kernels/predictions/matmul_cuda.toml); still
//             every operand comes from L1/L2, K times over, so far below the fp32 roof.
// Signature:  the same SASS as rung 1 (LDG only); ncu shows ~2 sectors per request instead of ~32.
#include <cuda_fp16.h>

extern "C" __global__ void matmul(const half* A, const half* B, half* C, int M, int N, int K) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;  // consecutive threads: consecutive columns
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float sum = 0.0f;
    for (int k = 0; k < K; ++k)
        sum += __half2float(A[(size_t)row * K + k]) * __half2float(B[(size_t)k * N + col]);
    C[(size_t)row * N + col] = __float2half(sum);
}
