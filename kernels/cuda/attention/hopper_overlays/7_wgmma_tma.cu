// Attention rung 7 (Hopper only, sm_90a) - wgmma and the TMA: rung 6's FlashAttention on Hopper's own instructions.
//
// Idea:       rungs 4-6 multiply on mma.sync, which an H100 runs on a legacy path at a fraction of its tensor
//             cores' rate (matmul rung 7). Here both products are wgmma, issued by one warpgroup (4 warps) for
//             its 64 queries: S = Q·Kᵀ reads Q and K from shared memory through descriptors (128-byte swizzle;
//             a row of K is a column of Kᵀ, so B is K-major), O += P·V takes P straight from the softmax's
//             registers (wgmma's A-in-registers form: its accumulator layout is its A layout, as for mma.sync
//             in rung 4) and V from shared memory (B N-major, as matmul's B). The softmax is rung 6's, on the
//             wgmma accumulators (flash_mma.cuh). No ldmatrix, no per-thread copies: the TMA brings Q and a
//             ring of STAGES K/V tiles, issued by one thread of a producer warp and met on mbarriers as in
//             matmul rung 8; its tensor maps are 3-D (head, row, column), so a head's ragged tail reads zeros,
//             never the next head's rows. Causal blocks skip the key tiles past their diagonal, heaviest first.
//             One consumer warpgroup per block; two or three blocks per SM overlap one's softmax with
//             another's wgmma.
// Prediction: 1.2-1.8x rung 6 (kernels/predictions/attention_cuda.toml); short of cuDNN's Hopper kernel
//             (SDPA's default, ~1.9x rung 6 at D128), whose two consumer warpgroups take turns between the
//             softmax and the tensor cores and overlap the next S with this P·V inside each warpgroup.
//             Variants measured on the way: kernels/NOTES.md, CUDA attention rung 7.
// Signature:  HGMMA for both products (no HMMA, no LDSM), UTMALDG (TMA loads), SYNCS (mbarrier arrive and
//             try-wait), MUFU.EX2 and SHFL for the softmax; no LDGSTS, no LDL/STL.
// HEAD_DIM (64 or 128), BLOCK_N (keys a tile: 64 or 128) and STAGES are defines. Dynamic shared memory: the Q tile
// and STAGES K and V tiles, unpadded (the swizzle avoids bank conflicts), + 1 KiB to align the swizzle atoms.
// Rungs 8-15 are this kernel with defines (their files in hopper_overlays/ include this one's): rung 8 with CONSUMERS 2
// and a producer warpgroup (PRODUCER_THREADS 128, setmaxnreg); rung 9 with PINGPONG too (the two consumer warpgroups
// take turns issuing Q·Kᵀ); rung 10 with INTRA_OVERLAP too (each warpgroup's softmax of a tile runs under its own P·V
// of the tile before); rung 13 with PERSISTENT too (a block an SM computes query block after query block, the next
// one's copies under the last one's end); rung 14 with SHORT_PATH too (less work between a tile's S landing and the
// warpgroup's next wgmma).
#ifndef CONSUMERS
#define CONSUMERS 1           // consumer warpgroups, 64 queries each
#endif
#ifndef PRODUCER_THREADS
#define PRODUCER_THREADS 32   // a producer warp; rung 8: a warpgroup, so that setmaxnreg can lower its registers
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 0   // no minimum: the compiler picks rung 7's registers (2-3 blocks an SM); rung 8: 1
#endif
#define BLOCK_M (64 * CONSUMERS)  // wgmma's 64 rows per consumer warpgroup
#define WARPS (4 * CONSUMERS)
#include "../flash_mma.cuh"
#include "../../matmul/tma.cuh"

#ifndef STAGES
#define STAGES 2
#endif
#ifndef SHORT_PATH
#define SHORT_PATH 0
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

