// Matmul rung 12 (Hopper only, sm_90a) - autotuned: rung 11's kernel with its tile shape, ring depth, cluster
// size and tile order chosen by a search, per GPU and shape.
//
// Idea:       rung 11 fixes one configuration: blocks of 128 x 256 of C (two consumer warpgroups, one m64n256
//             wgmma each), 3 stages, clusters of 2, GROUP_M 8. That suits 4096^3 and 8192^3 on an H100; it fills
//             the 132 SMs badly where C has few such tiles (2048^2 holds 64 cluster blocks: 128 busy SMs, each
//             with one tile and no second to overlap its epilogue with) and leaves no choice to a GPU with other
//             limits. Here the launcher compiles one variant per configuration (-D), prunes what cannot fit
//             (shared memory, accumulator registers), times the rest and caches the winner per GPU
//             (ladder/autotune.py, kernels/matmul.py), as rung 6 does for rung 5. The space holds what Triton's
//             power-of-two blocks cannot: BN 192 (wgmma m64n192k16), and BM 256 with two m64 blocks per consumer.
//             One more choice frees room for the ring: BOX_BY_BOX stages C one 64 x 64 box per consumer at a
//             time (store, wait until the TMA has read it, next box), 16 KB of staging where rung 11's whole
//             tile takes up to 64, so 128 x 192 holds 5 stages, not 4 (cuBLAS's kernel at the model's MLP
//             down-projection has 5).
//             BM in {128, 256}, BN in {128, 192, 256}, STAGES 2-6, CLUSTER in {1, 2}, GROUP_M in {8, 16},
//             BOX_BY_BOX in {0, 1}.
// Prediction: 0.98-1.05x rung 11 at 4096^3 and 8192^3 (its configuration is in the space, so the search can
//             only match or beat it, up to the timing's spread of ~2%); 95-105% of cuBLAS there.
// Signature:  as rung 11; HGMMA.64xBNx16 with the chosen BN; BOX_BY_BOX: a wait on the TMA's read and 2 BAR.SYNC
//             per box, not per tile. The choice shows in the search report.
#include "11_tma_store.cu"
