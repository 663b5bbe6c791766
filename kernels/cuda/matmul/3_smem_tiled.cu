// Matmul rung 3 - shared-memory tiled: a block stages 32x32 tiles of A and B in shared memory.
//
// Idea:       each element a block loads from global memory is used 32 times from shared memory
//             (one load per thread per tile, then 32 FMAs), instead of once per FMA.
// Prediction: global traffic drops 32x, but each FMA still needs two shared-memory loads, so the
//             shared-memory pipe, not DRAM, becomes the limit: a modest gain over rung 2, 1.3-2x
//             (kernels/predictions/matmul_cuda.toml).
// Signature:  LDS and STS (shared memory) and BAR (__syncthreads) appear in the SASS.
#include <cuda_fp16.h>

#define TILE 32

extern "C" __global__ void matmul(const half* A, const half* B, half* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float sum = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        // every thread loads one element of each tile (zero outside the matrix): coalesced along x
        As[ty][tx] = (row < M && k0 + tx < K) ? __half2float(A[(size_t)row * K + k0 + tx]) : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? __half2float(B[(size_t)(k0 + ty) * N + col]) : 0.0f;
        __syncthreads();  // the tiles are complete before anyone reads them
        for (int k = 0; k < TILE; ++k)
            sum += As[ty][k] * Bs[k][tx];  // As: one address per warp (broadcast); Bs: 32 banks
        __syncthreads();  // everyone is done with the tiles before they are overwritten
    }
    if (row < M && col < N) C[(size_t)row * N + col] = __float2half(sum);
}
