// Attention rung 11 (Hopper only, sm_90a) - the softmax in fewer instructions: rung 10, its exponentials on
// MUFU.EX2 alone.
//
// Idea:       once the products run on wgmma, a 128-key tile costs a consumer warp far more instructions in the
//             softmax than in the products, and at D = 64 the tensor cores wait on them. exp2f is one MUFU.EX2
//             wrapped in a range fix-up for results below 2^-126 (FSETP, and an FMUL before and after, both
//             predicated): three of a score's ~8 instructions. ex2.approx.ftz is the MUFU.EX2 alone; the results
//             it flushes to 0 round to 0 in fp16 P anyway (flash_mma.cuh, exp2_softmax).
// Prediction: 1.03-1.15x rung 10 (kernels/predictions/attention_cuda.toml), more at D = 64, whose tile has half
//             the tensor-core work of D = 128's for the same softmax.
// Variants measured on the way: kernels/NOTES.md, CUDA attention rung 11.
// Signature:  as rung 10, with one MUFU.EX2 per exponential and no FSETP.GEU beside it; no LDL/STL.
// Generated from hopper_overlays/11_fast_exp2.cu by `python -m ladder.flatten`: do not edit; edit there.
#define FAST_EXP2 1
#define CONSUMERS 2
#define CONSUMER_REGISTERS 240   // 256 x 240 + 128 x 24 = 64,512 of the SM's 65,536
#define PRODUCER_THREADS 128
#define MIN_BLOCKS 1         // one block an SM: a register cap, which setmaxnreg needs
#define PRODUCER_REGISTERS 24
#define BLOCK_M (64 * CONSUMERS)  // wgmma's 64 rows per consumer warpgroup
#define WARPS (4 * CONSUMERS)
#include "flash_mma.cuh"
#include "../matmul/tma.cuh"

#ifndef STAGES
#define STAGES 2
#endif
#define SHORT_PATH 0
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "the Hopper attention rungs (7-15) use wgmma: compile them for sm_90a (the launcher does)"
#endif
constexpr int PRODUCER = WARPS;  // the first warp after the consumer warpgroups: the producer's
constexpr int Q_TILE = BLOCK_M * HEAD_DIM, KV_TILE = BLOCK_N * HEAD_DIM;  // halves, in column blocks of 64
constexpr unsigned Q_BYTES = 2 * Q_TILE, STAGE_BYTES = 2 * 2 * KV_TILE;   // what the TMA writes, zeros included

// Descriptor of k16 step kk of a K-major tile of ROWS rows (Q, K): 64-column blocks of ROWS swizzled 128-byte rows.
template <int ROWS>
__device__ __forceinline__ unsigned long long k_major(const half* tile, int kk) {
    return descriptor(tile + kk / 4 * ROWS * 64 + kk % 4 * 16, 16);
}

// Rung 9's turns at the tensor cores: named barrier 1 + g is warpgroup g's turn, granted by the warpgroup before
// it (256 threads: 128 waiting, 128 arriving); 0 is __syncthreads'. The last grants the first, none at its end.
__device__ __forceinline__ void wait_turn(int g) { asm volatile("bar.sync %0, 256;\n" :: "r"(1 + g) : "memory"); }
__device__ __forceinline__ void pass_turn(int g) {
    asm volatile("bar.arrive %0, 256;\n" :: "r"(1 + (g + 1) % CONSUMERS) : "memory");
}
constexpr int LAST_GROUP = CONSUMERS - 1;

// A tile of ROWS rows from row y of head z, one TMA box per 64-column block.
template <int ROWS>
__device__ __forceinline__ void load_tile(half* dst, const TensorMap& map, int y, int z, unsigned long long* bar) {
#pragma unroll
    for (int c = 0; c < HEAD_DIM / 64; ++c) tma_load(dst + c * ROWS * 64, map, c * 64, y, z, bar);
}

// S = Q·Kᵀ of one key tile (k: its K-major tile), 16 dimensions a wgmma, committed as one group, not waited for.
__device__ __forceinline__ void issue_scores(float (&scores)[1][NJ][4], const half* Qg, const half* k) {
#pragma unroll
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
        wgmma_m64k16<NJ, false>(scores, k_major<BLOCK_M>(Qg, kk), k_major<BLOCK_N>(k, kk), !SHORT_PATH || kk > 0);
    wgmma_commit();
}

// O += P·V of one key tile, 16 keys a wgmma (16 rows down V's column blocks), committed as one group.
__device__ __forceinline__ void issue_pv(float (&acc)[1][DJ][4], const unsigned (&p)[NJ / 2][4], const half* v) {
#pragma unroll
    for (int kj = 0; kj < NJ; kj += 2) wgmma_m64k16(acc, p[kj / 2], descriptor(v + kj * 8 * 64, BLOCK_N * 128));
    wgmma_commit();
}

// P's A fragments, all of them before the next fence: one written between wgmmas would need its own fence.
__device__ __forceinline__ void p_fragments(unsigned (&p)[NJ / 2][4], const float (&scores)[1][NJ][4]) {
#pragma unroll
    for (int kj = 0; kj < NJ; kj += 2) FlashWarp::p_fragment(p[kj / 2], scores, 0, kj);
}

