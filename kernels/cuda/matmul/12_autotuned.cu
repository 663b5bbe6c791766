// Matmul rung 12 (Hopper only, sm_90a) - autotuned: rung 11's kernel with its tile shape, ring depth, cluster
// size and tile order chosen by a search, per GPU and shape.
//
// Idea:       rung 11 fixes one configuration: blocks of 128 x 256 of C (two consumer warpgroups, one m64n256
//             wgmma each), 3 stages, clusters of 2, GROUP_M 8. That suits 4096^3 and 8192^3 on an H100; it fills
//             the 132 SMs badly where C has few such tiles (2048^2 holds 64 cluster blocks: 128 busy SMs, each
//             with one tile and no second to overlap its epilogue with) and leaves no choice to a GPU with other
//             limits. Here the launcher compiles one variant per configuration (-D), prunes what cannot fit
//             (shared memory, accumulator registers), times the rest and caches the winner per GPU
//             (ladder/autotune.py, kernels/matmul.py), as rung 6 does for rung 5. The space holds what Triton's
//             power-of-two blocks cannot: BN 192 (wgmma m64n192k16), and BM 256 with two m64 blocks per consumer.
//             One more choice frees room for the ring: BOX_BY_BOX stages C one 64 x 64 box per consumer at a
//             time (store, wait until the TMA has read it, next box), 16 KB of staging where rung 11's whole
//             tile takes up to 64, so 128 x 192 holds 5 stages, not 4 (cuBLAS's kernel at the model's MLP
//             down-projection has 5).
//             BM in {128, 256}, BN in {128, 192, 256}, STAGES 2-6, CLUSTER in {1, 2}, GROUP_M in {8, 16},
//             BOX_BY_BOX in {0, 1}.
// Prediction: 0.98-1.05x rung 11 at 4096^3 and 8192^3 (its configuration is in the space, so the search can
//             only match or beat it, up to the timing's spread of ~2%); 95-105% of cuBLAS there.
// Signature:  as rung 11; HGMMA.64xBNx16 with the chosen BN; BOX_BY_BOX: a wait on the TMA's read and 2 BAR.SYNC
//             per box, not per tile. The choice shows in the search report.
#include "tma.cuh"

#ifndef STAGES
#define STAGES 3
#endif
#ifndef GROUP_M
#define GROUP_M 8       // rung 10's
#endif
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "the Hopper matmul rungs (7-12) use wgmma: compile them for sm_90a (the launcher does)"
#endif
// The search sets BM, BN, CLUSTER and BOX_BY_BOX (and STAGES, GROUP_M) with -D.
#ifndef BM
#define BM 128          // two consumer warpgroups of 64 rows (256: of 128 rows, two m64 blocks each)
#endif
#ifndef BN
#define BN 256          // one m64n256k16 wgmma per consumer warpgroup, m64 block and k16 step (also 128, 192)
#endif
#define BK 64           // one 128-byte swizzle row of halves
#define THREADS 384     // warpgroup 0 produces, 1 and 2 consume
#define CONSUMERS 2     // consumer warpgroups: one thread of each arrives on empty[s]
#ifndef CLUSTER
#define CLUSTER 2       // blocks per cluster, one above the other: rows m0 .. m0 + CLUSTER * BM - 1 of C
#endif
#ifndef BOX_BY_BOX
#define BOX_BY_BOX 0    // rung 11 stages its whole tile at once
#endif
constexpr int M_BLOCKS = BM / CONSUMERS / 64;                 // m64 blocks per consumer warpgroup
constexpr int A_STAGE = BM * BK, B_STAGE = BK * BN;           // halves per buffer, no padding
constexpr unsigned STAGE_BYTES = 2 * (A_STAGE + B_STAGE);     // what the TMA writes per stage, zeros included
constexpr int B_BOXES = BN / 64;                              // the 64 x 64 boxes of a k-tile of B
constexpr int B_BOXES_PER_BLOCK = (B_BOXES + CLUSTER - 1) / CLUSTER;  // the boxes a producer multicasts
constexpr unsigned short WHOLE_CLUSTER = (1 << CLUSTER) - 1;  // ctaMask: every block of the cluster
static_assert(M_BLOCKS * CONSUMERS * 64 == BM && B_BOXES * 64 == BN, "BM: 128 or 256; BN: a multiple of 64");
#include "cluster.cuh"
constexpr int C_BOX = 64 * 64;                                // halves in one 64 x 64 box of C
constexpr int C_BOXES = M_BLOCKS * B_BOXES;                   // the boxes of a consumer's tile
#if BOX_BY_BOX  // rung 12's search may stage one box at a time: 16 KB of staging, not 64, left to the ring
constexpr int STAGED = 1;
#else
constexpr int STAGED = C_BOXES;                               // the whole tile at once
#endif
constexpr int C_STAGE = STAGED * C_BOX;                       // a consumer's staging buffer

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

