// mma.sync ceiling (HMMA): the most fp16 tensor-core math a warp-level mma can do on this GPU.
//
// What it measures: mma.sync.m16n8k16 (fp16 A and B, fp32 accumulate) from registers into registers,
// CHAINS independent accumulators per warp (so each HMMA's latency hides behind the others) and
// WARPS_PER_BLOCK warps per block, several blocks per SM: every tensor core kept issuing, nothing else in
// the loop (no loads, no stores, no shared memory). This is the instruction rungs 4-6 use (mma_16816 from
// tensor_core.cuh): no kernel built on mma.sync can do more math per second than this, so it is their roof.
// On Hopper it sits well below wgmma's (the warpgroup instruction feeds the tensor cores at their full rate,
// mma.sync does not); on sm_75 mma_16816 is two m16n8k8 HMMAs (the same FLOPs): the roof measured there.
//
// FLOPs = warps * iters * CHAINS * 2*16*8*16. A and B come from the host (a_bits, b_bits: two halves each),
// so the compiler cannot fold the math; every accumulator starts at 0, so with constant A and B each ends
// at iters * 16 * a * b exactly when a*b is a power of two, and the sum one thread writes, once, after the
// loop (keeping the work alive), is CHAINS * 4 times that: the GPU test checks it.
#include "../matmul/tensor_core.cuh"

#define CHAINS 8  // independent accumulators (m16n8 fp32 fragments, 4 registers each) per warp

extern "C" __global__ void mma_sync_peak(float* out, int iters, unsigned a_bits, unsigned b_bits,
                                         unsigned lane_mask) {
    // Each lane's fragments are a_bits / b_bits XORed with (lane & lane_mask): the host passes lane_mask = 0
    // (every lane the same halves, the exact sum above), but the compiler cannot know it, so the fragments
    // are per-lane values held in registers for the whole loop, not re-read from the parameters inside it.
    const unsigned lane_bits = threadIdx.x % 32 & lane_mask;
    unsigned a[4], b[2];
#pragma unroll
    for (int k = 0; k < 4; ++k) a[k] = a_bits ^ lane_bits << k;  // six distinct registers
#pragma unroll
    for (int k = 0; k < 2; ++k) b[k] = b_bits ^ lane_bits << (4 + k);
    float acc[CHAINS][4] = {};
#pragma unroll 1
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) mma_16816(acc[c], a, b);
    }
    float sum = 0.f;
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) sum += (acc[c][0] + acc[c][1]) + (acc[c][2] + acc[c][3]);
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;  // keeps the work alive
}
