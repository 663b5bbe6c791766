// 2-CTA clusters, shared by matmul rungs 10 and 11 (sm_90a): the order the clusters walk C in, the cluster's
// rank and barrier, arrivals on a partner block's mbarrier, and the TMA copy multicast into both blocks.
// The including rung defines BM, BN, CLUSTER and GROUP_M first.
#pragma once
#include "tma.cuh"

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
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
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
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
