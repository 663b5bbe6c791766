// Vector add, rung 1 — scalar: C[i] = A[i] + B[i] on fp16, one 2-byte element per load.
//
// Idea:       the simplest kernel that can reach the memory roof. Consecutive threads touch
//             consecutive elements (a warp's load is one coalesced 64-byte request), and each
//             thread issues all ELEMS_PER_THREAD loads of A and B before its first add, so
//             several requests are in flight per thread.
// Prediction: 1 FLOP per 6 bytes moved: far left of every ridge point, so memory-bound; the time
//             should approach bytes / copy bandwidth (6 GB at 1e9 elements: ~2 ms on an H100):
//             90-105% of the measured copy bandwidth (kernels/predictions/vector_add.toml).
// Signature:  global loads are 16-bit (LDG.E.U16): one instruction per element per input.
#include <cuda_fp16.h>

#ifndef ELEMS_PER_THREAD
#define ELEMS_PER_THREAD 4
#endif

extern "C" __global__ void vector_add(const __half* __restrict__ a, const __half* __restrict__ b,
                                      __half* __restrict__ c, long long n) {
    const long long first = (long long)blockIdx.x * blockDim.x * ELEMS_PER_THREAD + threadIdx.x;
    __half x[ELEMS_PER_THREAD], y[ELEMS_PER_THREAD];
#pragma unroll
    for (int k = 0; k < ELEMS_PER_THREAD; ++k) {
        const long long i = first + (long long)k * blockDim.x;  // a warp reads 32 neighbours
        if (i < n) { x[k] = a[i]; y[k] = b[i]; }
    }
#pragma unroll
    for (int k = 0; k < ELEMS_PER_THREAD; ++k) {
        const long long i = first + (long long)k * blockDim.x;
        if (i < n) c[i] = __hadd(x[k], y[k]);
    }
}
