// Tensor-core building blocks shared by matmul rungs 4-12 and the attention rungs from 4 on (sm_75 and newer).
//
// * 16-byte tile copies, global -> shared, through registers (sync) or cp.async (sm_80+);
// * ldmatrix: a warp loads 8x8 fp16 matrices from shared memory straight into mma fragments;
// * mma.sync m16n8k16: D(16x8, fp32) += A(16x16, fp16) * B(16x8, fp16), one warp, tensor cores;
// * the epilogue: fp32 accumulators -> fp16 C, bounds-checked;
// * Hopper (sm_90a, rungs 7-12; attention rung 7): wgmma m64nNk16 (N = 64-256) on 128-byte-swizzled tiles, their
//   descriptors; A from shared memory or from registers.
// Shared tiles are row-major with rows padded by 8 halves (16 bytes): the 8 rows one ldmatrix
// reads then start in 8 different groups of 4 banks, so it runs without bank conflicts.
#pragma once
#include <cuda_fp16.h>

constexpr int PAD = 8;  // halves added to each shared-memory row

__device__ __forceinline__ unsigned smem_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// ---------------------------------------------------------------- tile copies (16-byte pieces)
// A ROWS x COLS fp16 tile is ROWS*COLS/8 pieces of 16 bytes, dealt round-robin to NTHREADS threads.
// Piece i of thread t covers row p / (COLS/8), columns 8*(p % (COLS/8)) .. +7, with p = t + i*NTHREADS.
// A piece outside the matrix (rows_left / cols_left) is zero. Rows of the matrix must start on
// 16 bytes and cols_left be a multiple of 8 (the launcher pads), so a piece is wholly in or out.
template <int ROWS, int COLS, int NTHREADS>
struct TileCopy {
    static constexpr int PIECES = ROWS * COLS / 8;
    static constexpr int PER_THREAD = PIECES / NTHREADS;
    static_assert(PIECES % NTHREADS == 0, "tile pieces must split evenly over the threads");

    __device__ static int row(int i) { return (threadIdx.x + i * NTHREADS) / (COLS / 8); }
    __device__ static int col(int i) { return (threadIdx.x + i * NTHREADS) % (COLS / 8) * 8; }

    __device__ static void to_registers(uint4 (&regs)[PER_THREAD], const half* g, int ldg, int rows_left, int cols_left) {
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            const bool inside = row(i) < rows_left && col(i) < cols_left;
            regs[i] = inside ? *reinterpret_cast<const uint4*>(g + (size_t)row(i) * ldg + col(i)) : make_uint4(0, 0, 0, 0);
        }
    }

    __device__ static void to_shared(half* s, int lds, const uint4 (&regs)[PER_THREAD]) {
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) *reinterpret_cast<uint4*>(s + row(i) * lds + col(i)) = regs[i];
    }

#if __CUDA_ARCH__ >= 800
    // cp.async: global -> shared without passing through registers; src-size 0 writes zeros.
    __device__ static void async_to_shared(half* s, int lds, const half* g, int ldg, int rows_left, int cols_left) {
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            const bool inside = row(i) < rows_left && col(i) < cols_left;
            const half* src = inside ? g + (size_t)row(i) * ldg + col(i) : g;
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                         :: "r"(smem_address(s + row(i) * lds + col(i))), "l"(src), "r"(inside ? 16 : 0));
        }
    }
#endif
};

#if __CUDA_ARCH__ >= 800
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int PENDING>  // wait until at most PENDING committed groups are still in flight
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(PENDING)); }
#endif

// ---------------------------------------------------------------- fragments and the mma
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const half* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_address(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const half* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_address(p)));
}

// c (16x8 fp32) += a (16x16 fp16, row-major fragment) * b (16x8 fp16, column fragment)
__device__ __forceinline__ void mma_16816(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else  // sm_75 has only k8: two of them, k 0-7 (a0, a1, b0) then k 8-15 (a2, a3, b1)
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(b[0]));
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[2]), "r"(a[3]), "r"(b[1]));
#endif
}

// One warp multiplies its WM x TILE_K slice of the A tile by the TILE_K x WN slice of the B tile into
// WM/16 x WN/8 accumulator fragments. As points at the warp's first row (stride LDA), Bs at its
// first column (stride LDB).
template <int WM, int WN, int TILE_K, int LDA, int LDB>
__device__ __forceinline__ void warp_tile_mma(float (&acc)[WM / 16][WN / 8][4], const half* As, const half* Bs) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int kk = 0; kk < TILE_K; kk += 16) {
        unsigned a[WM / 16][4], b[WN / 8][2];
        // lanes 0-15 give the rows of the left 8 columns, lanes 16-31 those of the right 8
#pragma unroll
        for (int mi = 0; mi < WM / 16; ++mi) ldmatrix_x4(a[mi], As + (mi * 16 + lane % 16) * LDA + kk + lane / 16 * 8);
#pragma unroll
        for (int nj = 0; nj < WN / 16; ++nj) {  // B is k-major in shared memory: .trans gives column fragments
            unsigned r[4];
            ldmatrix_x4_trans(r, Bs + (kk + lane % 16) * LDB + nj * 16 + lane / 16 * 8);
            b[2 * nj][0] = r[0], b[2 * nj][1] = r[1], b[2 * nj + 1][0] = r[2], b[2 * nj + 1][1] = r[3];
        }
#pragma unroll
        for (int mi = 0; mi < WM / 16; ++mi)
#pragma unroll
            for (int ni = 0; ni < WN / 8; ++ni) mma_16816(acc[mi][ni], a[mi], b[ni]);
    }
}

