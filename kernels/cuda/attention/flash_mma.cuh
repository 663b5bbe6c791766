// Tensor-core FlashAttention building blocks shared by attention rungs 4-7 (sm_75 and newer; rung 7 keeps the
// running state, the mask, the softmax, the P fragments and the store, and does both products with wgmma).
//
// A block owns BLOCK_M queries of one (b, h); each of its WARPS warps owns WM = BLOCK_M / WARPS of them
// (MI row tiles of 16). Per tile of BLOCK_N keys a warp computes, all in registers:
//   S = Q·Kᵀ     mma.sync m16n8k16: Q fragments from shared memory (ldmatrix), K rows as column fragments
//                (ldmatrix without .trans: a row of K is a column of Kᵀ);
//   online softmax on the accumulator fragments: a lane holds 2 rows (g = lane/4 and g + 8) x 2 keys
//                per 8-key fragment, so a row's max and sum need only the 4 lanes of a quad (2 shuffles);
//   O += P·V     the fp32 S fragments of two neighbouring 8-key tiles, rounded to fp16, are exactly the
//                A fragment of a 16-key step (the m16n8 output layout = the m16k16 input layout), so P
//                never goes through shared memory; V rows are k-major: ldmatrix .trans.
// The matmul ladder's tensor_core.cuh provides ldmatrix, mma_16816, the 16-byte tile copies and the
// bounds-checked fp16 store. Tiles in shared memory are rows of HEAD_DIM + PAD halves (no bank conflicts).
#pragma once
#include "../matmul/tensor_core.cuh"

#ifndef HEAD_DIM
#error "define HEAD_DIM (64 or 128)"
#endif
#ifndef BLOCK_M
#define BLOCK_M 64
#endif
#ifndef BLOCK_N
#define BLOCK_N 64
#endif
#ifndef WARPS
#define WARPS 4
#endif
#define THREADS (32 * WARPS)
#define NEG_INF __int_as_float(0xff800000)  // -inf (NVRTC has no <math.h> INFINITY)

constexpr int WM = BLOCK_M / WARPS;      // queries per warp
constexpr int MI = WM / 16;              // 16-row tiles per warp
constexpr int NJ = BLOCK_N / 8;          // 8-key fragments per key tile
constexpr int DJ = HEAD_DIM / 8;         // 8-column fragments of the output row
constexpr int LD = HEAD_DIM + PAD;       // halves per row of a Q, K or V tile in shared memory
constexpr int TILE = BLOCK_N * LD;       // halves of one K (or V) tile
static_assert(WM % 16 == 0 && BLOCK_N % 16 == 0 && HEAD_DIM % 16 == 0, "tile shapes");

using CopyQ = TileCopy<BLOCK_M, HEAD_DIM, THREADS>;
using CopyKV = TileCopy<BLOCK_N, HEAD_DIM, THREADS>;

#ifndef FAST_EXP2
#define FAST_EXP2 0
#endif
// 2^x for the softmax. exp2f is MUFU.EX2 wrapped in a range fix-up (a compare and two predicated multiplies, for
// results below 2^-126); FAST_EXP2 (rung 11) issues MUFU.EX2 alone (ex2.approx.ftz: such results become 0, which
// they round to in fp16 P anyway).
__device__ __forceinline__ float exp2_softmax(float x) {
#if FAST_EXP2
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return exp2f(x);
#endif
}

__device__ __forceinline__ unsigned pack_half2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&h);
}

// The key tiles block m_block walks, and whether tile n0 needs the mask.
struct KeyRange {
    int m0, end, S, causal;
    __device__ KeyRange(int m_block, int S_, int causal_)
        : m0(m_block * BLOCK_M), end(causal_ ? min(S_, m_block * BLOCK_M + BLOCK_M) : S_), S(S_), causal(causal_) {}
    __device__ int tiles() const { return (end + BLOCK_N - 1) / BLOCK_N; }
    __device__ bool masked(int n0) const { return n0 + BLOCK_N > S || (causal && n0 + BLOCK_N - 1 > m0); }
};

// One warp's running state for its WM queries: the output accumulators, and per row the running max m
// (in log2 units) and this lane's share of the running sum l. Row r of fragment (mi, half) is
// mi*16 + lane/4 + 8*half.
struct FlashWarp {
    float acc[MI][DJ][4];
    float m[MI][2], l[MI][2];

