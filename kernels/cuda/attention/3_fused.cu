// Attention rung 3 - fused: one kernel, FlashAttention's online softmax, on CUDA cores.
//
// Idea:       a block owns BLOCK_M queries of one (b, h). It loads their Q tile once into shared memory,
//             then walks K and V in tiles of BLOCK_N keys through shared memory. For each tile it computes
//             the scores in fp32 (FFMA), and per query keeps a running max m, a running sum l of
//             exp2(score - m) and the unnormalized output acc; when the max grows, l and acc are first
//             rescaled by exp2(m_old - m_new). O = acc / l is written once: S and P never reach DRAM.
//             Causal: the key loop stops after the block's last query, the tiles it crosses are masked.
// Mapping:    4 warps, BLOCK_M/4 queries per warp. Scores: lane = key (BLOCK_N/32 keys a lane), so the
//             row max is one shuffle reduction per row and tile and the sum l stays per lane until the
//             end. P goes through the warp's own slice of shared memory (no block barrier); for acc += P·V
//             a lane owns HEAD_DIM/32 columns (half2 pairs 2·lane + 64c) of each of its warp's queries.
// Scale:      Q is stored in shared memory as fp32, pre-multiplied by log2(e)/√D: the scores come out in
//             base 2, exp2f is one MUFU.EX2 (with its range fix-up), and Q is converted to fp32 once.
// Prediction: DRAM traffic drops from ~20·B·H·S² bytes (rungs 1-2) to about Q, K, V and O once (K and V
//             come from L2 once per block of queries): now limited by FFMA issue, about 2·D FMAs per
//             (query, key) pair plus the loads that feed them; far above rung 2, far below the tensor-core
//             rungs: 17-51% of the fp32 roof (kernels/predictions/attention_cuda.toml). Causal does about
//             half the work in about half the time.
// Signature:  a single kernel; LDS, STS and BAR (the tiles), FFMA for both products, MUFU.EX2 (exp2f),
//             SHFL (the row max and the final sum), 128-bit global loads; no HMMA.
// HEAD_DIM (64 or 128) must be defined; BLOCK_M and BLOCK_N are defines with defaults. Static shared
// memory stays under 48 KiB: the launcher takes BLOCK_M = 32 for HEAD_DIM = 128 (Q in fp32 is 16 KiB).
#include <cuda_fp16.h>

#define NEG_INF __int_as_float(0xff800000)  // -inf (NVRTC has no <math.h> INFINITY)

#ifndef HEAD_DIM
#error "define HEAD_DIM (64 or 128)"
#endif
#ifndef BLOCK_M
#define BLOCK_M 64
#endif
#ifndef BLOCK_N
#define BLOCK_N 32
#endif
#define WARPS 4
#define THREADS (32 * WARPS)
#define ROWS (BLOCK_M / WARPS)   // queries per warp
#define KEYS (BLOCK_N / 32)      // keys per lane: lane + 32t
#define PAIRS (HEAD_DIM / 64)    // output half2 pairs per lane: columns 2·lane + 64c, +1
#define KPAD 8                   // K rows 16 bytes longer: a lane's 16-byte reads of its own key row
                                 // land 16 bytes further along the banks than its neighbour's
#define FULL 0xffffffffu
static_assert(HEAD_DIM % 64 == 0 && BLOCK_M % WARPS == 0 && BLOCK_N % 32 == 0, "tile shapes");
static_assert(4 * BLOCK_M * HEAD_DIM + 2 * BLOCK_N * (2 * HEAD_DIM + KPAD) + 4 * BLOCK_M * BLOCK_N <= 48 * 1024,
              "static shared memory over 48 KiB: lower BLOCK_M or BLOCK_N");

union Vec8 { uint4 u; __half2 h[4]; };  // 16 bytes: 8 halves, one load