// Accumulators -> C (M x N, row stride N, or row_stride elements where one is given: an even number). Fragment
// element (i, j) of lane l: row l/4 (+8 for c[2], c[3]), columns 2*(l%4) and +1. (row0, col0): the warp's corner in C.
template <int WM, int WN>
__device__ __forceinline__ void store_accumulators(const float (&acc)[WM / 16][WN / 8][4], half* C, int M, int N,
                                                   int row0, int col0, int row_stride = -1) {
    const int lane = threadIdx.x % 32;
    const bool pairs = N % 2 == 0;  // then two neighbours are one aligned 4-byte store
#pragma unroll
    for (int mi = 0; mi < WM / 16; ++mi)
#pragma unroll
        for (int ni = 0; ni < WN / 8; ++ni)
#pragma unroll
            for (int half_ = 0; half_ < 2; ++half_) {
                const int row = row0 + mi * 16 + lane / 4 + half_ * 8, col = col0 + ni * 8 + lane % 4 * 2;
                if (row >= M || col >= N) continue;
                const float x = acc[mi][ni][2 * half_], y = acc[mi][ni][2 * half_ + 1];
                half* dst = C + (size_t)row * (row_stride < 0 ? N : row_stride) + col;
                if (pairs) {
                    *reinterpret_cast<half2*>(dst) = __floats2half2_rn(x, y);
                } else {
                    dst[0] = __float2half(x);
                    if (col + 1 < N) dst[1] = __float2half(y);
                }
            }
}

// ---------------------------------------------------------------- wgmma (sm_90a: rungs 7-10)
// The Hopper rungs keep their tiles in the 128-byte swizzle: rows of 64 halves (128 bytes), the
// 16-byte chunk c of row r at chunk position c ^ (r % 8), in atoms of 8 rows (1024 bytes) that start
// on 1024-byte boundaries. A (BM x 64) is one column block of such rows; B (64 x BN) is BN/64 of them,
// side by side. Rung 7's cp.async copies write this layout; the TMA of rungs 8-10 writes it (128-byte swizzle).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ unsigned swizzle_atom_offset(const half* p) {  // halves from p to the next 1024-byte boundary
    return (1024 - smem_address(p) % 1024) % 1024 / 2;
}

// Shared-memory matrix descriptor (128-byte swizzle): start address, the distance between column
// blocks of 64 (leading), the distance between 8-row groups (stride, 1024 bytes).
__device__ __forceinline__ unsigned long long descriptor(const half* p, unsigned leading) {
    return (unsigned long long)((smem_address(p) & 0x3FFFF) >> 4) | (unsigned long long)(leading >> 4) << 16 |
           (unsigned long long)(1024 >> 4) << 32 | 1ull << 62;
}

// The accumulator operands of one wgmma: d[ni][0..3] for the n8 column groups ni of a warpgroup's 64 x N tile.
#define WGMMA_ACC(i) "+f"(d[0][i][0]), "+f"(d[0][i][1]), "+f"(d[0][i][2]), "+f"(d[0][i][3])
#define WGMMA_ACC8(i) WGMMA_ACC(i), WGMMA_ACC(i + 1), WGMMA_ACC(i + 2), WGMMA_ACC(i + 3), \
                      WGMMA_ACC(i + 4), WGMMA_ACC(i + 5), WGMMA_ACC(i + 6), WGMMA_ACC(i + 7)
#define WGMMA_REGS_32 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define WGMMA_REGS_64 WGMMA_REGS_32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, " \
    "%41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, " \
    "%62, %63"
#define WGMMA_REGS_96 WGMMA_REGS_64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, " \
    "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define WGMMA_REGS_128 WGMMA_REGS_96 ", %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, " \
    "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, " \
    "%126, %127"
// One wgmma.m64nNk16: N/2 accumulator registers %0.., then the two descriptors (%DA, %DB), the accumulate flag and
// B's layout (%TB: 1 N-major, 0 K-major; A is K-major).
#define WGMMA_ASM(N, REGS, DA, DB, FLAG, TB, ...)                                               \
    asm volatile("{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %" #FLAG ", 0;\n"        \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.f16.f16 {" REGS "}, "          \
                 "%" #DA ", %" #DB ", accumulate, 1, 1, 0, %" #TB ";\n}\n"                       \
                 : __VA_ARGS__ : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(B_N_MAJOR))