    __device__ void init() {
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
            for (int h = 0; h < 2; ++h) m[mi][h] = -1e30f, l[mi][h] = 0.0f;  // finite m: see rung 3
#pragma unroll
            for (int dj = 0; dj < DJ; ++dj)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[mi][dj][e] = 0.0f;
        }
    }

    // Keys past S, or after their query (causal), score -inf: s holds the scores of keys n0 .. n0 + BLOCK_N - 1
    // for the warp's rows from row0 (fragment element e of lane: row lane/4 + 8*(e/2), key 2*(lane%4) + e%2).
    __device__ void mask(float (&s)[MI][NJ][4], int n0, int row0, int S, int causal) const {
        const int lane = threadIdx.x % 32;
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int nj = 0; nj < NJ; ++nj)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int i = row0 + mi * 16 + lane / 4 + e / 2 * 8, j = n0 + nj * 8 + lane % 4 * 2 + e % 2;
                    if (j >= S || (causal && j > i)) s[mi][nj][e] = NEG_INF;
                }
    }

    // The online softmax of one key tile's scores s: new running max, l and acc rescaled by exp2(m_old - m_new),
    // and s becomes p = exp2(s·scale - m_new). RESCALE_NOW false (rung 10, whose P·V still writes acc): the factors
    // go to alpha instead, for rescale once that P·V is done.
    template <bool RESCALE_NOW = true>
    __device__ void softmax(float (&s)[MI][NJ][4], float scale_log2, float (&alpha_out)[MI][2]) {
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float top = NEG_INF;
#pragma unroll
                for (int nj = 0; nj < NJ; ++nj) top = fmaxf(top, fmaxf(s[mi][nj][2 * h], s[mi][nj][2 * h + 1]));
                top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));  // the quad holding the row
                top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
                const float m_new = fmaxf(m[mi][h], top * scale_log2);
                const float alpha = exp2_softmax(m[mi][h] - m_new);
                if (!RESCALE_NOW) alpha_out[mi][h] = alpha;
                m[mi][h] = m_new;
                float sum = 0.0f;
#pragma unroll
                for (int nj = 0; nj < NJ; ++nj)
#pragma unroll
                    for (int e = 2 * h; e < 2 * h + 2; ++e) {
                        s[mi][nj][e] = exp2_softmax(s[mi][nj][e] * scale_log2 - m_new);  // FFMA, EX2 (+ exp2f's fix-up)
                        sum += s[mi][nj][e];
                    }
                l[mi][h] = l[mi][h] * alpha + sum;
                if (RESCALE_NOW) rescale_row(alpha, mi, h);
            }
    }

    __device__ void softmax(float (&s)[MI][NJ][4], float scale_log2) {
        float unused[MI][2];
        softmax(s, scale_log2, unused);
    }

    __device__ void rescale_row(float alpha, int mi, int h) {
#pragma unroll
        for (int dj = 0; dj < DJ; ++dj) acc[mi][dj][2 * h] *= alpha, acc[mi][dj][2 * h + 1] *= alpha;
    }

    __device__ void rescale(const float (&alpha)[MI][2]) {
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int h = 0; h < 2; ++h) rescale_row(alpha[mi][h], mi, h);
    }

    // P's fp16 A fragment (m16k16) for keys kj*8 .. kj*8 + 15 of row tile mi: the two 8-key accumulator fragments
    // kj and kj + 1, rounded, as they are (the m16n8 output layout is the m16k16 input layout).
    __device__ static void p_fragment(unsigned (&p)[4], const float (&s)[MI][NJ][4], int mi, int kj) {
        p[0] = pack_half2(s[mi][kj][0], s[mi][kj][1]);
        p[1] = pack_half2(s[mi][kj][2], s[mi][kj][3]);
        p[2] = pack_half2(s[mi][kj + 1][0], s[mi][kj + 1][1]);
        p[3] = pack_half2(s[mi][kj + 1][2], s[mi][kj + 1][3]);
    }

    // One key tile: Qw = the warp's first query row in shared memory, Ks and Vs the tiles of keys
    // n0 .. n0 + BLOCK_N - 1. MASKED (the last tile past S, or one that crosses the causal diagonal):
    // keys past S or after their query score -inf. row0 = the warp's first query in the head.
    template <bool MASKED>
    __device__ void tile(const half* Qw, const half* Ks, const half* Vs, float scale_log2, int n0, int row0,
                         int S, int causal) {
        const int lane = threadIdx.x % 32;
        float s[MI][NJ][4] = {};
#pragma unroll
        for (int kk = 0; kk < HEAD_DIM; kk += 16) {  // S = Q·Kᵀ, 16 dimensions a step
            unsigned a[MI][4];
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) ldmatrix_x4(a[mi], Qw + (mi * 16 + lane % 16) * LD + kk + lane / 16 * 8);
#pragma unroll
            for (int nj = 0; nj < NJ; nj += 2) {  // matrices: keys 0-7 | 8-15 x dims 0-7 | 8-15
                unsigned r[4];
                ldmatrix_x4(r, Ks + (nj * 8 + lane % 8 + lane / 16 * 8) * LD + kk + lane / 8 % 2 * 8);
                const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
#pragma unroll
                for (int mi = 0; mi < MI; ++mi) mma_16816(s[mi][nj], a[mi], b0), mma_16816(s[mi][nj + 1], a[mi], b1);
            }
        }
        if (MASKED) mask(s, n0, row0, S, causal);
        softmax(s, scale_log2);
