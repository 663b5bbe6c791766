// Matmul rung 10 (Hopper only, sm_90a) - 2-CTA clusters with TMA multicast: two blocks on two SMs compute
// vertically adjacent tiles of C, and each k-tile of B they share crosses from L2 once, into both.
//
// Idea:       in rung 9 every block copies its own 48 KB per k-tile from L2 (A: 128 x 64, B: 64 x 256), and
//             the two blocks that hold tiles m and m+1 of one tile column copy the same B. At ~600 TFLOP/s
//             that is ~7 TB/s out of L2, near its measured read roof (8.6 TB/s on the H100). Here the grid is
//             made of clusters of 2 blocks (__cluster_dims__): a cluster walks 256 x 256 blocks of C in rung 9's
//             persistent, grouped order, block rank r taking rows r*128 .. r*128+127. Each block's producer
//             copies its own A box and two of the four 64 x 64 boxes of B, and multicasts those to the same
//             shared-memory offset in both blocks (cp.async.bulk.tensor ... .multicast::cluster, ctaMask 0b11),
//             whose full[s] mbarriers count the bytes: 32 KB per block and k-tile leave L2 (rung 9: 48 KB).
//             A producer now writes into its partner's buffers, so a buffer is free only when all four
//             consumer warpgroups of the cluster have read it: each consumer arrives on empty[s] in both blocks
//             (mapa: the partner's address of the same barrier; mbarrier.arrive.shared::cluster), and empty[s]
//             expects 4 arrivals. A cluster barrier after the mbarriers' init (no multicast or remote arrive
//             before the partner's barriers exist) and one before the consumers exit (no block leaves while its
//             partner may still arrive on its barriers). Rung 9's ring, warpgroups and tiles otherwise.
// Prediction: 1.02-1.15x rung 9 (less from L2, but both blocks of a cluster now wait for the slower), about
//             0.9-1.0x cuBLAS at 4096^3 and 8192^3. What is left: the consumers still stop multiplying to
//             store C from registers.
// Signature:  as rung 9, but 3 UTMALDG (A, and 2 UTMALDG.2D.MULTICAST of B), remote arrives
//             (SYNCS.ARRIVE.TRANS64.RED), UCGABAR_ARV/_WAIT (the cluster barriers) where rung 9 has its one BAR;
//             no MEMBAR in the loops, no LDL/STL.
#include "tma.cuh"

#ifndef STAGES
#define STAGES 4
#endif
#ifndef GROUP_M
#define GROUP_M 8       // cluster rows (256 rows of C) per group: 8 x ~8 clusters in flight, as rung 9's 16 x ~8 tiles
#endif
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "the Hopper matmul rungs (7-12) use wgmma: compile them for sm_90a (the launcher does)"
#endif
#define BM 128          // two consumer warpgroups of 64 rows
#define BN 256          // one m64n256k16 wgmma per consumer warpgroup and k16 step
#define BK 64           // one 128-byte swizzle row of halves
#define THREADS 384     // warpgroup 0 produces, 1 and 2 consume
#define CONSUMERS 2     // consumer warpgroups: one thread of each arrives on empty[s]
#define CLUSTER 2       // blocks per cluster, one above the other: rows m0 .. m0 + CLUSTER * BM - 1 of C
constexpr int M_BLOCKS = BM / CONSUMERS / 64;                 // m64 blocks per consumer warpgroup: 1 (rung 12: 1 or 2)
constexpr int A_STAGE = BM * BK, B_STAGE = BK * BN;           // halves per buffer, no padding
constexpr unsigned STAGE_BYTES = 2 * (A_STAGE + B_STAGE);     // what the TMA writes per stage, zeros included
constexpr int B_BOXES = BN / 64;                              // the 64 x 64 boxes of a k-tile of B
constexpr int B_BOXES_PER_BLOCK = B_BOXES / CLUSTER;          // the boxes a producer multicasts
constexpr unsigned short WHOLE_CLUSTER = (1 << CLUSTER) - 1;  // ctaMask: every block of the cluster
static_assert(M_BLOCKS == 1 && B_BOXES % CLUSTER == 0, "one m64 block per consumer; B's boxes split over the cluster");
#include "cluster.cuh"

struct TileOrigin {
    int m0, n0;  // the tile's first row and column in C
};

