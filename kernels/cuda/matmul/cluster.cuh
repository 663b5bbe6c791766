// Clusters of CLUSTER blocks (2 in rungs 10 and 11), shared by matmul rungs 10-12 (sm_90a): the order the clusters
// walk C in, the cluster's rank and barrier, arrivals on a partner block's mbarrier, and the TMA copy multicast into
// every block.
// The including rung defines STAGES and GROUP_M first.
#pragma once
#include "tma.cuh"

// Rungs 10 and 11 take the defaults; rung 12's search sets BM, BN and CLUSTER (and STAGES, GROUP_M) with -D.
#ifndef BM
#define BM 128          // two consumer warpgroups of 64 rows (256: of 128 rows, two m64 blocks each)
#endif
#ifndef BN
#define BN 256          // one m64n256k16 wgmma per consumer warpgroup, m64 block and k16 step (also 128, 192)
#endif
#define BK 64           // one 128-byte swizzle row of halves
#define THREADS 384     // warpgroup 0 produces, 1 and 2 consume
#define CONSUMERS 2     // consumer warpgroups per block: one thread of each arrives on empty[s]
#ifndef CLUSTER
#define CLUSTER 2       // blocks per cluster, one above the other: rows m0 .. m0 + CLUSTER * BM - 1 of C
#endif
constexpr int M_BLOCKS = BM / CONSUMERS / 64;                 // m64 blocks per consumer warpgroup
constexpr int A_STAGE = BM * BK, B_STAGE = BK * BN;           // halves per buffer, no padding
constexpr unsigned STAGE_BYTES = 2 * (A_STAGE + B_STAGE);     // what lands per stage: own A, B from every producer
constexpr int B_BOXES = BN / 64;                              // the 64 x 64 boxes of a k-tile of B
constexpr int B_BOXES_PER_BLOCK = (B_BOXES + CLUSTER - 1) / CLUSTER;  // the boxes a producer multicasts
constexpr unsigned short WHOLE_CLUSTER = (1 << CLUSTER) - 1;  // ctaMask: every block of the cluster
static_assert(M_BLOCKS * CONSUMERS * 64 == BM && B_BOXES * 64 == BN, "BM: 128 or 256; BN: a multiple of 64");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
struct TileOrigin {
    int m0, n0;  // the first row and column in C
};

// Cluster block number `block` (CLUSTER * BM x BN of C) in grouped order (rung 9's): down GROUP_M cluster rows,
// then one tile column right; the last group has the rows that are left.
__device__ __forceinline__ TileOrigin cluster_origin(int block, int M, int N) {
    const int rows_m = (M + CLUSTER * BM - 1) / (CLUSTER * BM), tiles_n = (N + BN - 1) / BN;
    const int per_group = GROUP_M * tiles_n, first_m = block / per_group * GROUP_M;
    const int rows = min(rows_m - first_m, GROUP_M), in_group = block % per_group;
    return {(first_m + in_group % rows) * CLUSTER * BM, in_group / rows * BN};
}

// ---------------------------------------------------------------- the cluster
__device__ __forceinline__ unsigned cluster_rank() {  // this block's number in its cluster
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    return rank;
}

// Every (not yet exited) thread of both blocks gets here before any goes on; what each wrote before is visible.
// A cluster of one block (rung 12's search has them) has no partner: the block's own barrier does, without the
// cluster barrier's fences (a MEMBAR and an ERRBAR on each side in the SASS, ~1 us a kernel on an H100).
__device__ __forceinline__ void cluster_sync() {
    if (CLUSTER == 1)
        __syncthreads();
    else
        asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

// A block exits only once its partner's consumers have made their last arrivals on its barriers; alone, at once.
__device__ __forceinline__ void cluster_exit() {
    if (CLUSTER > 1)
        cluster_sync();
}

// Arrive on the mbarrier at bar's offset in block `rank` of the cluster (this one or its partner). A consumer
// says only that its reads of a buffer are over (wgmma_wait): nothing it wrote needs publishing, so the arrive
// keeps the default .release.cta (as CUTLASS's does). .release.cluster would put a MEMBAR.ALL.GPU before each
// arrive, in the k loop, where it also waits for the previous tile's stores to C.
__device__ __forceinline__ void mbarrier_arrive_in(unsigned long long* bar, unsigned rank) {
    asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n"
                 :: "r"(smem_address(bar)), "r"(rank) : "memory");
}

