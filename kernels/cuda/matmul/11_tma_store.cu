// Matmul rung 11 (Hopper only, sm_90a) - the epilogue through shared memory and the TMA: the consumers write
// C's tile into shared memory, hand it to the TMA to store, and go straight back to multiplying.
//
// Idea:       in rung 10 a consumer warpgroup ends each tile by storing its 64 x 256 accumulators to global
//             memory itself: 64 four-byte st.global per thread, each warp's store touching 8 rows 16 bytes at a
//             time, and no wgmma is issued until they have left. Timed with that store removed, rung 10 runs
//             ~10% faster at 4096^3 and ~5% at 8192^3: the epilogue is most of the gap to cuBLAS. Here each
//             consumer writes its tile into a staging buffer in shared memory instead (four 64 x 64 boxes in the
//             128-byte swizzle, so the 32 banks take one 4-byte write each), makes the writes visible to the
//             TMA (fence.proxy.async), and one thread issues four cp.async.bulk.tensor stores from it; the TMA
//             clips rows and columns past C. The warpgroup does not wait for the stores: before it writes the
//             buffer again, a tile later, its issuing thread waits until the TMA has read it
//             (cp.async.bulk.wait_group.read). The buffer (64 KB) comes out of the ring: 3 stages, which rung 10
//             runs as fast as 4. Where C's rows cannot be a TMA's (N not a multiple of 8, or C not 16-byte
//             aligned) the consumers store as rung 10's do. Rung 10's clusters, ring and order otherwise.
// Prediction: 1.04-1.12x rung 10 at 4096^3 and 1.0-1.06x at 8192^3, where the epilogue is half the share of a
//             tile's time; 95-105% of cuBLAS at both.
// Signature:  as rung 10, plus 4 UTMASTG.2D (the stores) and UTMACMDFLUSH (their commit), DEPBAR.LE SB0 (the
//             waits on them), a second FENCE.VIEW.ASYNC.S (the proxy fence) and 2 BAR.SYNC on a register id (the
//             named barriers) around 64 STS, the staging writes; rung 10's 192 STG stay, for the other path;
//             no LDL/STL.
#ifndef STAGES
#define STAGES 3
#endif
#ifndef GROUP_M
#define GROUP_M 8       // rung 10's
#endif
#ifndef BOX_BY_BOX
#define BOX_BY_BOX 0    // rung 11 stages its whole tile at once
#endif
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "11_tma_store.cu uses wgmma, setmaxnreg and the TMA: compile it for sm_90a (the launcher does)"
#endif
#include "cluster.cuh"
constexpr int C_BOX = 64 * 64;                                // halves in one 64 x 64 box of C
constexpr int C_BOXES = M_BLOCKS * B_BOXES;                   // the boxes of a consumer's tile
#if BOX_BY_BOX  // rung 12's search may stage one box at a time: 16 KB of staging, not 64, left to the ring
constexpr int STAGED = 1;
#else
constexpr int STAGED = C_BOXES;                               // the whole tile at once
#endif
constexpr int C_STAGE = STAGED * C_BOX;                       // a consumer's staging buffer

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
    __shared__ unsigned long long full[STAGES], empty[STAGES];
    half* As = smem_raw + swizzle_atom_offset(smem_raw);
    half* Bs = As + STAGES * A_STAGE;
    half* Cs = Bs + STAGES * B_STAGE;  // CONSUMERS staging buffers, 1024-byte aligned as the stages before them
    const unsigned rank = cluster_rank();
    const int blocks = ((M + CLUSTER * BM - 1) / (CLUSTER * BM)) * ((N + BN - 1) / BN);
    const int cluster = blockIdx.x / CLUSTER, clusters = gridDim.x / CLUSTER;
    const int k_tiles = (K + BK - 1) / BK;
    const bool by_tma = N % 8 == 0 && reinterpret_cast<size_t>(C) % 16 == 0;  // map_c is encoded just then
    ring_init(full, empty, STAGES, CONSUMERS * CLUSTER);
    cluster_sync();

    if (threadIdx.x < 128) {  // ------------------------------------------------ producer warpgroup (rung 10's)
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (threadIdx.x == 0) produce(map_a, map_b, As, Bs, full, empty, rank, cluster, clusters, blocks, k_tiles, M, N);
    } else {  // ------------------------------------------------------------------ consumer warpgroups
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
        const int consumer = threadIdx.x / 128 - 1, warp_in_group = threadIdx.x / 32 % 4;
        const bool releases = threadIdx.x % 128 == 0;  // also the thread that issues the warpgroup's TMA stores
        half* staging = Cs + consumer * C_STAGE;
        int kt = 0;
        for (int block = cluster; block < blocks; block += clusters) {
            const TileOrigin o = cluster_origin(block, M, N);
            const int row0 = o.m0 + rank * BM + consumer * M_BLOCKS * 64;
            float acc[M_BLOCKS][1][BN / 8][4] = {};
            consume(acc, As, Bs, full, empty, consumer, releases, k_tiles, kt);
            if (!by_tma) {
#pragma unroll
                for (int i = 0; i < M_BLOCKS; ++i)
                    store_accumulators<16, BN>(acc[i], C, M, N, row0 + i * 64 + warp_in_group * 16, o.n0);
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
                        tma_store(map_c, o.n0 + b % B_BOXES * 64, row0 + b / B_BOXES * 64, staging + (b - first) * C_BOX);
                    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
                }
            }
        }
        if (releases)  // the last tile's stores have completed before the block exits
            asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
        cluster_exit();
    }
}