// Copy rows [row0, row0 + rows) of a (S, HEAD_DIM) head into shared memory, 16 bytes per thread per
// step (coalesced), zeros past S: masked keys then hold 0·V = 0, never 0·garbage (a NaN there would leak).
template <int rows, int ld, typename Store>
__device__ __forceinline__ void load_tile(const half* head, int row0, int S, Store store) {
    constexpr int VECS = HEAD_DIM / 8;
    for (int idx = threadIdx.x; idx < rows * VECS; idx += THREADS) {
        const int r = idx / VECS, c = (idx % VECS) * 8;
        Vec8 v;
        v.u = make_uint4(0, 0, 0, 0);
        if (row0 + r < S) v.u = *reinterpret_cast<const uint4*>(head + (size_t)(row0 + r) * HEAD_DIM + c);
        store(r * ld + c, v);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
attention(const half* Q, const half* K, const half* V, half* O, int S, float qk_scale, int causal) {
    __shared__ __align__(16) float Qs[BLOCK_M * HEAD_DIM];              // scaled, fp32
    __shared__ __align__(16) half Ks[BLOCK_N * (HEAD_DIM + KPAD)];
    __shared__ __align__(16) half Vs[BLOCK_N * HEAD_DIM];
    __shared__ __align__(16) float Ps[WARPS][ROWS * BLOCK_N];          // each warp's probabilities

    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int m0 = blockIdx.x * BLOCK_M;
    const size_t head = (size_t)blockIdx.y * S * HEAD_DIM;
    const int r0 = warp * ROWS;  // this warp's first query in the block

    load_tile<BLOCK_M, HEAD_DIM>(Q + head, m0, S, [&](int at, const Vec8& v) {
        const float2 a = __half22float2(v.h[0]), b = __half22float2(v.h[1]);
        const float2 c = __half22float2(v.h[2]), d = __half22float2(v.h[3]);
        *reinterpret_cast<float4*>(&Qs[at]) = make_float4(a.x * qk_scale, a.y * qk_scale, b.x * qk_scale, b.y * qk_scale);
        *reinterpret_cast<float4*>(&Qs[at + 4]) = make_float4(c.x * qk_scale, c.y * qk_scale, d.x * qk_scale, d.y * qk_scale);
    });

    // m starts at -1e30, not -inf, as a guard (the first tile holds key 0, never masked): a tile whose keys
    // are all masked (-inf) gets m_new = m_old, alpha = exp2(0) = 1 and p = 0, never exp2(-inf - -inf) = NaN.
    float m[ROWS], l[ROWS], acc[ROWS][2 * PAIRS];
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        m[r] = -1e30f;
        l[r] = 0.0f;  // this lane's share of the sum; the lanes are added at the end
        #pragma unroll
        for (int c = 0; c < 2 * PAIRS; ++c) acc[r][c] = 0.0f;
    }

    const int n_end = causal ? min(S, m0 + BLOCK_M) : S;  // causal: no key after the block's last query
    for (int n0 = 0; n0 < n_end; n0 += BLOCK_N) {
        __syncthreads();  // every warp is done with the previous K, V tiles
        load_tile<BLOCK_N, HEAD_DIM + KPAD>(K + head, n0, S, [&](int at, const Vec8& v) {
            *reinterpret_cast<uint4*>(&Ks[at]) = v.u;
        });
        load_tile<BLOCK_N, HEAD_DIM>(V + head, n0, S, [&](int at, const Vec8& v) {
            *reinterpret_cast<uint4*>(&Vs[at]) = v.u;
        });
        __syncthreads();  // the tiles (and, the first time, Q) are complete

        // s[r][t] = score of query m0 + r0 + r and key n0 + lane + 32t, 8 dimensions at a time:
        // 16 bytes of the lane's K row (8 halves to fp32), then 8 FFMAs for each of the warp's queries
        // with Q read as two float4 that all lanes share (a broadcast).
        float s[ROWS][KEYS] = {};
        for (int d = 0; d < HEAD_DIM; d += 8) {
            float k[KEYS][8];
            #pragma unroll
            for (int t = 0; t < KEYS; ++t) {
                Vec8 kv;
                kv.u = *reinterpret_cast<const uint4*>(&Ks[(lane + 32 * t) * (HEAD_DIM + KPAD) + d]);
                #pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float2 f = __half22float2(kv.h[e]);
                    k[t][2 * e] = f.x;
                    k[t][2 * e + 1] = f.y;
                }
            }
            #pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                const float4 qa = *reinterpret_cast<const float4*>(&Qs[(r0 + r) * HEAD_DIM + d]);
                const float4 qb = *reinterpret_cast<const float4*>(&Qs[(r0 + r) * HEAD_DIM + d + 4]);
                #pragma unroll
                for (int t = 0; t < KEYS; ++t)
                    s[r][t] += qa.x * k[t][0] + qa.y * k[t][1] + qa.z * k[t][2] + qa.w * k[t][3]
                             + qb.x * k[t][4] + qb.y * k[t][5] + qb.z * k[t][6] + qb.w * k[t][7];
            }
        }

        // Online softmax, one query at a time (m is the same in every lane of the warp).
        float* P = Ps[warp];
        #pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const int i = m0 + r0 + r;
            float top = NEG_INF;
            #pragma unroll
            for (int t = 0; t < KEYS; ++t) {
                const int j = n0 + lane + 32 * t;
                if (j >= S || (causal && j > i)) s[r][t] = NEG_INF;  // past S, or a later key
                top = fmaxf(top, s[r][t]);
            }
            #pragma unroll
            for (int off = 16; off > 0; off /= 2) top = fmaxf(top, __shfl_xor_sync(FULL, top, off));
            const float m_new = fmaxf(m[r], top);   // finite: m[r] >= -1e30
            const float alpha = exp2f(m[r] - m_new);  // 1 if the max did not grow, 0 on the first tile
            m[r] = m_new;
            float sum = 0.0f;
            #pragma unroll
            for (int t = 0; t < KEYS; ++t) {
                const float p = exp2f(s[r][t] - m_new);  // 0 for masked keys
                P[r * BLOCK_N + lane + 32 * t] = p;
                sum += p;
            }
            l[r] = l[r] * alpha + sum;
            #pragma unroll
            for (int c = 0; c < 2 * PAIRS; ++c) acc[r][c] *= alpha;
        }
        __syncwarp();  // the warp's P is written before its lanes read each other's

        // acc += P·V, 4 keys at a time: the lane's columns of 4 rows of V (half2 reads, consecutive
        // lanes on consecutive words), then for each query 4 probabilities as one float4 broadcast.
        for (int j = 0; j < BLOCK_N; j += 4) {
            float2 v[4][PAIRS];
            #pragma unroll
            for (int jj = 0; jj < 4; ++jj)
                #pragma unroll
                for (int c = 0; c < PAIRS; ++c)
                    v[jj][c] = __half22float2(*reinterpret_cast<const __half2*>(
                        &Vs[(j + jj) * HEAD_DIM + 2 * lane + 64 * c]));
            #pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                const float4 p = *reinterpret_cast<const float4*>(&P[r * BLOCK_N + j]);
                #pragma unroll
                for (int c = 0; c < PAIRS; ++c) {
                    acc[r][2 * c] += p.x * v[0][c].x + p.y * v[1][c].x + p.z * v[2][c].x + p.w * v[3][c].x;
                    acc[r][2 * c + 1] += p.x * v[0][c].y + p.y * v[1][c].y + p.z * v[2][c].y + p.w * v[3][c].y;
                }
            }
        }
        // P is rewritten only after the next tile's first __syncthreads, which every lane reaches
        // after it is done reading P here.
    }

    // O = acc / l: the lanes' partial sums added first (key 0 is never masked, so l >= 1).
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        float total = l[r];
        #pragma unroll
        for (int off = 16; off > 0; off /= 2) total += __shfl_xor_sync(FULL, total, off);
        const int i = m0 + r0 + r;
        if (i >= S) continue;  // rows past S: computed on zeros, never stored
        const float inv = 1.0f / total;
        __half2* o = reinterpret_cast<__half2*>(O + head + (size_t)i * HEAD_DIM);
        #pragma unroll
        for (int c = 0; c < PAIRS; ++c)
            o[lane + 32 * c] = __floats2half2_rn(acc[r][2 * c] * inv, acc[r][2 * c + 1] * inv);
    }
}
