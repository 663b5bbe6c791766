// Matmul rung 9 (Hopper only, sm_90a) - a persistent grid in grouped tile order: rung 8's kernel, one block
// per SM, each walking many tiles of C in an order that keeps their A and B panels in L2.
//
// Idea:       rung 8 launches one block per 128 x 256 tile of C, numbered row by row: at 8192^3 the 132
//             blocks running at once span 4 tile rows and the whole width of C, so they read 4 row panels
//             of A and all 32 column panels of B (8192 columns) in each k step; the B panels leave L2 before
//             the next tile row comes back for them, and ncu counts 5.34 GB read from DRAM (cuBLAS: 1.27).
//             Here the grid is one block per SM (the launcher: min(SMs, tiles)) and each block loops over
//             the tiles blockIdx.x, + gridDim.x, ... in rung 6's grouped order: GROUP_M tile rows down one
//             tile column, then the next column. The ~132 tiles in flight then form a near-square of C,
//             16 tile rows x ~8 tile columns (2048 rows of A and ~2100 columns of B per k step, rather than
//             512 + 8192), which L2 holds: about 1 GB from DRAM at 8192^3 (a round of tiles reads its panels
//             about once). And the ring runs on across tiles: the producer's and the consumers' k-tile
//             counters (stage kt % STAGES, parity kt / STAGES) never restart, so while the consumers store
//             one tile's accumulators the producer already fills the ring with the next tile's k-tiles,
//             and the next tile's first wgmma finds its data waiting (rung 8: a new block starts cold).
//             Tiles, warpgroups, ring and setmaxnreg are rung 8's.
// Prediction: at 8192^3, where rung 8 waited on DRAM, 1.2-1.45x rung 8; at 4096^3, where it did not, only the
//             overlapped epilogue and the warm ring: 1.02-1.1x. Both near 0.85-0.95x cuBLAS (~610-640 TFLOP/s
//             on the H100). What is left: the consumers still stop multiplying while they store (cuBLAS
//             stores through shared memory with the TMA, or ping-pongs two tiles), and 2-CTA clusters.
// Signature:  as rung 8: UTMALDG (5, in the producer's k loop), SYNCS (mbarrier arrive / try-wait), HGMMA,
//             USETMAXREG (twice); two loops nested in each role (a back-edge BRA around the tile loop);
//             no LDGSTS, no LDL/STL.
#include "tma.cuh"

#ifndef STAGES
#define STAGES 4
#endif
#ifndef GROUP_M
#define GROUP_M 16      // tile rows per group: 16 x ~8 tiles in flight on 132 SMs, a near-square of C
#endif
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "the Hopper matmul rungs (7-12) use wgmma: compile them for sm_90a (the launcher does)"
#endif
#define BM 128          // two consumer warpgroups of 64 rows
#define BN 256          // one m64n256k16 wgmma per consumer warpgroup and k16 step
#define BK 64           // one 128-byte swizzle row of halves
#define THREADS 384     // warpgroup 0 produces, 1 and 2 consume
#define CONSUMERS 2     // consumer warpgroups: one thread of each arrives on empty[s]
constexpr int A_STAGE = BM * BK, B_STAGE = BK * BN;           // halves per buffer, no padding
constexpr unsigned STAGE_BYTES = 2 * (A_STAGE + B_STAGE);     // what the TMA writes per stage, zeros included

struct TileOrigin {
    int m0, n0;  // the tile's first row and column in C
};

// Tile number `tile` in grouped order (rung 6's): down GROUP_M tile rows, then one tile column right; the
// last group has the rows that are left.
__device__ __forceinline__ TileOrigin tile_origin(int tile, int M, int N) {
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int per_group = GROUP_M * tiles_n, first_m = tile / per_group * GROUP_M;
    const int rows = min(tiles_m - first_m, GROUP_M), in_group = tile % per_group;
    return {(first_m + in_group % rows) * BM, in_group / rows * BN};
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)  // the 1: a register cap, which setmaxnreg needs
matmul(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b, half* C, int M, int N, int K,
       int /* ldb: B's row stride, inside map_b */) {
    extern __shared__ __align__(128) half smem_raw[];
    __shared__ unsigned long long full[STAGES], empty[STAGES];
    half* As = smem_raw + swizzle_atom_offset(smem_raw);  // 1024-byte aligned, as the swizzle needs
    half* Bs = As + STAGES * A_STAGE;
    const int tiles = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
    const int k_tiles = (K + BK - 1) / BK;
    ring_init(full, empty, STAGES, CONSUMERS);  // empty[s]: one arrive per consumer warpgroup
    __syncthreads();  // the only block-wide barrier

    // Both roles count k-tiles over all of this block's tiles (kt), so the ring's stage (kt % STAGES) and
    // round (kt / STAGES) carry on from one tile to the next, and every k-tile is filled and released once.
    if (threadIdx.x < 128) {  // ------------------------------------------------ producer warpgroup
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (threadIdx.x == 0) {
            prefetch_tensormaps(map_a, map_b);
            int kt = 0;
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
                const auto [m0, n0] = tile_origin(tile, M, N);
                for (int k = 0; k < k_tiles; ++k, ++kt) {
                    const int s = kt % STAGES, k0 = k * BK;
                    mbarrier_wait(&empty[s], (kt / STAGES + 1) & 1);  // consumers done with round kt/STAGES - 1
                    mbarrier_arrive_expect_bytes(&full[s], STAGE_BYTES);
                    tma_load(As + s * A_STAGE, map_a, k0, m0, &full[s]);  // A: BM rows x 64 columns
#pragma unroll
                    for (int j = 0; j < BN / 64; ++j)                       // B: 64 rows x BN, in column blocks of 64
                        tma_load(Bs + s * B_STAGE + j * BK * 64, map_b, n0 + j * 64, k0, &full[s]);
                }
            }
        }
    } else {  // ------------------------------------------------------------------ consumer warpgroups
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
        const int consumer = threadIdx.x / 128 - 1, warp_in_group = threadIdx.x / 32 % 4;
        // One thread per warpgroup arrives on empty[s]: wgmma_wait<1> has waited for the whole warpgroup, so
        // its one arrival speaks for all 128 threads.
        const bool releases = threadIdx.x % 128 == 0;
        int kt = 0;
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            const auto [m0, n0] = tile_origin(tile, M, N);
            float acc[1][BN / 8][4] = {};
            for (int k = 0; k < k_tiles; ++k, ++kt) {
                const int s = kt % STAGES;
                mbarrier_wait(&full[s], (kt / STAGES) & 1);  // k-tile kt landed
                const half* a = As + s * A_STAGE + consumer * 64 * 64;  // this group's 64 rows
                const half* b = Bs + s * B_STAGE;
                wgmma_k_tile<BK>(acc, a, b);
                wgmma_wait<1>();  // k-tile kt-1's wgmmas done, for the whole warpgroup: its buffer may be refilled
                if (k > 0 && releases) mbarrier_arrive(&empty[(kt - 1) % STAGES]);
            }
            wgmma_wait<0>();
            // the tile's last k-tile is read too: release it now, so that the producer fills the ring with the
            // next tile's k-tiles while this one is stored
            if (releases) mbarrier_arrive(&empty[(kt - 1) % STAGES]);
            store_accumulators<16, BN>(acc, C, M, N, m0 + consumer * 64 + warp_in_group * 16, n0);
        }
    }
}
