// Matmul rung 3b - register-blocked: each thread computes an 8x8 sub-tile of a 128x128 block tile.
//
// Idea:       a thread keeps 8 values of A and 8 of B in registers and does all 64 products of
//             them: 16 shared-memory loads feed 64 FMAs (rung 3: 2 loads per FMA), and the block
//             tile grows to 128x128, so each global element is reused 128 times.
// Prediction: shared memory no longer sets the pace: 2-6x rung 3 (a hit: >= 2x;
//             kernels/predictions/matmul_cuda.toml). This is the best the CUDA cores do here;
//             rung 4 must beat it >= 5x with tensor cores.
// Signature:  FFMA per shared-memory load rises from under 1 (rung 3) to 16: LDS.128 brings four
//             floats, and each of the 8x8 products reuses them.
#include <cuda_fp16.h>

#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8
#define THREADS ((BM / TM) * (BN / TN))  // 256

extern "C" __global__ void __launch_bounds__(THREADS)
matmul(const half* A, const half* B, half* C, int M, int N, int K) {
    __shared__ float As[BK][BM + 4];  // transposed, so a thread reads its TM rows of one k together;
    __shared__ float Bs[BK][BN];      // +4: a warp's transposing stores, As[k][r] with k = lane % 8 and
                                      // r = lane / 8, land in bank (4k + r) % 32, a different bank a lane
    const int tid = threadIdx.x;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int tm = (tid / (BN / TN)) * TM, tn = (tid % (BN / TN)) * TN;  // this thread's sub-tile
    float acc[TM][TN] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = tid; i < BM * BK; i += THREADS) {
            const int r = i / BK, k = i % BK;
            As[k][r] = (m0 + r < M && k0 + k < K) ? __half2float(A[(size_t)(m0 + r) * K + k0 + k]) : 0.0f;
        }
        for (int i = tid; i < BK * BN; i += THREADS) {
            const int k = i / BN, c = i % BN;
            Bs[k][c] = (k0 + k < K && n0 + c < N) ? __half2float(B[(size_t)(k0 + k) * N + n0 + c]) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[k][tm + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[k][tn + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];  // an outer product
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int row = m0 + tm + i, col = n0 + tn + j;
            if (row < M && col < N) C[(size_t)row * N + col] = __float2half(acc[i][j]);
        }
}