#if PERSISTENT
// Rung 13's item i: query block i % m_blocks of head i / m_blocks, causal blocks heaviest first (as rung 7's grid).
__device__ __forceinline__ KeyRange item_keys(int i, int m_blocks, int S, int causal) {
    return KeyRange(causal ? m_blocks - 1 - i % m_blocks : i % m_blocks, S, causal);
}
#endif

#if PINGPONG
// Rung 9's turns at the tensor cores: named barrier 1 + g is warpgroup g's turn, granted by the warpgroup before
// it (256 threads: 128 waiting, 128 arriving); 0 is __syncthreads'. The last grants the first, none at its end.
__device__ __forceinline__ void wait_turn(int g) { asm volatile("bar.sync %0, 256;\n" :: "r"(1 + g) : "memory"); }
__device__ __forceinline__ void pass_turn(int g) {
    asm volatile("bar.arrive %0, 256;\n" :: "r"(1 + (g + 1) % CONSUMERS) : "memory");
}
constexpr int LAST_GROUP = CONSUMERS - 1;
#endif

#if OP_LAYOUT
// ladder.ops' launch (hopper_overlays/op_attention.cu): q, k and v any views of (B, H, S, D) whose rows are
// contiguous, O laid out as q, and each query's log-sum-exp. The tensor maps are 4-D, (D, S, H, B), or (D, H, S, B)
// where a head's rows lie further apart than its heads (the views of one (B, S, 3, H, D) projection): the TMA
// takes strides that grow. Thread 0 sets these from the arguments before the block's first barrier.
__shared__ int op_heads, op_heads_inner;
#endif

// A tile of ROWS rows from row y of head z, one TMA box per 64-column block.
template <int ROWS>
__device__ __forceinline__ void load_tile(half* dst, const TensorMap& map, int y, int z, unsigned long long* bar) {
#if OP_LAYOUT
    const int h = z % op_heads, b = z / op_heads;
#pragma unroll
    for (int c = 0; c < HEAD_DIM / 64; ++c)
        tma_load(dst + c * ROWS * 64, map, c * 64, op_heads_inner ? h : y, op_heads_inner ? y : h, b, bar);
#else
#pragma unroll
    for (int c = 0; c < HEAD_DIM / 64; ++c) tma_load(dst + c * ROWS * 64, map, c * 64, y, z, bar);
#endif
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
#if PERSISTENT
          , int heads  // B·H: rung 13's blocks take the (query block, head) items gridDim.x apart
#endif
#if OP_LAYOUT
          , float* lse, int heads_per_batch, int heads_inner, long long o_batch, long long o_head, int o_row
#endif
          ) {
    extern __shared__ __align__(128) half smem_raw[];
    __shared__ unsigned long long q_full, full[STAGES], empty[STAGES];
    half* Qs = smem_raw + swizzle_atom_offset(smem_raw);  // 1024-byte aligned, as the swizzle needs
    half* Ks = Qs + Q_TILE;
    half* Vs = Ks + STAGES * KV_TILE;
#if PERSISTENT
    __shared__ unsigned long long q_empty;  // the consumers' last S of an item: Q's tile may take the next item's
    const int m_blocks = (S + BLOCK_M - 1) / BLOCK_M, items = m_blocks * heads;
    const int rounds = (items - blockIdx.x + gridDim.x - 1) / gridDim.x;  // this block's items
    if (threadIdx.x == 0) mbarrier_init(&q_empty, WARPS);
#else
    const int head = blockIdx.y;
    const KeyRange keys(causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x, S, causal);  // heaviest causal blocks first
    const int tiles = keys.tiles();
    constexpr int t0 = 0, round = 0, rounds = 1;  // one item: the ring from tile 0, Q's barrier in phase 0
#endif
    if (threadIdx.x == 0) mbarrier_init(&q_full, 1);
#if OP_LAYOUT
    if (threadIdx.x == 0) op_heads = heads_per_batch, op_heads_inner = heads_inner;
#endif
    ring_init(full, empty, STAGES, WARPS);  // empty[s]: one arrive per consumer warp (and the fence for q_full too)
    __syncthreads();

    if (threadIdx.x / 32 >= PRODUCER) {  // ------------------------------------------------------ producer
#if PRODUCER_THREADS == 128  // a warpgroup: one thread issues the copies, the registers go to the consumers
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(PRODUCER_REGISTERS));
#endif
        if (threadIdx.x == THREADS) {
            prefetch_tensormaps(map_q, map_k);
            prefetch_tensormap(map_v);
#if PERSISTENT  // item after item; t0: the tiles of the items before, where the ring stands
            for (int item = blockIdx.x, round = 0, t0 = 0; item < items; item += gridDim.x, ++round) {
            const int head = item / m_blocks;
            const KeyRange keys = item_keys(item, m_blocks, S, causal);
            const int tiles = keys.tiles();
            mbarrier_wait(&q_empty, (round + 1) & 1);  // the consumers are done with the last item's Q
#endif
            mbarrier_arrive_expect_bytes(&q_full, Q_BYTES);
            load_tile<BLOCK_M>(Qs, map_q, keys.m0, head, &q_full);
            for (int t = 0; t < tiles; ++t) {
                const int s = (t0 + t) % STAGES;
                mbarrier_wait(&empty[s], ((t0 + t) / STAGES + 1) & 1);  // consumers done with the ring's last round
                mbarrier_arrive_expect_bytes(&full[s], STAGE_BYTES);
                load_tile<BLOCK_N>(Ks + s * KV_TILE, map_k, t * BLOCK_N, head, &full[s]);
                load_tile<BLOCK_N>(Vs + s * KV_TILE, map_v, t * BLOCK_N, head, &full[s]);
            }
#if PERSISTENT
            t0 += tiles;
            }
#endif
        }
        return;
    }
    // --------------------------------------------------------------------------------- consumer warpgroups
