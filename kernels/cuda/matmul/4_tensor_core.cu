// Matmul rung 4 - tensor cores: mma.sync (m16n8k16) fed by ldmatrix, fp16 in, fp32 accumulate.
//
// Idea:       a 128x128 block tile, 8 warps of 64x32; each BK=32 step loads the A and B tiles into
//             shared memory (16-byte loads through registers), then every warp runs 16 mma.sync per
//             16-wide k slice on fragments that ldmatrix reads (tensor_core.cuh).
// Prediction: the math moves from the fp32 roof (~60 TFLOP/s) to the tensor-core roof (~700): 5-15x
//             rung 3b (a hit: >= 5x; kernels/predictions/matmul_cuda.toml). But loads and math still
//             take turns (load, barrier, compute, barrier), so expect well under half of cuBLAS.
// Signature:  HMMA in the SASS (two HMMA.1688 per mma on sm_75), LDSM (ldmatrix), LDG.E.128.
#include "tensor_core.cuh"

#define BM 128
#define BN 128
#define BK 32
#define WARPS_M 2
#define WARPS_N 4
#define THREADS (32 * WARPS_M * WARPS_N)
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N, LDA = BK + PAD, LDB = BN + PAD;

// The block at (m0, n0) of C (M x N) = A (M x K) * B (K x N, row stride ldb); K and ldb multiples of 8.
__device__ __forceinline__ void matmul_block(const half* A, const half* B, half* C, int M, int N, int K, int ldb,
                                             int m0, int n0) {
    __shared__ __align__(16) half As[BM * LDA];
    __shared__ __align__(16) half Bs[BK * LDB];
    using CopyA = TileCopy<BM, BK, THREADS>;
    using CopyB = TileCopy<BK, BN, THREADS>;
    const int warp = threadIdx.x / 32, wm = warp / WARPS_N, wn = warp % WARPS_N;
    float acc[WM / 16][WN / 8][4] = {};
    uint4 a_regs[CopyA::PER_THREAD], b_regs[CopyB::PER_THREAD];
    for (int k0 = 0; k0 < K; k0 += BK) {
        CopyA::to_registers(a_regs, A + (size_t)m0 * K + k0, K, M - m0, K - k0);
        CopyB::to_registers(b_regs, B + (size_t)k0 * ldb + n0, ldb, K - k0, ldb - n0);
        CopyA::to_shared(As, LDA, a_regs);
        CopyB::to_shared(Bs, LDB, b_regs);
        __syncthreads();  // tiles complete
        warp_tile_mma<WM, WN, BK, LDA, LDB>(acc, As + wm * WM * LDA, Bs + wn * WN);
        __syncthreads();  // tiles consumed
    }
    store_accumulators<WM, WN>(acc, C, M, N, m0 + wm * WM, n0 + wn * WN);
}

extern "C" __global__ void __launch_bounds__(THREADS)
matmul(const half* A, const half* B, half* C, int M, int N, int K, int ldb) {
    matmul_block(A, B, C, M, N, K, ldb, blockIdx.y * BM, blockIdx.x * BN);
}
