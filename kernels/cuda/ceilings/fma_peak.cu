// fp32 CUDA-core ceiling: as many independent FMAs as the SMs can issue, no memory traffic.
// CHAINS independent accumulators per thread hide the FMA latency; `x` and `y` come from the
// host so the compiler cannot fold the loop. FLOPs = threads * iters * CHAINS * 2.
#define CHAINS 8

extern "C" __global__ void fma_peak(float* out, int iters, float x, float y) {
    float acc[CHAINS];
#pragma unroll
    for (int k = 0; k < CHAINS; ++k) acc[k] = threadIdx.x + k;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int k = 0; k < CHAINS; ++k) acc[k] = fmaf(acc[k], x, y);
    }
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < CHAINS; ++k) sum += acc[k];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;  // keeps the work alive
}