// Tile number `tile` in grouped order (rung 6's): down GROUP_M tile rows, then one tile column right; the
// last group has the rows that are left.
__device__ __forceinline__ TileOrigin tile_origin(int tile, int M, int N) {
    const int tiles_m = (M + CLUSTER * BM - 1) / (CLUSTER * BM), tiles_n = (N + BN - 1) / BN;
    const int per_group = GROUP_M * tiles_n, first_m = tile / per_group * GROUP_M;
    const int rows = min(tiles_m - first_m, GROUP_M), in_group = tile % per_group;
    return {(first_m + in_group % rows) * CLUSTER * BM, in_group / rows * BN};
}

// A consumer warpgroup is done reading stage s: it says so in every block of the cluster, whose producers all write
// into this block's stage s.
__device__ __forceinline__ void release(unsigned long long* empty_s) {
    for (unsigned r = 0; r < CLUSTER; ++r) mbarrier_arrive_in(empty_s, r);
}

extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS, 1)
matmul(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b, half* C, int M, int N, int K,
       int /* ldb: B's row stride, inside map_b */) {
    extern __shared__ __align__(128) half smem_raw[];
    __shared__ unsigned long long full[STAGES], empty[STAGES];  // the same offsets in both blocks, as multicast needs
    half* As = smem_raw + swizzle_atom_offset(smem_raw);  // 1024-byte aligned, as the swizzle needs
    half* Bs = As + STAGES * A_STAGE;
    const unsigned rank = cluster_rank();
    const int tiles = ((M + CLUSTER * BM - 1) / (CLUSTER * BM)) * ((N + BN - 1) / BN);  // of CLUSTER * BM x BN
    const int cluster = blockIdx.x / CLUSTER, clusters = gridDim.x / CLUSTER;
    const int k_tiles = (K + BK - 1) / BK;
    ring_init(full, empty, STAGES, CONSUMERS * CLUSTER);  // empty[s]: one arrive per consumer warpgroup of the cluster
    cluster_sync();  // both blocks' barriers exist before either producer multicasts or a consumer arrives remotely

    // Both roles count k-tiles over all of this block's tiles (kt), so the ring's stage (kt % STAGES) and
    // round (kt / STAGES) carry on from one tile to the next, and every k-tile is filled and released once.
    if (threadIdx.x < 128) {  // ------------------------------------------------ producer warpgroup
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (threadIdx.x == 0) {
            prefetch_tensormaps(map_a, map_b);
            int kt = 0;
            for (int tile = cluster; tile < tiles; tile += clusters) {
                const auto [m0, n0] = tile_origin(tile, M, N);
                for (int k = 0; k < k_tiles; ++k, ++kt) {
                    const int s = kt % STAGES, k0 = k * BK;
                    mbarrier_wait(&empty[s], (kt / STAGES + 1) & 1);  // consumers done with round kt/STAGES - 1
                    mbarrier_arrive_expect_bytes(&full[s], STAGE_BYTES);
                    tma_load(As + s * A_STAGE, map_a, k0, m0 + rank * BM, &full[s]);  // A: this block's BM rows
#pragma unroll
                    for (int i = 0; i < B_BOXES_PER_BLOCK; ++i) {  // B: this block's share of the boxes, to both blocks
                        const int j = rank * B_BOXES_PER_BLOCK + i;
                        tma_load_multicast(Bs + s * B_STAGE + j * BK * 64, map_b, n0 + j * 64, k0, &full[s],
                                           WHOLE_CLUSTER);
                    }
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
        for (int tile = cluster; tile < tiles; tile += clusters) {
            const auto [m0, n0] = tile_origin(tile, M, N);
            float acc[1][BN / 8][4] = {};
            for (int k = 0; k < k_tiles; ++k, ++kt) {
                const int s = kt % STAGES;
                mbarrier_wait(&full[s], (kt / STAGES) & 1);  // k-tile kt landed
                const half* a = As + s * A_STAGE + consumer * 64 * 64;  // this group's 64 rows
                const half* b = Bs + s * B_STAGE;
                wgmma_k_tile<BK>(acc, a, b);
                wgmma_wait<1>();  // k-tile kt-1's wgmmas done, for the whole warpgroup: its buffer may be refilled
                if (k > 0 && releases) release(&empty[(kt - 1) % STAGES]);
            }
            wgmma_wait<0>();
            // the tile's last k-tile is read too: release it now, so that the producer fills the ring with the
            // next tile's k-tiles while this one is stored
            if (releases) release(&empty[(kt - 1) % STAGES]);
            store_accumulators<16, BN>(acc, C, M, N, m0 + rank * BM + consumer * 64 + warp_in_group * 16, n0);
        }
        cluster_exit();  // no block leaves while its partner may still arrive on its barriers
    }
}
