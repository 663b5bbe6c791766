// Attention rung 5 - software-pipelined: cp.async keeps STAGES K and V tiles in flight.
//
// Idea:       rung 4 waited for every K and V tile. Here the copies of tiles t+1 .. t+STAGES-1 run
//             (cp.async, sm_80+: global -> shared with no register round trip) while the warps compute
//             tile t, as in matmul rung 5; one barrier per tile instead of two.
//             sm_75 has no cp.async: there the kernel loads as rung 4 does, and the launcher says so.
// Prediction: the loads of rung 4 hide behind the tensor cores: 1.2-1.5x rung 4
//             (kernels/predictions/attention_cuda.toml), toward SDPA's FlashAttention
//             backend (which pipelines the same way); the softmax's exponentials stay in the way.
// Signature:  as rung 4, with LDGSTS (cp.async) and LDGDEPBAR/DEPBAR instead of LDG + STS on sm_80/sm_90.
// HEAD_DIM, BLOCK_M, BLOCK_N, WARPS and STAGES are defines. Dynamic shared memory: the Q tile and KV_BUFFERS
// K and V tiles (STAGES of each with cp.async, one without), rows of HEAD_DIM + 8 halves.
#include "flash_mma.cuh"

#ifndef STAGES
#define STAGES 2
#endif

#if __CUDA_ARCH__ >= 800
constexpr int KV_BUFFERS = STAGES;  // K and V tiles in shared memory: STAGES in flight with cp.async ...
#else
constexpr int KV_BUFFERS = 1;       // ... one of each with rung 4's synchronous loads (as the launcher allocates)
#endif

// Block m_block of the queries of head blockIdx.y.
__device__ __forceinline__ void attention_block(const half* Q, const half* K, const half* V, half* O, int S,
                                                float scale_log2, int causal, int m_block) {
    extern __shared__ __align__(16) half smem[];
    half *Qs = smem, *Ks = Qs + BLOCK_M * LD, *Vs = Ks + KV_BUFFERS * TILE;
    const size_t head = (size_t)blockIdx.y * S * HEAD_DIM;
    const KeyRange keys(m_block, S, causal);
    const int warp_row = threadIdx.x / 32 * WM;
    FlashWarp warp;
    warp.init();
#if __CUDA_ARCH__ >= 800
    auto fetch = [&](int t) {  // start copying key tile t into buffer t % STAGES
        const int n0 = t * BLOCK_N, b = t % STAGES;
        CopyKV::async_to_shared(Ks + b * TILE, LD, K + head + (size_t)n0 * HEAD_DIM, HEAD_DIM, S - n0, HEAD_DIM);
        CopyKV::async_to_shared(Vs + b * TILE, LD, V + head + (size_t)n0 * HEAD_DIM, HEAD_DIM, S - n0, HEAD_DIM);
    };
    const int tiles = keys.tiles();
    CopyQ::async_to_shared(Qs, LD, Q + head + (size_t)keys.m0 * HEAD_DIM, HEAD_DIM, S - keys.m0, HEAD_DIM);
    for (int t = 0; t < STAGES - 1; ++t) {  // prologue: Q (with tile 0) and STAGES-1 tiles in flight
        if (t < tiles) fetch(t);
        cp_async_commit();  // one group per tile, empty or not, so the counting below holds
    }
    for (int t = 0; t < tiles; ++t) {
        cp_async_wait<STAGES - 2>();  // tile t has landed (this thread's copies) ...
        __syncthreads();              // ... everyone's; and everyone is done with tile t-1's buffer
        if (t + STAGES - 1 < tiles) fetch(t + STAGES - 1);  // reuses the buffer of tile t-1
        cp_async_commit();
        const int b = t % STAGES;
        warp.step(Qs + warp_row * LD, Ks + b * TILE, Vs + b * TILE, scale_log2, t * BLOCK_N, keys, keys.m0 + warp_row);
    }
#else
    attend_loading_synchronously(warp, Q + head, K + head, V + head, Qs, Ks, Vs, keys, scale_log2);
#endif
    warp.store(O + head, S, keys.m0 + warp_row);
}

extern "C" __global__ void __launch_bounds__(THREADS)
attention(const half* Q, const half* K, const half* V, half* O, int S, float scale_log2, int causal) {
    attention_block(Q, K, V, O, S, scale_log2, causal, blockIdx.x);
}
