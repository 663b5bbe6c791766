// Matmul rung 5 - software-pipelined: cp.async fills STAGES shared-memory buffers ahead of the math.
//
// Idea:       while the warps multiply tile k, the copies of tiles k+1 .. k+STAGES-1 are already in
//             flight (cp.async, sm_80+: global -> shared with no register round trip), so memory
//             latency hides behind tensor-core work; one barrier per tile instead of two.
//             sm_75 has no cp.async: there the next tile's loads wait in registers while the warps
//             compute (a register-staged double buffer, STAGES = 2), and the launcher says so.
// Prediction: rung 4 stalled on every load; hiding them should bring 1.3-2x, toward cuBLAS
//             (kernels/predictions/matmul_cuda.toml).
// Signature:  LDGSTS (cp.async) and LDGDEPBAR/DEPBAR on sm_80/sm_90; none on sm_75.
// Tile sizes come from the launcher (-D); the defaults are its choice for sm_80+.
#include "tensor_core.cuh"

#ifndef BM
#define BM 128
#define BN 128
#define BK 32
#define WARPS_M 2
#define WARPS_N 4
#define STAGES 4
#endif
#define THREADS (32 * WARPS_M * WARPS_N)
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N, LDA = BK + PAD, LDB = BN + PAD;
constexpr int A_STAGE = BM * LDA, B_STAGE = BK * LDB;  // halves per buffer

// The block at (m0, n0) of C (M x N) = A (M x K) * B (K x N, row stride ldb); K and ldb multiples of 8.
// Dynamic shared memory: STAGES x (A_STAGE + B_STAGE) halves.
__device__ __forceinline__ void matmul_block(const half* A, const half* B, half* C, int M, int N, int K, int ldb,
                                             int m0, int n0) {
    extern __shared__ __align__(16) half smem[];
    half* As = smem;
    half* Bs = smem + STAGES * A_STAGE;
    using CopyA = TileCopy<BM, BK, THREADS>;
    using CopyB = TileCopy<BK, BN, THREADS>;
    const int warp = threadIdx.x / 32, wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int tiles = (K + BK - 1) / BK;
    float acc[WM / 16][WN / 8][4] = {};
    auto compute = [&](int stage) {
        warp_tile_mma<WM, WN, BK, LDA, LDB>(acc, As + stage * A_STAGE + wm * WM * LDA, Bs + stage * B_STAGE + wn * WN);
    };
#if __CUDA_ARCH__ >= 800
    auto fetch = [&](int t) {  // start copying tile t into buffer t % STAGES
        const int k0 = t * BK, s = t % STAGES;
        CopyA::async_to_shared(As + s * A_STAGE, LDA, A + (size_t)m0 * K + k0, K, M - m0, K - k0);
        CopyB::async_to_shared(Bs + s * B_STAGE, LDB, B + (size_t)k0 * ldb + n0, ldb, K - k0, ldb - n0);
    };
    for (int t = 0; t < STAGES - 1; ++t) {  // prologue: STAGES-1 tiles in flight
        if (t < tiles) fetch(t);
        cp_async_commit();  // one group per tile, empty or not, so the counting below holds
    }
    for (int t = 0; t < tiles; ++t) {
        cp_async_wait<STAGES - 2>();  // tile t has landed (this thread's copies) ...
        __syncthreads();              // ... everyone's; and everyone is done with tile t-1's buffer
        if (t + STAGES - 1 < tiles) fetch(t + STAGES - 1);  // reuses the buffer of tile t-1
        cp_async_commit();
        compute(t % STAGES);
    }
#else
    static_assert(STAGES == 2, "without cp.async the pipeline is a register-staged double buffer");
    uint4 a_regs[CopyA::PER_THREAD], b_regs[CopyB::PER_THREAD];
    auto load = [&](int t) {
        CopyA::to_registers(a_regs, A + (size_t)m0 * K + t * BK, K, M - m0, K - t * BK);
        CopyB::to_registers(b_regs, B + (size_t)t * BK * ldb + n0, ldb, K - t * BK, ldb - n0);
    };
    auto store = [&](int s) {
        CopyA::to_shared(As + s * A_STAGE, LDA, a_regs);
        CopyB::to_shared(Bs + s * B_STAGE, LDB, b_regs);
    };
    load(0);
    store(0);
    __syncthreads();
    for (int t = 0; t < tiles; ++t) {
        if (t + 1 < tiles) load(t + 1);  // in flight while the tensor cores work on tile t
        compute(t % 2);
        if (t + 1 < tiles) store((t + 1) % 2);
        __syncthreads();
    }
#endif
    store_accumulators<WM, WN>(acc, C, M, N, m0 + wm * WM, n0 + wn * WN);
}

extern "C" __global__ void __launch_bounds__(THREADS)
matmul(const half* A, const half* B, half* C, int M, int N, int K, int ldb) {
    matmul_block(A, B, C, M, N, K, ldb, blockIdx.y * BM, blockIdx.x * BN);
}
