// Attention rung 6 - autotuned: rung 5's kernel with its tiles chosen by a search, heaviest blocks first.
//
// Idea:       BLOCK_M, BLOCK_N, WARPS and STAGES trade registers (the S and O fragments), shared memory
//             (Q + STAGES K/V tiles) and blocks per SM; the best choice depends on HEAD_DIM, causal and
//             the GPU. The launcher compiles one variant per configuration (-D), prunes those that cannot
//             fit, checks and times the rest and caches the winner (ladder/autotune.py, kernels/attention.py).
//             One more knob, the order blocks run in: causal query blocks near the end of a head walk up
//             to S keys, those at the start one tile. Numbered from the last, a head's long blocks start
//             first and the short ones fill the tail of the grid instead of leaving SMs idle.
// Prediction: 1.1-1.3x rung 5, most where its fixed tile fits badly (D=128, causal); near SDPA's
//             FlashAttention backend, whose tiles were tuned the same way: 90-110% of it
//             (kernels/predictions/attention_cuda.toml).
// Signature:  as rung 5 (HMMA, LDSM, LDGSTS); the choice shows in the search report, not the SASS.
#include "5_pipelined.cu"

extern "C" __global__ void __launch_bounds__(THREADS)
attention_heavy_first(const half* Q, const half* K, const half* V, half* O, int S, float scale_log2, int causal) {
    attention_block(Q, K, V, O, S, scale_log2, causal, causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x);
}
