// Matmul rung 7 (Hopper only, sm_90a) - warpgroup MMA: wgmma reads both tiles straight from shared memory.
//
// Idea:       on Hopper, mma.sync (rungs 4-6) runs on a legacy path at a fraction of the tensor
//             cores' rate. wgmma, Hopper's own instruction, lets a warpgroup (4 warps, 128 threads)
//             multiply a 64 x 256 x 16 slice asynchronously, A and B read from shared memory through
//             64-bit descriptors: no ldmatrix, no A/B fragments in registers. The tiles must be in a
//             layout wgmma reads: here the 128-byte swizzle (copy_swizzled). Copies stay cp.async as
//             in rung 5; wgmma runs one tile behind its issue (wait_group 1).
// Prediction: well above rung 6, 1.5-2.5x (kernels/predictions/matmul_cuda.toml), toward cuBLAS
//             (which adds TMA copies, warp specialization and thread-block clusters).
//             Variants that ran slower: kernels/NOTES.md.
// Signature:  HGMMA in the sm_90a SASS (no HMMA); LDGSTS for the copies.
#include "tensor_core.cuh"

#ifndef STAGES
#define STAGES 4
#endif
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "the Hopper matmul rungs (7-12) use wgmma: compile them for sm_90a (the launcher does)"
#endif
#define BM 128          // two warpgroups of 64 rows
#define BN 256          // one m64n256k16 wgmma per warpgroup and k16 step
#define BK 64           // one 128-byte swizzle row of halves
#define THREADS 256     // two warpgroups
constexpr int A_STAGE = BM * BK, B_STAGE = BK * BN;           // halves per buffer, no padding
// The 128-byte swizzle (tensor_core.cuh): 16-byte chunk c of row r sits at chunk c ^ (r % 8), which spreads
// each column of an 8-row atom over all 32 banks.
template <int ROWS, int COLS>
__device__ __forceinline__ void copy_swizzled(half* s, const half* g, int ldg, int rows_left, int cols_left) {
    constexpr int PIECES = ROWS * COLS / 8;
    static_assert(PIECES % THREADS == 0, "pieces split evenly over threads");
#pragma unroll
    for (int i = 0; i < PIECES / THREADS; ++i) {
        const int p = threadIdx.x + i * THREADS;
        const int row = p / (COLS / 8), c = p % (COLS / 8);  // consecutive threads: one row, coalesced
        const bool inside = row < rows_left && c * 8 < cols_left;
        const half* src = inside ? g + (size_t)row * ldg + c * 8 : g;
        half* dst = s + (c / 8 * ROWS + row) * 64 + ((c % 8) ^ (row % 8)) * 8;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                     :: "r"(smem_address(dst)), "l"(src), "r"(inside ? 16 : 0));
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
matmul(const half* A, const half* B, half* C, int M, int N, int K, int ldb) {
    extern __shared__ __align__(128) half smem_raw[];
    half* As = smem_raw + swizzle_atom_offset(smem_raw);  // 1024-byte aligned, as the swizzle needs
    half* Bs = As + STAGES * A_STAGE;
    const int warpgroup = threadIdx.x / 128, warp_in_group = threadIdx.x / 32 % 4;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int k_tiles = (K + BK - 1) / BK;
    float acc[1][BN / 8][4] = {};
    auto fetch = [&](int kt) {  // start copying k-tile kt into buffer kt % STAGES
        const int s = kt % STAGES, k0 = kt * BK;
        copy_swizzled<BM, BK>(As + s * A_STAGE, A + (size_t)m0 * K + k0, K, M - m0, K - k0);
        copy_swizzled<BK, BN>(Bs + s * B_STAGE, B + (size_t)k0 * ldb + n0, ldb, K - k0, ldb - n0);
    };
    // wgmma lags one tile (wait_group 1), so a buffer frees two tiles later: copies run STAGES-2 ahead.
    for (int kt = 0; kt < STAGES - 2; ++kt) {
        if (kt < k_tiles) fetch(kt);
        cp_async_commit();
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
        const int s = kt % STAGES;
        cp_async_wait<STAGES - 3>();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // cp.async data -> visible to wgmma
        __syncthreads();  // k-tile kt landed; kt-2's wgmmas done in every warpgroup
        if (kt + STAGES - 2 < k_tiles) fetch(kt + STAGES - 2);
        cp_async_commit();
        const half* a = As + s * A_STAGE + warpgroup * 64 * 64;  // this group's 64 rows
        const half* b = Bs + s * B_STAGE;
        wgmma_k_tile<BK>(acc, a, b);
        wgmma_wait<1>();  // k-tile kt-1's wgmmas done
    }
    wgmma_wait<0>();
    store_accumulators<16, BN>(acc, C, M, N, m0 + warpgroup * 64 + warp_in_group * 16, n0);
}
