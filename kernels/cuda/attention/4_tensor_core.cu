// Attention rung 4 - tensor cores: rung 3's online softmax, both products on mma.sync.
//
// Idea:       Q·Kᵀ and P·V are matmuls of fp16 tiles: mma.sync m16n8k16 does each 16x8x16 piece in one
//             warp instruction, fp32 sums. Each warp owns 16-row tiles of the block's queries; the scores
//             stay in the mma accumulators, the online softmax runs on them in registers, and they become
//             the A operand of P·V without leaving the registers (flash_mma.cuh). K and V tiles still go
//             global -> registers -> shared memory, and the warps wait for them.
// Prediction: rung 3 was bound by FFMA issue; the tensor cores do the same products at ~15x the rate
//             (~990 vs ~67 TFLOP/s dense on an H100), so several times faster; then the loads, the barriers
//             and the softmax's exponentials (MUFU) are exposed: still well below SDPA, 10-27% of the
//             tensor-core roof (kernels/predictions/attention_cuda.toml).
// Signature:  HMMA (mma.sync, also on sm_90: wgmma needs a whole warpgroup), LDSM (ldmatrix), MUFU.EX2,
//             SHFL (the quad reductions), 128-bit LDG then STS; no LDGSTS.
// HEAD_DIM (64 or 128), BLOCK_M, BLOCK_N and WARPS are defines (flash_mma.cuh). Dynamic shared memory:
// the Q tile and one K and one V tile, rows of HEAD_DIM + 8 halves.
#include "flash_mma.cuh"

extern "C" __global__ void __launch_bounds__(THREADS)
attention(const half* Q, const half* K, const half* V, half* O, int S, float scale_log2, int causal) {
    extern __shared__ __align__(16) half smem[];
    half *Qs = smem, *Ks = Qs + BLOCK_M * LD, *Vs = Ks + TILE;
    const size_t head = (size_t)blockIdx.y * S * HEAD_DIM;
    const KeyRange keys(blockIdx.x, S, causal);
    FlashWarp warp;
    warp.init();
    attend_loading_synchronously(warp, Q + head, K + head, V + head, Qs, Ks, Vs, keys, scale_log2);
    warp.store(O + head, S, keys.m0 + threadIdx.x / 32 * WM);
}
