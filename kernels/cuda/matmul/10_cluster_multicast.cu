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
// Prediction: 1.0-1.15x rung 9 (less from L2, but both blocks of a cluster now wait for the slower), about
//             0.9-1.0x cuBLAS at 4096^3 and 8192^3. What is left: the consumers still stop multiplying to
//             store C from registers.
// Signature:  as rung 9, but 3 UTMALDG (A, and 2 UTMALDG.2D.MULTICAST of B), remote arrives
//             (SYNCS.ARRIVE.TRANS64.RED), UCGABAR_ARV/_WAIT (the cluster barriers) where rung 9 has its one BAR;
//             no MEMBAR in the loops, no LDL/STL.

#ifndef STAGES
#define STAGES 4
#endif
#ifndef GROUP_M
#define GROUP_M 8       // cluster rows (256 rows of C) per group: 8 x ~8 clusters in flight, as rung 9's 16 x ~8 tiles
#endif
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "10_cluster_multicast.cu uses wgmma, setmaxnreg and TMA multicast: compile it for sm_90a (the launcher does)"
#endif
#include "cluster.cuh"

extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS, 1)
matmul(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b, half* C, int M, int N, int K,
       int /* ldb: B's row stride, inside map_b */) {
    extern __shared__ __align__(128) half smem_raw[];
    __shared__ unsigned long long full[STAGES], empty[STAGES];  // the same offsets in both blocks, as multicast needs
    half* As = smem_raw + swizzle_atom_offset(smem_raw);  // 1024-byte aligned, as the swizzle needs
    half* Bs = As + STAGES * A_STAGE;
    const unsigned rank = cluster_rank();
    const int blocks = ((M + CLUSTER * BM - 1) / (CLUSTER * BM)) * ((N + BN - 1) / BN);  // of CLUSTER * BM x BN
    const int cluster = blockIdx.x / CLUSTER, clusters = gridDim.x / CLUSTER;
    const int k_tiles = (K + BK - 1) / BK;
    ring_init(full, empty, STAGES, CONSUMERS * CLUSTER);  // full[s]: the bytes of both producers; empty[s]: every
                                                          // consumer warpgroup of the cluster
    cluster_sync();  // both blocks' barriers exist before either producer multicasts or a consumer arrives remotely

    if (threadIdx.x < 128) {  // ------------------------------------------------ producer warpgroup
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (threadIdx.x == 0) produce(map_a, map_b, As, Bs, full, empty, rank, cluster, clusters, blocks, k_tiles, M, N);
    } else {  // ------------------------------------------------------------------ consumer warpgroups
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
        const int consumer = threadIdx.x / 128 - 1, warp_in_group = threadIdx.x / 32 % 4;
        const bool releases = threadIdx.x % 128 == 0;  // one thread per warpgroup arrives on empty[s], in both blocks
        int kt = 0;
        for (int block = cluster; block < blocks; block += clusters) {
            const TileOrigin o = cluster_origin(block, M, N);
            float acc[M_BLOCKS][1][BN / 8][4] = {};  // M_BLOCKS is 1: BM 128
            consume(acc, As, Bs, full, empty, consumer, releases, k_tiles, kt);
            store_accumulators<16, BN>(acc[0], C, M, N, o.m0 + rank * BM + consumer * 64 + warp_in_group * 16, o.n0);
        }
        cluster_exit();
    }
}
