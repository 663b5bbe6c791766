// Attention rung 2 - coalesced: the same three passes, with consecutive threads on consecutive addresses.
//
// Idea:       every warp-wide load reads one contiguous run of memory.
//             Scores: K is stored row by row, so threads along the keys j (matmul rung 2's fix) would
//             still read K rows D halves apart. Instead a warp takes one query i and 32 keys, and its
//             lanes walk along D: each K row is read as 32 half2 (128 contiguous bytes per load), each
//             lane multiplies its slice by the same slice of the q row (kept in registers), and a
//             butterfly of __shfl_xor_sync adds the 32 partial sums; lane jj keeps key jj's score, so
//             the store of 32 scores is one contiguous 128-byte write too.
//             Softmax: a warp per row, lanes along the row; each lane keeps a running max and a sum of
//             exp(x - max) rescaled when its max grows, then shuffles combine the 32 lanes (max, then sum).
//             P·V: threads along D; the threads of one output row share P[i][j] (a broadcast) and read
//             the row V[j][:] together (128 or 256 contiguous bytes).
// Prediction: the same FLOPs as rung 1 but a few sectors per request instead of 32: 5-15x faster
//             (a hit: >= 5x; kernels/predictions/attention_cuda.toml). The 4·B·H·S² bytes of S (then P) are still written twice and read three times
//             (~20·B·H·S² bytes): the score matrix, not the math, sets the time, and it grows as S².
// Signature:  SHFL (BFLY) in the score and softmax kernels; 32-bit global loads of half2 in the score
//             kernel; still no shared memory (LDS/STS) or barriers (BAR).
// HEAD_DIM (64 or 128) is a compile-time define: a lane holds HEAD_DIM/32 elements of the q row.
#include <cuda_fp16.h>

#define NEG_INF __int_as_float(0xff800000)  // -inf (NVRTC has no <math.h> INFINITY)

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#define FULL 0xffffffffu
#define PAIRS (HEAD_DIM / 64)  // half2 per lane per row
static_assert(HEAD_DIM % 64 == 0, "a warp reads a row as 32 lanes x PAIRS half2");

// A warp per (query i, 32 keys); blocks (⌈S/T⌉, S, B·H) of T threads (T a multiple of 32).
extern "C" __global__ void scores(const half* Q, const half* K, float* P, int S, float scale, int causal) {
    const int lane = threadIdx.x % 32;
    const int j0 = blockIdx.x * blockDim.x + threadIdx.x - lane;  // this warp's first key
    const int i = blockIdx.y;
    const size_t bh = blockIdx.z;
    if (j0 >= S) return;  // the whole warp: the shuffles below always see 32 lanes
    const __half2* q = reinterpret_cast<const __half2*>(Q + (bh * S + i) * HEAD_DIM);
    float2 qs[PAIRS];
    #pragma unroll
    for (int c = 0; c < PAIRS; ++c) qs[c] = __half22float2(q[lane + 32 * c]);  // lane's slice of row i
    float mine = 0.0f;  // the score of key j0 + lane
    for (int jj = 0; jj < 32 && j0 + jj < S; ++jj) {
        const __half2* k = reinterpret_cast<const __half2*>(K + (bh * S + j0 + jj) * HEAD_DIM);
        float part = 0.0f;
        #pragma unroll
        for (int c = 0; c < PAIRS; ++c) {
            const float2 kv = __half22float2(k[lane + 32 * c]);  // 32 lanes: 128 contiguous bytes
            part += qs[c].x * kv.x + qs[c].y * kv.y;
        }
        #pragma unroll
        for (int off = 16; off > 0; off /= 2)  // after 5 steps every lane holds the full dot product
            part += __shfl_xor_sync(FULL, part, off);
        if (lane == jj) mine = part;
    }
    const int j = j0 + lane;
    if (j < S) P[(bh * S + i) * S + j] = (causal && j > i) ? NEG_INF : mine * scale;
}

// A warp per row, in place; blocks (⌈S/(T/32)⌉, B·H) of T threads.
extern "C" __global__ void softmax(float* P, int S) {
    const int lane = threadIdx.x % 32;
    const int i = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const size_t bh = blockIdx.y;
    if (i >= S) return;  // the whole warp
    float* row = P + (bh * S + i) * S;
    // The max starts at -1e30, not -inf: masked scores are -inf, and -inf - (-inf) would be NaN.
    float top = -1e30f, total = 0.0f;
    for (int j = lane; j < S; j += 32) {  // pass 1: lanes read 32 neighbours at a time
        const float x = row[j], new_top = fmaxf(top, x);
        total = total * expf(top - new_top) + expf(x - new_top);
        top = new_top;
    }
    float row_top = top;
    #pragma unroll
    for (int off = 16; off > 0; off /= 2) row_top = fmaxf(row_top, __shfl_xor_sync(FULL, row_top, off));
    total *= expf(top - row_top);  // each lane's sum, relative to the row's max
    #pragma unroll
    for (int off = 16; off > 0; off /= 2) total += __shfl_xor_sync(FULL, total, off);
    const float inv = 1.0f / total;  // total >= 1: key 0 is never masked, the max term is exp(0)
    for (int j = lane; j < S; j += 32) row[j] = expf(row[j] - row_top) * inv;  // pass 2
}

// Threads along D: blockDim = (HEAD_DIM, R), R output rows per block; blocks (⌈S/R⌉, B·H).
extern "C" __global__ void pv(const float* P, const half* V, half* O, int S) {
    const int d = threadIdx.x;
    const int i = blockIdx.x * blockDim.y + threadIdx.y;
    const size_t bh = blockIdx.y;
    if (i >= S) return;
    const float* p = P + (bh * S + i) * S;  // the same address for the row's threads: one broadcast
    const half* v = V + bh * S * HEAD_DIM + d;
    float sum = 0.0f;
    for (int j = 0; j < S; ++j)
        sum += p[j] * __half2float(v[(size_t)j * HEAD_DIM]);  // a row of V: contiguous across threads
    O[(bh * S + i) * HEAD_DIM + d] = __float2half(sum);
}