// The same with A in registers (A: the four operands "%i, ..", a warp's 16 rows in mma.sync's A-fragment layout),
// B N-major.
#define WGMMA_RS_ASM(N, REGS, A, DB, FLAG, ...)                                                 \
    asm volatile("{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %" #FLAG ", 0;\n"        \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.f16.f16 {" REGS "}, "          \
                 "{" A "}, %" #DB ", accumulate, 1, 1, 1;\n}\n"                                  \
                 : __VA_ARGS__ : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1))

// d (64 x N fp32, the warpgroup's accumulators; a warp's 16 rows in mma.sync's C-fragment layout, which
// store_accumulators<16, N> writes) += A (64 x 16, K-major) * B (16 x N, N-major, or K-major when !B_N_MAJOR),
// read from shared memory; with accumulate 0, d = A * B (d's old values ignored). N is 64, 128, 192 or 256 (matmul
// rungs 7-11: 256; rung 12 searches 128-256; attention rung 7: the key tile, Kᵀ K-major).
template <int GROUPS, bool B_N_MAJOR = true>  // GROUPS = N / 8
__device__ __forceinline__ void wgmma_m64k16(float (&d)[1][GROUPS][4], unsigned long long desc_a,
                                             unsigned long long desc_b, int accumulate = 1) {
    static_assert(GROUPS == 8 || GROUPS == 16 || GROUPS == 24 || GROUPS == 32,
                  "wgmma tiles here are 64, 128, 192 or 256 columns wide");
    if constexpr (GROUPS == 8) WGMMA_ASM(64, WGMMA_REGS_32, 32, 33, 34, 35, WGMMA_ACC8(0));
    if constexpr (GROUPS == 16) WGMMA_ASM(128, WGMMA_REGS_64, 64, 65, 66, 67, WGMMA_ACC8(0), WGMMA_ACC8(8));
    if constexpr (GROUPS == 24)
        WGMMA_ASM(192, WGMMA_REGS_96, 96, 97, 98, 99, WGMMA_ACC8(0), WGMMA_ACC8(8), WGMMA_ACC8(16));
    if constexpr (GROUPS == 32)
        WGMMA_ASM(256, WGMMA_REGS_128, 128, 129, 130, 131, WGMMA_ACC8(0), WGMMA_ACC8(8), WGMMA_ACC8(16),
                  WGMMA_ACC8(24));
}

// d += A (64 x 16 from registers: a warp's a[0..3] as mma.sync's m16k16 A fragment) * B (16 x N, N-major, shared
// memory): attention rung 7's P·V, P straight from the softmax's registers. N is 64 or 128.
template <int GROUPS>
__device__ __forceinline__ void wgmma_m64k16(float (&d)[1][GROUPS][4], const unsigned (&a)[4],
                                             unsigned long long desc_b) {
    static_assert(GROUPS == 8 || GROUPS == 16, "wgmma tiles with A in registers here are 64 or 128 columns wide");
    if constexpr (GROUPS == 8) WGMMA_RS_ASM(64, WGMMA_REGS_32, "%32, %33, %34, %35", 36, 37, WGMMA_ACC8(0));
    if constexpr (GROUPS == 16)
        WGMMA_RS_ASM(128, WGMMA_REGS_64, "%64, %65, %66, %67", 68, 69, WGMMA_ACC8(0), WGMMA_ACC8(8));
}

// wgmma runs asynchronously: fence before the first wgmma that reads accumulators other instructions wrote,
// commit the wgmmas issued so far as one group, wait until at most PENDING groups are still in flight.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int PENDING>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(PENDING) : "memory"); }

// The k16 steps of one k-tile of a warpgroup's 64 x N product (N = 8 GROUPS): BK_/16 steps over 128-byte-swizzled tiles (a: the
// warpgroup's 64 rows of BK_ halves; b: BK_ rows of B in column blocks of 64), neither fenced nor committed.
template <int BK_, int GROUPS>
__device__ __forceinline__ void wgmma_k_steps(float (&acc)[1][GROUPS][4], const half* a, const half* b) {
#pragma unroll
    for (int k = 0; k < BK_ / 16; ++k)  // k16 step: 32 bytes along A's rows, 16 rows down B
        wgmma_m64k16(acc, descriptor(a + k * 16, 16), descriptor(b + k * 16 * 64, BK_ * 128));
}

// One k-tile of a warpgroup's 64 x N product, committed as one group.
template <int BK_, int GROUPS>
__device__ __forceinline__ void wgmma_k_tile(float (&acc)[1][GROUPS][4], const half* a, const half* b) {
    wgmma_fence();
    wgmma_k_steps<BK_>(acc, a, b);
    wgmma_commit();
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