#pragma unroll
        for (int kj = 0; kj < NJ; kj += 2) {  // O += P·V, 16 keys a step
            unsigned p[MI][4];
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) p_fragment(p[mi], s, mi, kj);
#pragma unroll
            for (int dj = 0; dj < DJ; dj += 2) {
                unsigned r[4];
                ldmatrix_x4_trans(r, Vs + (kj * 8 + lane % 16) * LD + dj * 8 + lane / 16 * 8);
                const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
#pragma unroll
                for (int mi = 0; mi < MI; ++mi) mma_16816(acc[mi][dj], p[mi], b0), mma_16816(acc[mi][dj + 1], p[mi], b1);
            }
        }
    }

    // Key tile n0 of `keys`, masked only where it must be.
    __device__ void step(const half* Qw, const half* Ks, const half* Vs, float scale_log2, int n0, const KeyRange& keys,
                         int row0) {
        if (keys.masked(n0))
            tile<true>(Qw, Ks, Vs, scale_log2, n0, row0, keys.S, keys.causal);
        else
            tile<false>(Qw, Ks, Vs, scale_log2, n0, row0, keys.S, keys.causal);
    }

    // O = acc / l for the warp's rows (the quad's partial sums added first), rows past S not stored; O's rows
    // row_stride halves apart. Given `lse`, each row's log-sum-exp of its scaled scores too, natural log (m is in
    // base 2): ln Σ exp(s·scale) = m · ln 2 + ln l, what a backward pass recomputes the probabilities from.
    __device__ void store(half* O, int S, int row0, int row_stride = HEAD_DIM, float* lse = nullptr) {
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float total = l[mi][h];
                total += __shfl_xor_sync(0xffffffffu, total, 1);
                total += __shfl_xor_sync(0xffffffffu, total, 2);
                const float inv = 1.0f / total;
#pragma unroll
                for (int dj = 0; dj < DJ; ++dj) acc[mi][dj][2 * h] *= inv, acc[mi][dj][2 * h + 1] *= inv;
                const int row = row0 + mi * 16 + threadIdx.x % 32 / 4 + h * 8;
                if (lse && threadIdx.x % 4 == 0 && row < S) lse[row] = m[mi][h] * 0.6931471805599453f + logf(total);
            }
        store_accumulators<WM, HEAD_DIM>(acc, O, S, HEAD_DIM, row0, 0, row_stride);
    }
};


// Rung 4's loop (and rung 5's without cp.async): Q, then each K and V tile, global -> registers -> shared
// memory, and every warp waits for the copies before it computes. Qh, Kh, Vh: the head's first rows. A template, so
// that blocks whose threads do not split the tiles evenly (rung 12's 512) never instantiate the copies.
template <class Q_COPY = CopyQ, class KV_COPY = CopyKV>
__device__ __forceinline__ void attend_loading_synchronously(FlashWarp& warp, const half* Qh, const half* Kh,
                                                             const half* Vh, half* Qs, half* Ks, half* Vs,
                                                             const KeyRange& keys, float scale_log2) {
    const int warp_row = threadIdx.x / 32 * WM;
    uint4 q_regs[Q_COPY::PER_THREAD], k_regs[KV_COPY::PER_THREAD], v_regs[KV_COPY::PER_THREAD];
    Q_COPY::to_registers(q_regs, Qh + (size_t)keys.m0 * HEAD_DIM, HEAD_DIM, keys.S - keys.m0, HEAD_DIM);
    Q_COPY::to_shared(Qs, LD, q_regs);
    for (int n0 = 0; n0 < keys.end; n0 += BLOCK_N) {
        __syncthreads();  // every warp is done with the previous K, V tiles
        KV_COPY::to_registers(k_regs, Kh + (size_t)n0 * HEAD_DIM, HEAD_DIM, keys.S - n0, HEAD_DIM);
        KV_COPY::to_registers(v_regs, Vh + (size_t)n0 * HEAD_DIM, HEAD_DIM, keys.S - n0, HEAD_DIM);
        KV_COPY::to_shared(Ks, LD, k_regs);
        KV_COPY::to_shared(Vs, LD, v_regs);
        __syncthreads();  // the tiles (and, the first time, Q) are complete
        warp.step(Qs + warp_row * LD, Ks, Vs, scale_log2, n0, keys, keys.m0 + warp_row);
    }
}
