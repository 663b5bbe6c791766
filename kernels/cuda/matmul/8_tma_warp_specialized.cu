// Matmul rung 8 (Hopper only, sm_90a) - TMA copies and warp specialization: one warpgroup fills a ring
// of tiles through the copy engine, two warpgroups only multiply.
//
// Idea:       in rung 7 the same 256 threads copy (cp.async: an address, a bounds check and an instruction
//             per 16 bytes, 12 per thread per k-tile), wait for their own copies, meet at __syncthreads and
//             only then issue wgmma: every k-tile, all of them stop together. Here the two jobs split.
//             The tensor memory accelerator (TMA) copies a whole 2-D box, global -> shared, from one
//             instruction, given a tensor map that the host encodes (the matrix's address, shape and row
//             stride, the box, the 128-byte swizzle that wgmma reads): it writes zeros outside the matrix,
//             so the kernel has no bounds checks on its loads. A producer warpgroup (one thread of it)
//             issues those copies into a ring of STAGES buffers; two consumer warpgroups run wgmma on them.
//             They meet only through mbarriers in shared memory: full[s] completes when buffer s's bytes
//             have landed (the TMA counts them in), empty[s] when both consumer warpgroups are done reading
//             it; each side waits on the parity of the round it needs. No __syncthreads in the loop, and
//             each buffer is refilled as soon as it is free: copies run STAGES-1 tiles ahead (rung 7: STAGES-2).
//             The producer needs few registers: setmaxnreg lowers its warpgroup to 40 a thread and raises
//             the consumers to 232 (from 168 each at launch), room for 128 accumulators and the rest.
//             Same 128 x 256 x 64 tiles, swizzle, wgmma and one-tile lag as rung 7.
// Prediction: about 1.1x rung 7 (band 1.02-1.25x): ~600 TFLOP/s on the H100, 0.85x cuBLAS (band 0.8-0.95x)
//             at 4096^3 and 8192^3 (rung 7: 0.79x/0.83x). What is left to cuBLAS: its 2-CTA clusters
//             (TMA multicast halves L2 -> SM traffic), a persistent grid whose epilogue overlaps the next
//             tile's loads, a rasterized tile order; here the epilogue still stores from registers.
// Signature:  UTMALDG (TMA loads), SYNCS (mbarrier arrive / try-wait), HGMMA, USETMAXREG (twice);
//             no LDGSTS, no LDL/STL.
#include "tma.cuh"

#ifndef STAGES
#define STAGES 4
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

extern "C" __global__ void __launch_bounds__(THREADS, 1)  // the 1: a register cap, which setmaxnreg needs
matmul(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b, half* C, int M, int N, int K,
       int /* ldb: B's row stride, inside map_b */) {
    extern __shared__ __align__(128) half smem_raw[];
    __shared__ unsigned long long full[STAGES], empty[STAGES];
    half* As = smem_raw + swizzle_atom_offset(smem_raw);  // 1024-byte aligned, as the swizzle needs
    half* Bs = As + STAGES * A_STAGE;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int k_tiles = (K + BK - 1) / BK;
    ring_init(full, empty, STAGES, CONSUMERS);  // empty[s]: one arrive per consumer warpgroup
    __syncthreads();  // the only block-wide barrier

    if (threadIdx.x < 128) {  // ------------------------------------------------ producer warpgroup
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (threadIdx.x == 0) {
            prefetch_tensormaps(map_a, map_b);
            for (int kt = 0; kt < k_tiles; ++kt) {
                const int s = kt % STAGES, k0 = kt * BK;
                mbarrier_wait(&empty[s], (kt / STAGES + 1) & 1);  // consumers done with round kt/STAGES - 1
                mbarrier_arrive_expect_bytes(&full[s], STAGE_BYTES);
                tma_load(As + s * A_STAGE, map_a, k0, m0, &full[s]);  // A: BM rows x 64 columns
#pragma unroll
                for (int j = 0; j < BN / 64; ++j)                     // B: 64 rows x BN, in column blocks of 64
                    tma_load(Bs + s * B_STAGE + j * BK * 64, map_b, n0 + j * 64, k0, &full[s]);
            }
        }
    } else {  // ------------------------------------------------------------------ consumer warpgroups
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
        const int consumer = threadIdx.x / 128 - 1, warp_in_group = threadIdx.x / 32 % 4;
        // One thread per warpgroup arrives on empty[s]: wgmma_wait<1> has waited for the whole warpgroup, so
        // its one arrival speaks for all 128 threads.
        const bool releases = threadIdx.x % 128 == 0;
        float acc[1][BN / 8][4] = {};
        for (int kt = 0; kt < k_tiles; ++kt) {
            const int s = kt % STAGES;
            mbarrier_wait(&full[s], (kt / STAGES) & 1);  // k-tile kt landed
            const half* a = As + s * A_STAGE + consumer * 64 * 64;  // this group's 64 rows
            const half* b = Bs + s * B_STAGE;
            wgmma_k_tile<BK>(acc, a, b);
            wgmma_wait<1>();  // k-tile kt-1's wgmmas done, for the whole warpgroup: its buffer may be refilled
            if (kt > 0 && releases) mbarrier_arrive(&empty[(kt - 1) % STAGES]);
        }
        wgmma_wait<0>();
        store_accumulators<16, BN>(acc, C, M, N, m0 + consumer * 64 + warp_in_group * 16, n0);
    }
}
