// Matmul rung 1 - naive: one thread per output element, C = A·B (fp16 in, fp32 sums, fp16 out).
//
// Idea:       the textbook loop, one thread per C[row][col], every operand read from global memory.
// The catch:  threadIdx.x walks down a column of C (rows), so the 32 threads of a warp read 32 rows
//             of A that are K elements apart: each 2-byte load touches a different 32-byte sector.
// Prediction: far below both roofs: 0.4-1.2% of the fp32 roof (kernels/predictions/matmul_cuda.toml);
//             rung 2 only swaps the index mapping and should be 5-15x faster.
// Signature:  SASS holds global loads (LDG) and no shared memory (LDS/STS) or barriers (BAR).
#include <cuda_fp16.h>

extern "C" __global__ void matmul(const half* A, const half* B, half* C, int M, int N, int K) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;  // consecutive threads: consecutive rows
    const int col = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float sum = 0.0f;
    for (int k = 0; k < K; ++k)
        sum += __half2float(A[(size_t)row * K + k]) * __half2float(B[(size_t)k * N + col]);
    C[(size_t)row * N + col] = __float2half(sum);
}
