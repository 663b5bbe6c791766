// Attention rung 15 (Hopper only, sm_90a) - autotuned: rung 14's kernel with its consumer warpgroups, key tile and
// ring depth chosen by a search, per GPU and shape.
//
// Idea:       rungs 12-14 fix one block per D: at D = 64 three consumer warpgroups (192 queries), 128-key tiles,
//             a ring of 3. That suits S 4096, where 192 queries leave 12 consumer warps an SM to hide the softmax's
//             waits. It suits a model's shorter sequences less: GPT-2's S 1024 is 5 1/3 blocks of 192 queries, so
//             its last query block of every head is a third full, and causal blocks of 192 queries compute more of
//             the masked triangle than blocks of 128. Here the launcher compiles one variant per configuration
//             (-D), prunes what cannot fit (shared memory; a variant that spills registers), times the rest and
//             caches the winner per GPU (ladder/autotune.py, kernels/attention.py), as rung 6 does for rung 5:
//             CONSUMERS in {2, 3} (240 or 160 registers a consumer thread), BLOCK_N in {64, 128}, STAGES 2-4.
// Prediction: 0.98-1.05x rung 14 at S 4096 (kernels/predictions/attention_cuda.toml: its configuration is in the
//             space, so the search can only match it or find better, up to the timing's spread); more at the
//             model shapes the search also covers, GPT-2's S 1024 above all.
// Variants measured on the way: kernels/NOTES.md, CUDA attention rung 15.
// Signature:  as rung 14 with the chosen configuration: two or three consumer warpgroups' setmaxnreg (240 or
//             160) and turn barriers; no LDL/STL.
// Generated from hopper_overlays/15_autotuned.cu by `python -m ladder.flatten`: do not edit; edit there.
#define SHORT_PATH 1
#if HEAD_DIM == 64 && !defined(CONSUMERS)  // rung 15 passes its searched count
#define CONSUMERS 3
#define CONSUMER_REGISTERS 160
#endif
#define FAST_EXP2 1
#ifndef CONSUMERS  // rung 12: three at D = 64
#define CONSUMERS 2
#define CONSUMER_REGISTERS 240   // 256 x 240 + 128 x 24 = 64,512 of the SM's 65,536
#endif
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

// Rung 13's item i: query block i % m_blocks of head i / m_blocks, causal blocks heaviest first (as rung 7's grid).
__device__ __forceinline__ KeyRange item_keys(int i, int m_blocks, int S, int causal) {
    return KeyRange(causal ? m_blocks - 1 - i % m_blocks : i % m_blocks, S, causal);
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
          , int heads  // B·H: rung 13's blocks take the (query block, head) items gridDim.x apart
          ) {
    extern __shared__ __align__(128) half smem_raw[];
    __shared__ unsigned long long q_full, full[STAGES], empty[STAGES];
    half* Qs = smem_raw + swizzle_atom_offset(smem_raw);  // 1024-byte aligned, as the swizzle needs
    half* Ks = Qs + Q_TILE;
    half* Vs = Ks + STAGES * KV_TILE;
    __shared__ unsigned long long q_empty;  // the consumers' last S of an item: Q's tile may take the next item's
    const int m_blocks = (S + BLOCK_M - 1) / BLOCK_M, items = m_blocks * heads;
    const int rounds = (items - blockIdx.x + gridDim.x - 1) / gridDim.x;  // this block's items
    if (threadIdx.x == 0) mbarrier_init(&q_empty, WARPS);
    if (threadIdx.x == 0) mbarrier_init(&q_full, 1);
    ring_init(full, empty, STAGES, WARPS);  // empty[s]: one arrive per consumer warp (and the fence for q_full too)
    __syncthreads();

    if (threadIdx.x / 32 >= PRODUCER) {  // ------------------------------------------------------ producer
        // a warpgroup: one thread issues the copies, the registers go to the consumers
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(PRODUCER_REGISTERS));
        if (threadIdx.x == THREADS) {
            prefetch_tensormaps(map_q, map_k);
            prefetch_tensormap(map_v);
            // item after item; t0: the tiles of the items before, where the ring stands
            for (int item = blockIdx.x, round = 0, t0 = 0; item < items; item += gridDim.x, ++round) {
            const int head = item / m_blocks;
            const KeyRange keys = item_keys(item, m_blocks, S, causal);
            const int tiles = keys.tiles();
            mbarrier_wait(&q_empty, (round + 1) & 1);  // the consumers are done with the last item's Q
            mbarrier_arrive_expect_bytes(&q_full, Q_BYTES);
            load_tile<BLOCK_M>(Qs, map_q, keys.m0, head, &q_full);
            for (int t = 0; t < tiles; ++t) {
                const int s = (t0 + t) % STAGES;
                mbarrier_wait(&empty[s], ((t0 + t) / STAGES + 1) & 1);  // consumers done with the ring's last round
                mbarrier_arrive_expect_bytes(&full[s], STAGE_BYTES);
                load_tile<BLOCK_N>(Ks + s * KV_TILE, map_k, t * BLOCK_N, head, &full[s]);
                load_tile<BLOCK_N>(Vs + s * KV_TILE, map_v, t * BLOCK_N, head, &full[s]);
            }
            t0 += tiles;
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
    // the producer's items, in its order
    for (int item = blockIdx.x, round = 0, t0 = 0; item < items; item += gridDim.x, ++round) {
    const int head = item / m_blocks;
    const KeyRange keys = item_keys(item, m_blocks, S, causal);
    const int tiles = keys.tiles();
    // the item's last S has landed: the producer may bring the next item's Q (under this one's last softmax)
    const auto release_q = [&] { if (threadIdx.x % 32 == 0) mbarrier_arrive(&q_empty); };
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
    if (tiles == 1) release_q();
    softmax_of(0);
    p_fragments(p, scores);  // acc is zero: nothing to rescale
    for (int t = 1; t < tiles; ++t) {  // S of tile t and P·V of tile t - 1 in one turn, tile t's softmax under P·V
        const int s = (t0 + t) % STAGES;
        mbarrier_wait(&full[s], ((t0 + t) / STAGES) & 1);
        wait_turn(group);
        wgmma_fence();  // acc, P and S were written by ordinary instructions
        issue_scores(scores, Qg, Ks + s * KV_TILE);
        // O's rescale by tile t - 1's alpha, under this S, before the P·V that adds to O
        warp.rescale(alpha);
        wgmma_fence();
        issue_pv(warp.acc, p, Vs + (t0 + t - 1) % STAGES * KV_TILE);
        pass_turn(group);
        wgmma_wait<1>();  // S of tile t landed; P·V of tile t - 1 may still run
        if (t == tiles - 1) release_q();
        softmax_of(t);
        wgmma_wait<0>();
        if (threadIdx.x % 32 == 0) mbarrier_arrive(&empty[(t0 + t - 1) % STAGES]);  // tile t - 1 read
        p_fragments(p, scores);
    }
    wait_turn(group);
    warp.rescale(alpha);  // with one tile, tile 0's alpha times O's zeros
    wgmma_fence();  // the last tile's P·V
    issue_pv(warp.acc, p, Vs + (t0 + tiles - 1) % STAGES * KV_TILE);
    if (group != LAST_GROUP || round + 1 < rounds) pass_turn(group);
    wgmma_wait<0>();
    if (threadIdx.x % 32 == 0) mbarrier_arrive(&empty[(t0 + tiles - 1) % STAGES]);
    warp.store(O + (size_t)head * S * HEAD_DIM, S, row0);
    t0 += tiles;
    }
}
