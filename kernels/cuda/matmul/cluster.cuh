// Clusters of CLUSTER blocks (2 in rungs 10 and 11), shared by matmul rungs 10-12 (sm_90a): the cluster's rank and
// barrier, arrivals on a partner block's mbarrier, and the TMA copy multicast into every block.
// The including rung defines CLUSTER first.
#pragma once
#include "tma.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ unsigned cluster_rank() {  // this block's number in its cluster
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    return rank;
}

// Every (not yet exited) thread of both blocks gets here before any goes on; what each wrote before is visible.
// A cluster of one block (rung 12's search has them) has no partner: the block's own barrier does, without the
// cluster barrier's fences (a MEMBAR and an ERRBAR on each side in the SASS).
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
// keeps the default .release.cta. .release.cluster would put a MEMBAR.ALL.GPU before each
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
