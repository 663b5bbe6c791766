// The TMA and mbarriers, shared by matmul rungs 8 and up and attention rung 7 (sm_90a): the tensor map the host
// encodes, the 64-bit barriers in shared memory that producer and consumers meet on, and the TMA's box copies
// (2-D, and 3-D for a stack of matrices).
#pragma once
#include "tensor_core.cuh"

// A tensor map: 128 bytes the driver encodes (cuTensorMapEncodeTiled, ladder/runtime/tma.py), passed by value.
struct alignas(128) TensorMap {
    unsigned long long opaque[16];
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// ---------------------------------------------------------------- mbarriers (64-bit, in shared memory)
// A phase completes when `count` threads have arrived and every byte a thread said to expect has landed;
// waiting names the phase by its parity (round & 1). A fresh barrier is in phase 0, so waiting for
// parity 1 (the phase "before" it) returns at once: the producer's first round waits for nothing.
__device__ __forceinline__ void mbarrier_init(unsigned long long* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(smem_address(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbarrier_arrive_expect_bytes(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                 :: "r"(smem_address(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(smem_address(bar)) : "memory");
}

__device__ __forceinline__ void mbarrier_wait(unsigned long long* bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(smem_address(bar)), "r"(parity) : "memory");
}

// ---------------------------------------------------------------- the TMA
// One box of the map's matrix, its corner at column x, row y, into shared memory at dst (1024-byte
// aligned); the bytes complete a transaction on bar. Outside the matrix the box is filled with zeros.
__device__ __forceinline__ void tma_load(half* dst, const TensorMap& map, int x, int y, unsigned long long* bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(smem_address(dst)), "l"(&map), "r"(x), "r"(y), "r"(smem_address(bar)) : "memory");
}

// The same from a stack of matrices (a 3-D map, ladder/runtime/tma.py): the box of matrix z, zeros past that matrix's rows
// and columns (attention rung 7: a head's ragged tail reads zeros, not the next head).
__device__ __forceinline__ void tma_load(half* dst, const TensorMap& map, int x, int y, int z, unsigned long long* bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
                 :: "r"(smem_address(dst)), "l"(&map), "r"(x), "r"(y), "r"(z), "r"(smem_address(bar)) : "memory");
}

// And from a 4-D map (ladder/runtime/tma.py's encode_heads: a (B, H, S, D) view's heads and rows in the order of their
// strides, ladder.ops' attention).
__device__ __forceinline__ void tma_load(half* dst, const TensorMap& map, int x, int y, int z, int w,
                                         unsigned long long* bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
                 :: "r"(smem_address(dst)), "l"(&map), "r"(x), "r"(y), "r"(z), "r"(w), "r"(smem_address(bar))
                 : "memory");
}

// ---------------------------------------------------------------- the ring
// Its barriers, set up by thread 0: full[s] completes on the producer's arrive plus the TMA's bytes, empty[s]
// on `releases` consumer arrives. The fence makes them visible to the TMA unit (and to a cluster partner).
__device__ __forceinline__ void ring_init(unsigned long long* full, unsigned long long* empty, int stages,
                                          unsigned releases) {
    if (threadIdx.x == 0) {
        for (int s = 0; s < stages; ++s) {
            mbarrier_init(&full[s], 1);
            mbarrier_init(&empty[s], releases);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
}

// The producer's first step: its tensor maps into the TMA unit's cache before the first copy needs them.
__device__ __forceinline__ void prefetch_tensormap(const TensorMap& map) {
    asm volatile("prefetch.tensormap [%0];\n" :: "l"(&map) : "memory");
}

__device__ __forceinline__ void prefetch_tensormaps(const TensorMap& a, const TensorMap& b) {
    prefetch_tensormap(a);
    prefetch_tensormap(b);
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