// ---------------------------------------------------------------- the epilogue, through the TMA
// Box `box` of an m64 block's accumulators (rows warp * 16 + lane / 4 and + 8, columns ni * 8 + lane % 4 * 2, as
// store_accumulators<16, BN> reads them) into Cs: chunk ni % 8 of each row, 16 bytes, in the 128-byte swizzle.
__device__ __forceinline__ void stage_box(const float (&acc)[1][BN / 8][4], int box, half* Cs, int warp, int lane) {
#pragma unroll
    for (int ni = box * 8; ni < box * 8 + 8; ++ni)
#pragma unroll
        for (int half_ = 0; half_ < 2; ++half_) {
            const int row = warp * 16 + lane / 4 + half_ * 8;
            half* dst = Cs + row * 64 + ((ni % 8) ^ (row % 8)) * 8 + lane % 4 * 2;
            *reinterpret_cast<half2*>(dst) = __floats2half2_rn(acc[0][ni][2 * half_], acc[0][ni][2 * half_ + 1]);
        }
}

__device__ __forceinline__ void tma_store(const TensorMap& map, int x, int y, const half* src) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
                 :: "l"(&map), "r"(x), "r"(y), "r"(smem_address(src)) : "memory");
}

// The 128 threads of consumer warpgroup `consumer` meet (named barrier 1 + consumer; 0 is __syncthreads').
__device__ __forceinline__ void warpgroup_sync(int consumer) {
    asm volatile("bar.sync %0, 128;\n" :: "r"(1 + consumer) : "memory");
}

extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS, 1)
matmul(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,
       const __grid_constant__ TensorMap map_c, half* C, int M, int N, int K, int /* ldb: inside map_b */) {
    extern __shared__ __align__(128) half smem_raw[];
    __shared__ unsigned long long full[STAGES], empty[STAGES];  // the same offsets in both blocks, as multicast needs
    half* As = smem_raw + swizzle_atom_offset(smem_raw);  // 1024-byte aligned, as the swizzle needs
    half* Bs = As + STAGES * A_STAGE;
    half* Cs = Bs + STAGES * B_STAGE;  // CONSUMERS staging buffers, 1024-byte aligned as the stages before them
    const unsigned rank = cluster_rank();
    const int tiles = ((M + CLUSTER * BM - 1) / (CLUSTER * BM)) * ((N + BN - 1) / BN);  // of CLUSTER * BM x BN
    const int cluster = blockIdx.x / CLUSTER, clusters = gridDim.x / CLUSTER;
    const int k_tiles = (K + BK - 1) / BK;
    const bool by_tma = N % 8 == 0 && reinterpret_cast<size_t>(C) % 16 == 0;  // map_c is encoded just then
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
                        if (CLUSTER == 1)  // rung 12's clusters of one block: no partner to multicast to
                            tma_load(Bs + s * B_STAGE + j * BK * 64, map_b, n0 + j * 64, k0, &full[s]);
                        else if (B_BOXES % CLUSTER == 0 || j < B_BOXES)  // BN 192: 2 boxes from rank 0, 1 from rank 1
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
        const bool releases = threadIdx.x % 128 == 0;  // also the thread that issues the warpgroup's TMA stores
        half* staging = Cs + consumer * C_STAGE;
        int kt = 0;
        for (int tile = cluster; tile < tiles; tile += clusters) {
            const auto [m0, n0] = tile_origin(tile, M, N);
            const int row0 = m0 + rank * BM + consumer * M_BLOCKS * 64;
            float acc[M_BLOCKS][1][BN / 8][4] = {};
            for (int k = 0; k < k_tiles; ++k, ++kt) {
                const int s = kt % STAGES;
                mbarrier_wait(&full[s], (kt / STAGES) & 1);  // k-tile kt landed
                wgmma_fence();
#pragma unroll
                for (int i = 0; i < M_BLOCKS; ++i)  // one commit group per k-tile
                    wgmma_k_steps<BK>(acc[i], As + s * A_STAGE + (consumer * M_BLOCKS + i) * 64 * 64, Bs + s * B_STAGE);
                wgmma_commit();
                wgmma_wait<1>();  // k-tile kt-1's wgmmas done, for the whole warpgroup: its buffer may be refilled
                if (k > 0 && releases) release(&empty[(kt - 1) % STAGES]);
            }
            wgmma_wait<0>();
            // the tile's last k-tile is read too: release it now, so that the producer fills the ring with the
            // next tile's k-tiles while this one is stored
            if (releases) release(&empty[(kt - 1) % STAGES]);
            if (!by_tma) {
#pragma unroll
                for (int i = 0; i < M_BLOCKS; ++i)
                    store_accumulators<16, BN>(acc[i], C, M, N, row0 + i * 64 + warp_in_group * 16, n0);
                continue;
            }
            // box b: m64 block b / B_BOXES, columns of box b % B_BOXES; STAGED boxes at a time
#pragma unroll
            for (int first = 0; first < C_BOXES; first += STAGED) {
                if (releases)  // the TMA has read what the staging buffer held: it may be written again
                    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
                warpgroup_sync(consumer);
#pragma unroll
                for (int b = first; b < first + STAGED; ++b)
                    stage_box(acc[b / B_BOXES], b % B_BOXES, staging + (b - first) * C_BOX, warp_in_group,
                              threadIdx.x % 32);
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the writes, visible to the TMA
                warpgroup_sync(consumer);
                if (releases) {
#pragma unroll
                    for (int b = first; b < first + STAGED; ++b)
                        tma_store(map_c, n0 + b % B_BOXES * 64, row0 + b / B_BOXES * 64, staging + (b - first) * C_BOX);
                    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
                }
            }
        }
        if (releases)  // the last tile's stores have completed before the block exits
            asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
        cluster_exit();  // no block leaves while its partner may still arrive on its barriers
    }
}
