// wgmma ceiling (HGMMA, Hopper sm_90a only): the most fp16 tensor-core math the warpgroup mma can do.
//
// What it measures: wgmma.mma_async m64n256k16 (fp16 A and B read from shared memory through matrix
// descriptors, fp32 accumulators in registers), the instruction rungs 7 and 8 use (wgmma_m64k16 at N = 256 and
// descriptor() from tensor_core.cuh, the same 128-byte-swizzled tiles). Two warpgroups per block, each
// with its own 64 x 256 accumulator (128 registers a thread); per step a warpgroup issues K_STEPS wgmmas
// as one commit group and waits only for the group before it (wait_group 1), so two groups are in flight
// and the tensor cores never wait for an issue. The tiles are written to shared memory once, before the
// loop: no global memory traffic, no copies, no barriers inside it. No kernel built on wgmma can do more
// math per second than this (cuBLAS included: it adds TMA copies and an epilogue), so it is their roof.
//
// FLOPs = blocks * WARPGROUPS * iters * K_STEPS * 2*64*256*16. Every element of A and B is `value`
// (from the host, so nothing folds); every accumulator starts at 0 and ends at iters * K_STEPS * 16 *
// value^2, exact for a power of two; each thread writes the sum of its 128 accumulators once, after the
// loop (keeping the work alive): the GPU test checks it.
#include "../matmul/tensor_core.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "wgmma_peak.cu uses wgmma: compile it for sm_90a"
#endif
#define WARPGROUPS 2
#define THREADS (128 * WARPGROUPS)
#define BN 256      // one m64n256k16 per warpgroup and k16 step
#define BK 64       // one 128-byte swizzled row of A; K_STEPS wgmmas walk it
#define K_STEPS (BK / 16)

extern "C" __global__ void __launch_bounds__(THREADS) wgmma_peak(float* out, int iters, float value) {
    // A: 64 rows x 64 halves (K-major), shared by both warpgroups; B: 64 (k) x 256 (n), N-major, as
    // BN/64 column blocks of 64 rows x 128 bytes: rung 7's layout, on 1024-byte swizzle atoms.
    __shared__ __align__(1024) half As[64 * BK];
    __shared__ __align__(1024) half Bs[BK * BN];
    const half h = __float2half(value);
    for (int i = threadIdx.x; i < 64 * BK; i += THREADS) As[i] = h;
    for (int i = threadIdx.x; i < BK * BN; i += THREADS) Bs[i] = h;
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic stores -> visible to wgmma
    __syncthreads();

    float acc[1][BN / 8][4] = {};
#pragma unroll 1
    for (int i = 0; i < iters; ++i) {
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < K_STEPS; ++k)  // k16 step: 32 bytes along A's rows, 16 rows down B
            wgmma_m64k16(acc, descriptor(As + k * 16, 16), descriptor(Bs + k * 16 * 64, BK * 128));
        wgmma_commit();
        wgmma_wait<1>();  // the group before this one is done; this one stays in flight
    }
    wgmma_wait<0>();
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) sum += (acc[0][j][0] + acc[0][j][1]) + (acc[0][j][2] + acc[0][j][3]);
    out[blockIdx.x * THREADS + threadIdx.x] = sum;  // keeps the work alive
}
