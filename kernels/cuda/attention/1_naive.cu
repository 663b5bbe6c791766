// Attention rung 1 - naive: three kernels, one thread per element, S = Q·Kᵀ (and then P) in DRAM.
//
// Idea:       the textbook definition, one pass per formula: scores S = Q·Kᵀ·scale to a fp32 (B,H,S,S)
//             buffer (causal: -inf above the diagonal), softmax in place with one thread per row, then
//             O = P·V with one thread per output element. fp16 in, fp32 sums, fp16 out.
// The catch:  as in matmul rung 1, threadIdx.x walks the queries i: the 32 threads of a warp read 32
//             rows of Q that are D halves apart (scores), and 32 rows of P that are S floats apart
//             (softmax, P·V): every 2- or 4-byte load touches its own 32-byte sector. On top of that,
//             the 4·B·H·S² bytes of S (then P) are written twice and read four times.
// Prediction: the slowest rung by far, limited by load requests, not FLOPs: 0.4-1.2% of the fp32 roof
//             (causal: the same time for half the FLOPs, 0.2-0.6%; kernels/predictions/attention_cuda.toml);
//             rung 2 keeps the three passes and only changes the mapping, and should be 5-15x faster.
// Signature:  three kernels; global loads (LDG), 16-bit in the score kernel; no shared memory (LDS/STS)
//             or barriers (BAR); MUFU.EX2 only in the softmax.
// Grids: x over blocks of queries, y over keys (scores) or output columns (P·V), z over B·H: no grid
// dimension has to hold B·H·S². Offsets are 64-bit: B·H·S² reaches 2^31 at (B, H, S) = (4, 32, 4096).
#include <cuda_fp16.h>

#define NEG_INF __int_as_float(0xff800000)  // -inf (NVRTC has no <math.h> INFINITY)

// S[bh][i][j] = scale · Σ_d Q[bh][i][d]·K[bh][j][d]; blocks (⌈S/T⌉, S, B·H) of T threads.
extern "C" __global__ void scores(const half* Q, const half* K, float* P, int S, int D, float scale, int causal) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;  // consecutive threads: consecutive queries
    const int j = blockIdx.y;
    const size_t bh = blockIdx.z;
    if (i >= S) return;
    const half* q = Q + (bh * S + i) * D;  // Q rows D apart across the warp: one sector per thread
    const half* k = K + (bh * S + j) * D;  // one K row shared by the warp: a broadcast
    float sum = 0.0f;
    for (int d = 0; d < D; ++d)
        sum += __half2float(q[d]) * __half2float(k[d]);
    P[(bh * S + i) * S + j] = (causal && j > i) ? NEG_INF : sum * scale;  // a later key: weight 0
}

// Softmax of each row of P in place, three scalar passes; blocks (⌈S/T⌉, B·H) of T threads.
extern "C" __global__ void softmax(float* P, int S) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;  // one thread per row
    const size_t bh = blockIdx.y;
    if (i >= S) return;
    float* row = P + (bh * S + i) * S;
    float top = NEG_INF;  // key 0 is never masked, so the max is finite and exp(-inf - top) is 0
    for (int j = 0; j < S; ++j) top = fmaxf(top, row[j]);
    float total = 0.0f;
    for (int j = 0; j < S; ++j) total += expf(row[j] - top);
    for (int j = 0; j < S; ++j) row[j] = expf(row[j] - top) / total;
}

// O[bh][i][d] = Σ_j P[bh][i][j]·V[bh][j][d]; blocks (⌈S/T⌉, D, B·H) of T threads.
extern "C" __global__ void pv(const float* P, const half* V, half* O, int S, int D) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;  // consecutive threads: consecutive queries
    const int d = blockIdx.y;
    const size_t bh = blockIdx.z;
    if (i >= S) return;
    const float* p = P + (bh * S + i) * S;  // P rows S floats apart across the warp
    const half* v = V + bh * S * D + d;     // one V column shared by the warp: a broadcast per key
    float sum = 0.0f;
    for (int j = 0; j < S; ++j)
        sum += p[j] * __half2float(v[(size_t)j * D]);
    O[(bh * S + i) * D + d] = __float2half(sum);
}
