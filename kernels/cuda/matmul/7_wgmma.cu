// Matmul rung 7 (Hopper only, sm_90a) - warpgroup MMA: wgmma reads both tiles straight from shared memory.
//
// Idea:       on an H100, mma.sync (rungs 4-6) runs on a legacy path at a fraction of the tensor
//             cores' rate. wgmma, Hopper's own instruction, lets a warpgroup (4 warps, 128 threads)
//             multiply a 64 x 256 x 16 slice asynchronously, A and B read from shared memory through
//             64-bit descriptors: no ldmatrix, no A/B fragments in registers. The tiles must be in a
//             layout wgmma reads: here the 128-byte swizzle (copy_swizzled). Copies stay cp.async as
//             in rung 5; wgmma runs one tile behind its issue (wait_group 1).
// Prediction: well above rung 6 (our guess: about 2x), toward cuBLAS
//             (which adds TMA copies, warp specialization and thread-block clusters).
//             Measured on the way: the same kernel with unswizzled 8x8 core matrices and wait_group 0
//             ran at 179 TFLOP/s, slower than rung 6; the swizzle and the one-tile lag tripled it.
// Signature:  HGMMA in the sm_90a SASS (no HMMA); LDGSTS for the copies.
#include "tensor_core.cuh"

#ifndef STAGES
#define STAGES 4
#endif
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "7_wgmma.cu uses wgmma: compile it for sm_90a (the launcher does)"
#endif
#define BM 128   // two warpgroups of 64 rows
#define BN 256   // one m64n256k16 wgmma per warpgroup and k16 step
#define BK 64
#define THREADS 256
constexpr int A_STAGE = BM * BK, B_STAGE = BK * BN;  // halves per buffer, no padding
// The 128-byte swizzle: a tile is stored as rows of 64 halves (128 bytes); the 16-byte chunk c of
// row r sits at chunk position c ^ (r % 8), so the 8 rows of an 8 x 128-byte atom spread every
// column over all 32 banks. A (BM x 64) is one such column block; B (64 x BN) is BN/64 of them.
template <int ROWS, int COLS>
__device__ __forceinline__ void copy_swizzled(half* s, const half* g, int ldg, int rows_left, int cols_left) {
    constexpr int PIECES = ROWS * COLS / 8;
    static_assert(PIECES % THREADS == 0, "tile pieces must split evenly over the threads");
#pragma unroll
    for (int i = 0; i < PIECES / THREADS; ++i) {
        const int p = threadIdx.x + i * THREADS;
        const int row = p / (COLS / 8), c = p % (COLS / 8);  // consecutive threads: one row, coalesced
        const bool inside = row < rows_left && c * 8 < cols_left;
        const half* src = inside ? g + (size_t)row * ldg + c * 8 : g;
        half* dst = s + (c / 8 * ROWS + row) * 64 + ((c % 8) ^ (row % 8)) * 8;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                     :: "r"(smem_address(dst)), "l"(src), "r"(inside ? 16 : 0));
    }
}

// Shared-memory matrix descriptor (128-byte swizzle): start address, the distance between column
// blocks of 64 (leading), the distance between 8-row groups (stride, 1024 bytes).
__device__ __forceinline__ unsigned long long descriptor(const half* p, unsigned leading) {
    return (unsigned long long)((smem_address(p) & 0x3FFFF) >> 4) | (unsigned long long)(leading >> 4) << 16 |
           (unsigned long long)(1024 >> 4) << 32 | 1ull << 62;
}