#if PRODUCER_THREADS == 128
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(CONSUMER_REGISTERS));
#endif
    const int group = threadIdx.x / 128;                 // this warp's consumer warpgroup
    const half* Qg = Qs + group * 64 * 64;               // the group's 64 rows of each 64-column block of Q
    FlashWarp warp;
#if PINGPONG
    if (group == LAST_GROUP) pass_turn(group);  // warpgroup 0 goes first
#endif
#if PERSISTENT  // the producer's items, in its order
    for (int item = blockIdx.x, round = 0, t0 = 0; item < items; item += gridDim.x, ++round) {
    const int head = item / m_blocks;
    const KeyRange keys = item_keys(item, m_blocks, S, causal);
    const int tiles = keys.tiles();
    // the item's last S has landed: the producer may bring the next item's Q (under this one's last softmax)
    const auto release_q = [&] { if (threadIdx.x % 32 == 0) mbarrier_arrive(&q_empty); };
#endif
    const int row0 = keys.m0 + threadIdx.x / 32 * 16;  // this warp's 16 queries
    warp.init();
    mbarrier_wait(&q_full, round & 1);
#if INTRA_OVERLAP  // rung 10: tile t's softmax runs while the tensor cores do tile t - 1's P·V
    float scores[1][NJ][4] = {}, alpha[1][2];
    unsigned p[NJ / 2][4];
    const auto softmax_of = [&](int t) {  // scores become P of tile t; acc's rescale is left to the caller
        if (keys.masked(t * BLOCK_N)) warp.mask(scores, t * BLOCK_N, row0, S, causal);
        warp.softmax<false>(scores, scale_log2, alpha);
    };
    mbarrier_wait(&full[t0 % STAGES], (t0 / STAGES) & 1);  // tile 0: its S alone, then its softmax
#if PINGPONG
    wait_turn(group);
#endif
    wgmma_fence();
    issue_scores(scores, Qg, Ks + t0 % STAGES * KV_TILE);
#if PINGPONG
    pass_turn(group);
#endif
    wgmma_wait<0>();
#if PERSISTENT
    if (tiles == 1) release_q();
#endif
    softmax_of(0);
    p_fragments(p, scores);  // acc is zero: nothing to rescale
    for (int t = 1; t < tiles; ++t) {  // S of tile t and P·V of tile t - 1 in one turn, tile t's softmax under P·V
        const int s = (t0 + t) % STAGES;
#if !SHORT_PATH  // rung 14: issue_scores's first wgmma overwrites S instead (accumulate 0)
#pragma unroll
        for (int j = 0; j < NJ; ++j)  // wgmma adds to its accumulators: tile t's S starts from zero, not P of t - 1
            scores[0][j][0] = scores[0][j][1] = scores[0][j][2] = scores[0][j][3] = 0.f;
#endif
        mbarrier_wait(&full[s], ((t0 + t) / STAGES) & 1);
#if PINGPONG
        wait_turn(group);
#endif
        wgmma_fence();  // acc, P and S were written by ordinary instructions
        issue_scores(scores, Qg, Ks + s * KV_TILE);
#if SHORT_PATH  // O's rescale by tile t - 1's alpha, under this S, before the P·V that adds to O
        warp.rescale(alpha);
        wgmma_fence();
#endif
        issue_pv(warp.acc, p, Vs + (t0 + t - 1) % STAGES * KV_TILE);
#if PINGPONG
        pass_turn(group);
#endif
        wgmma_wait<1>();  // S of tile t landed; P·V of tile t - 1 may still run
#if PERSISTENT
        if (t == tiles - 1) release_q();
#endif
        softmax_of(t);
        wgmma_wait<0>();
        if (threadIdx.x % 32 == 0) mbarrier_arrive(&empty[(t0 + t - 1) % STAGES]);  // tile t - 1 read
#if !SHORT_PATH
        warp.rescale(alpha);
#endif
        p_fragments(p, scores);
    }
#if PINGPONG
    wait_turn(group);
#endif
#if SHORT_PATH
    warp.rescale(alpha);  // with one tile, tile 0's alpha times O's zeros
#endif
    wgmma_fence();  // the last tile's P·V
    issue_pv(warp.acc, p, Vs + (t0 + tiles - 1) % STAGES * KV_TILE);
#if PINGPONG
    if (group != LAST_GROUP || round + 1 < rounds) pass_turn(group);
#endif
    wgmma_wait<0>();
    if (threadIdx.x % 32 == 0) mbarrier_arrive(&empty[(t0 + tiles - 1) % STAGES]);
#else
    for (int t = 0; t < tiles; ++t) {
        const int s = t % STAGES, n0 = t * BLOCK_N;
        const half *k = Ks + s * KV_TILE, *v = Vs + s * KV_TILE;
        mbarrier_wait(&full[s], (t / STAGES) & 1);  // K and V tile t landed
        float scores[1][NJ][4] = {};
#if PINGPONG
        wait_turn(group);
#endif
        wgmma_fence();
        issue_scores(scores, Qg, k);
#if PINGPONG  // the next warpgroup's Q·Kᵀ goes next, under this one's softmax
        if (group != LAST_GROUP || t + 1 < tiles) pass_turn(group);
#endif
        wgmma_wait<0>();
        if (keys.masked(n0)) warp.mask(scores, n0, row0, S, causal);
        warp.softmax(scores, scale_log2);  // scores become P; acc rescaled
        unsigned p[NJ / 2][4];
        p_fragments(p, scores);
        wgmma_fence();  // acc and P were written by ordinary instructions
        issue_pv(warp.acc, p, v);
        wgmma_wait<0>();
        if (threadIdx.x % 32 == 0) mbarrier_arrive(&empty[s]);  // this warp has read the stage
    }
#endif
#if OP_LAYOUT
    warp.store(O + head / op_heads * o_batch + head % op_heads * o_head, S, row0, o_row, lse + (size_t)head * S);
#else
    warp.store(O + (size_t)head * S * HEAD_DIM, S, row0);
#endif
#if PERSISTENT
    t0 += tiles;
    }
#endif
}