// tma_load into dst's offset in every block of cta_mask; each one's mbarrier at bar's offset counts the bytes.
__device__ __forceinline__ void tma_load_multicast(half* dst, const TensorMap& map, int x, int y,
                                                   unsigned long long* bar, unsigned short cta_mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;\n"
                 :: "r"(smem_address(dst)), "l"(&map), "r"(x), "r"(y), "r"(smem_address(bar)), "h"(cta_mask)
                 : "memory");
}
// ---------------------------------------------------------------- the ring, walked by both blocks of a cluster
// Both blocks walk the same blocks of C and k-tiles, so their rings stay in step; the k-tile counter kt runs on
// across blocks of C (rung 9's ring).

// The producer (one thread of warpgroup 0): per k-tile, once all 4 consumer warpgroups of the cluster are done with
// round kt/STAGES - 1 of stage s, this block's A box (its 128 rows) and its half of B's 64-column boxes, to both.
__device__ __forceinline__ void produce(const TensorMap& map_a, const TensorMap& map_b, half* As, half* Bs,
                                        unsigned long long* full, unsigned long long* empty, unsigned rank,
                                        int cluster, int clusters, int blocks, int k_tiles, int M, int N) {
    prefetch_tensormaps(map_a, map_b);
    int kt = 0;
    for (int block = cluster; block < blocks; block += clusters) {
        const TileOrigin o = cluster_origin(block, M, N);
        for (int k = 0; k < k_tiles; ++k, ++kt) {
            const int s = kt % STAGES, k0 = k * BK;
            mbarrier_wait(&empty[s], (kt / STAGES + 1) & 1);
            mbarrier_arrive_expect_bytes(&full[s], STAGE_BYTES);
            tma_load(As + s * A_STAGE, map_a, k0, o.m0 + rank * BM, &full[s]);
#pragma unroll
            for (int i = 0; i < B_BOXES_PER_BLOCK; ++i) {
                const int j = rank * B_BOXES_PER_BLOCK + i;
                if (CLUSTER == 1)
                    tma_load(Bs + s * B_STAGE + j * BK * 64, map_b, o.n0 + j * 64, k0, &full[s]);
                else if (B_BOXES % CLUSTER == 0 || j < B_BOXES)  // BN 192: 2 boxes from rank 0, 1 from rank 1
                    tma_load_multicast(Bs + s * B_STAGE + j * BK * 64, map_b, o.n0 + j * 64, k0, &full[s], WHOLE_CLUSTER);
            }
        }
    }
}

// A consumer warpgroup's k-tiles of one block of C into acc (its M_BLOCKS x 64 rows). `releases`, one thread of the
// group, frees each stage in every block of the cluster once the wgmmas reading it are done (wgmma_wait<1>: k-tile
// kt-1's), the last one too, so that the producers go on into the next block of C.
__device__ __forceinline__ void release(unsigned long long* empty_s) {
    for (unsigned r = 0; r < CLUSTER; ++r) mbarrier_arrive_in(empty_s, r);
}

__device__ __forceinline__ void consume(float (&acc)[M_BLOCKS][1][BN / 8][4], const half* As, const half* Bs,
                                        unsigned long long* full, unsigned long long* empty, int consumer,
                                        bool releases, int k_tiles, int& kt) {
    for (int k = 0; k < k_tiles; ++k, ++kt) {
        const int s = kt % STAGES;
        mbarrier_wait(&full[s], (kt / STAGES) & 1);  // k-tile kt landed: A, and B from every producer
        wgmma_fence();
#pragma unroll
        for (int i = 0; i < M_BLOCKS; ++i)  // one commit group per k-tile
            wgmma_k_steps<BK>(acc[i], As + s * A_STAGE + (consumer * M_BLOCKS + i) * 64 * 64, Bs + s * B_STAGE);
        wgmma_commit();
        wgmma_wait<1>();
        if (k > 0 && releases) release(&empty[(kt - 1) % STAGES]);
    }
    wgmma_wait<0>();
    if (releases) release(&empty[(kt - 1) % STAGES]);
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