__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[1][32][4], unsigned long long desc_a,
                                                  unsigned long long desc_b) {
    asm volatile(
        "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "%128, %129, accumulate, 1, 1, 0, 1;\n}\n"  // A K-major (0), B N-major (1)
        : "+f"(d[0][0][0]), "+f"(d[0][0][1]), "+f"(d[0][0][2]), "+f"(d[0][0][3]),
          "+f"(d[0][1][0]), "+f"(d[0][1][1]), "+f"(d[0][1][2]), "+f"(d[0][1][3]),
          "+f"(d[0][2][0]), "+f"(d[0][2][1]), "+f"(d[0][2][2]), "+f"(d[0][2][3]),
          "+f"(d[0][3][0]), "+f"(d[0][3][1]), "+f"(d[0][3][2]), "+f"(d[0][3][3]),
          "+f"(d[0][4][0]), "+f"(d[0][4][1]), "+f"(d[0][4][2]), "+f"(d[0][4][3]),
          "+f"(d[0][5][0]), "+f"(d[0][5][1]), "+f"(d[0][5][2]), "+f"(d[0][5][3]),
          "+f"(d[0][6][0]), "+f"(d[0][6][1]), "+f"(d[0][6][2]), "+f"(d[0][6][3]),
          "+f"(d[0][7][0]), "+f"(d[0][7][1]), "+f"(d[0][7][2]), "+f"(d[0][7][3]),
          "+f"(d[0][8][0]), "+f"(d[0][8][1]), "+f"(d[0][8][2]), "+f"(d[0][8][3]),
          "+f"(d[0][9][0]), "+f"(d[0][9][1]), "+f"(d[0][9][2]), "+f"(d[0][9][3]),
          "+f"(d[0][10][0]), "+f"(d[0][10][1]), "+f"(d[0][10][2]), "+f"(d[0][10][3]),
          "+f"(d[0][11][0]), "+f"(d[0][11][1]), "+f"(d[0][11][2]), "+f"(d[0][11][3]),
          "+f"(d[0][12][0]), "+f"(d[0][12][1]), "+f"(d[0][12][2]), "+f"(d[0][12][3]),
          "+f"(d[0][13][0]), "+f"(d[0][13][1]), "+f"(d[0][13][2]), "+f"(d[0][13][3]),
          "+f"(d[0][14][0]), "+f"(d[0][14][1]), "+f"(d[0][14][2]), "+f"(d[0][14][3]),
          "+f"(d[0][15][0]), "+f"(d[0][15][1]), "+f"(d[0][15][2]), "+f"(d[0][15][3]),
          "+f"(d[0][16][0]), "+f"(d[0][16][1]), "+f"(d[0][16][2]), "+f"(d[0][16][3]),
          "+f"(d[0][17][0]), "+f"(d[0][17][1]), "+f"(d[0][17][2]), "+f"(d[0][17][3]),
          "+f"(d[0][18][0]), "+f"(d[0][18][1]), "+f"(d[0][18][2]), "+f"(d[0][18][3]),
          "+f"(d[0][19][0]), "+f"(d[0][19][1]), "+f"(d[0][19][2]), "+f"(d[0][19][3]),
          "+f"(d[0][20][0]), "+f"(d[0][20][1]), "+f"(d[0][20][2]), "+f"(d[0][20][3]),
          "+f"(d[0][21][0]), "+f"(d[0][21][1]), "+f"(d[0][21][2]), "+f"(d[0][21][3]),
          "+f"(d[0][22][0]), "+f"(d[0][22][1]), "+f"(d[0][22][2]), "+f"(d[0][22][3]),
          "+f"(d[0][23][0]), "+f"(d[0][23][1]), "+f"(d[0][23][2]), "+f"(d[0][23][3]),
          "+f"(d[0][24][0]), "+f"(d[0][24][1]), "+f"(d[0][24][2]), "+f"(d[0][24][3]),
          "+f"(d[0][25][0]), "+f"(d[0][25][1]), "+f"(d[0][25][2]), "+f"(d[0][25][3]),
          "+f"(d[0][26][0]), "+f"(d[0][26][1]), "+f"(d[0][26][2]), "+f"(d[0][26][3]),
          "+f"(d[0][27][0]), "+f"(d[0][27][1]), "+f"(d[0][27][2]), "+f"(d[0][27][3]),
          "+f"(d[0][28][0]), "+f"(d[0][28][1]), "+f"(d[0][28][2]), "+f"(d[0][28][3]),
          "+f"(d[0][29][0]), "+f"(d[0][29][1]), "+f"(d[0][29][2]), "+f"(d[0][29][3]),
          "+f"(d[0][30][0]), "+f"(d[0][30][1]), "+f"(d[0][30][2]), "+f"(d[0][30][3]),
          "+f"(d[0][31][0]), "+f"(d[0][31][1]), "+f"(d[0][31][2]), "+f"(d[0][31][3])
        : "l"(desc_a), "l"(desc_b), "r"(1));
}

extern "C" __global__ void __launch_bounds__(THREADS)
matmul(const half* A, const half* B, half* C, int M, int N, int K, int ldb) {
    extern __shared__ __align__(128) half smem_raw[];
    half* As = smem_raw + (1024 - smem_address(smem_raw) % 1024) % 1024 / 2;  // swizzle atoms: 1024-aligned
    half* Bs = As + STAGES * A_STAGE;
    const int warpgroup = threadIdx.x / 128, warp_in_group = threadIdx.x / 32 % 4;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int tiles = (K + BK - 1) / BK;
    float acc[1][BN / 8][4] = {};
    auto fetch = [&](int t) {
        const int k0 = t * BK, s = t % STAGES;
        copy_swizzled<BM, BK>(As + s * A_STAGE, A + (size_t)m0 * K + k0, K, M - m0, K - k0);
        copy_swizzled<BK, BN>(Bs + s * B_STAGE, B + (size_t)k0 * ldb + n0, ldb, K - k0, ldb - n0);
    };
    // wgmma runs one tile behind its issue (wait_group 1), so a buffer is free only two tiles later:
    // copies run STAGES-2 tiles ahead.
    for (int t = 0; t < STAGES - 2; ++t) {
        if (t < tiles) fetch(t);
        cp_async_commit();
    }
    for (int t = 0; t < tiles; ++t) {
        cp_async_wait<STAGES - 3>();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // cp.async data -> visible to wgmma
        __syncthreads();  // tile t landed for all; tile t-2's wgmma finished in every warpgroup
        if (t + STAGES - 2 < tiles) fetch(t + STAGES - 2);
        cp_async_commit();
        const half* a = As + (t % STAGES) * A_STAGE + warpgroup * 64 * 64;  // this group's 64 rows
        const half* b = Bs + (t % STAGES) * B_STAGE;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int k = 0; k < BK / 16; ++k)  // k16 step: 32 bytes along A's rows, 16 rows down B
            wgmma_m64n256k16(acc, descriptor(a + k * 16, 16), descriptor(b + k * 16 * 64, BK * 128));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");  // tile t-1 done
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    store_accumulators<16, BN>(acc, C, M, N, m0 + warpgroup * 64 + warp_in_group * 16, n0);
}