extern "C" __global__ void __launch_bounds__(THREADS + PRODUCER_THREADS, MIN_BLOCKS)
attention(const __grid_constant__ TensorMap map_q, const __grid_constant__ TensorMap map_k,
          const __grid_constant__ TensorMap map_v, half* O, int S, float scale_log2, int causal
          ) {
    extern __shared__ __align__(128) half smem_raw[];
    __shared__ unsigned long long q_full, full[STAGES], empty[STAGES];
    half* Qs = smem_raw + swizzle_atom_offset(smem_raw);  // 1024-byte aligned, as the swizzle needs
    half* Ks = Qs + Q_TILE;
    half* Vs = Ks + STAGES * KV_TILE;
    const int head = blockIdx.y;
    const KeyRange keys(causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x, S, causal);  // heaviest causal blocks first
    const int tiles = keys.tiles();
    constexpr int t0 = 0, round = 0, rounds = 1;  // one item: the ring from tile 0, Q's barrier in phase 0
    if (threadIdx.x == 0) mbarrier_init(&q_full, 1);
    ring_init(full, empty, STAGES, WARPS);  // empty[s]: one arrive per consumer warp (and the fence for q_full too)
    __syncthreads();

    if (threadIdx.x / 32 >= PRODUCER) {  // ------------------------------------------------------ producer
        // a warpgroup: one thread issues the copies, the registers go to the consumers
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(PRODUCER_REGISTERS));
        if (threadIdx.x == THREADS) {
            prefetch_tensormaps(map_q, map_k);
            prefetch_tensormap(map_v);
            mbarrier_arrive_expect_bytes(&q_full, Q_BYTES);
            load_tile<BLOCK_M>(Qs, map_q, keys.m0, head, &q_full);
            for (int t = 0; t < tiles; ++t) {
                const int s = (t0 + t) % STAGES;
                mbarrier_wait(&empty[s], ((t0 + t) / STAGES + 1) & 1);  // consumers done with the ring's last round
                mbarrier_arrive_expect_bytes(&full[s], STAGE_BYTES);
                load_tile<BLOCK_N>(Ks + s * KV_TILE, map_k, t * BLOCK_N, head, &full[s]);
                load_tile<BLOCK_N>(Vs + s * KV_TILE, map_v, t * BLOCK_N, head, &full[s]);
            }
        }
        return;
    }
    // --------------------------------------------------------------------------------- consumer warpgroups
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(CONSUMER_REGISTERS));
    const int group = threadIdx.x / 128;                 // this warp's consumer warpgroup
    const half* Qg = Qs + group * 64 * 64;               // the group's 64 rows of each 64-column block of Q
    FlashWarp warp;
    if (group == LAST_GROUP) pass_turn(group);  // warpgroup 0 goes first
    const int row0 = keys.m0 + threadIdx.x / 32 * 16;  // this warp's 16 queries
    warp.init();
    mbarrier_wait(&q_full, round & 1);
    // rung 10: tile t's softmax runs while the tensor cores do tile t - 1's P·V
    float scores[1][NJ][4] = {}, alpha[1][2];
    unsigned p[NJ / 2][4];
    const auto softmax_of = [&](int t) {  // scores become P of tile t; acc's rescale is left to the caller
        if (keys.masked(t * BLOCK_N)) warp.mask(scores, t * BLOCK_N, row0, S, causal);
        warp.softmax<false>(scores, scale_log2, alpha);
    };
    mbarrier_wait(&full[t0 % STAGES], (t0 / STAGES) & 1);  // tile 0: its S alone, then its softmax
    wait_turn(group);
    wgmma_fence();
    issue_scores(scores, Qg, Ks + t0 % STAGES * KV_TILE);
    pass_turn(group);
    wgmma_wait<0>();
    softmax_of(0);
    p_fragments(p, scores);  // acc is zero: nothing to rescale
    for (int t = 1; t < tiles; ++t) {  // S of tile t and P·V of tile t - 1 in one turn, tile t's softmax under P·V
        const int s = (t0 + t) % STAGES;
#pragma unroll
        for (int j = 0; j < NJ; ++j)  // wgmma adds to its accumulators: tile t's S starts from zero, not P of t - 1
            scores[0][j][0] = scores[0][j][1] = scores[0][j][2] = scores[0][j][3] = 0.f;
        mbarrier_wait(&full[s], ((t0 + t) / STAGES) & 1);
        wait_turn(group);
        wgmma_fence();  // acc, P and S were written by ordinary instructions
        issue_scores(scores, Qg, Ks + s * KV_TILE);
        issue_pv(warp.acc, p, Vs + (t0 + t - 1) % STAGES * KV_TILE);
        pass_turn(group);
        wgmma_wait<1>();  // S of tile t landed; P·V of tile t - 1 may still run
        softmax_of(t);
        wgmma_wait<0>();
        if (threadIdx.x % 32 == 0) mbarrier_arrive(&empty[(t0 + t - 1) % STAGES]);  // tile t - 1 read
        warp.rescale(alpha);
        p_fragments(p, scores);
    }
    wait_turn(group);
    wgmma_fence();  // the last tile's P·V
    issue_pv(warp.acc, p, Vs + (t0 + tiles - 1) % STAGES * KV_TILE);
    if (group != LAST_GROUP || round + 1 < rounds) pass_turn(group);
    wgmma_wait<0>();
    if (threadIdx.x % 32 == 0) mbarrier_arrive(&empty[(t0 + tiles - 1) % STAGES]);
    warp.store(O + (size_t)head * S * HEAD_DIM, S, row0);
}
