// Vector add, rung 2 — vectorized: each thread moves 16 bytes (8 fp16 values) per load.
//
// Idea:       replace 2-byte loads with 16-byte ones (uint4): 8x fewer load instructions for the
//             same bytes, and each warp request covers 512 contiguous bytes. Needs 16-byte
//             aligned tensors (the launcher checks); the last n % 8 elements go the scalar way.
// Prediction: the bytes moved do not change, so if rung 1 already sat on the memory roof the
//             time barely moves: 0.95-1.1x rung 1 (kernels/predictions/vector_add.toml); a gain shows
//             only where rung 1 was instruction- or latency-bound (small GPUs, few threads in flight).
// Signature:  LDG.E.128 for the body; LDG.E.U16 only in the tail.
#include <cuda_fp16.h>

extern "C" __global__ void vector_add(const __half* __restrict__ a, const __half* __restrict__ b,
                                      __half* __restrict__ c, long long n) {
    const long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // index of an 8-wide vector
    const long long n_vectors = n / 8;
    if (v < n_vectors) {
        uint4 x = reinterpret_cast<const uint4*>(a)[v];
        const uint4 y = reinterpret_cast<const uint4*>(b)[v];
        __half2* xs = reinterpret_cast<__half2*>(&x);
        const __half2* ys = reinterpret_cast<const __half2*>(&y);
#pragma unroll
        for (int k = 0; k < 4; ++k) xs[k] = __hadd2(xs[k], ys[k]);
        reinterpret_cast<uint4*>(c)[v] = x;
    } else if (v == n_vectors) {  // ragged tail: fewer than 8 elements, one thread
        for (long long i = n_vectors * 8; i < n; ++i) c[i] = __hadd(a[i], b[i]);
    }
}
