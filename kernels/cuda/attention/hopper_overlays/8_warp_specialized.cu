// Attention rung 8 (Hopper only, sm_90a) - warp specialization: rung 7's producer becomes a warpgroup that hands
// its registers to two consumer warpgroups, and the two share every K and V tile.
//
// Idea:       a rung 7 block is 64 queries: one consumer warpgroup and a producer warp, two or three blocks an SM,
//             each bringing its own copy of every K and V tile. Here a block is 128 queries: two consumer
//             warpgroups of 64 read one ring, so a tile the TMA brings serves twice the queries. The producer is
//             a whole warpgroup because setmaxnreg moves registers a warpgroup at a time: it drops to 24 a thread
//             (it holds a loop counter and addresses), the consumers rise to 240, room for 128-key tiles at
//             D = 128 (64 scores, 64 accumulators and 32 registers of P a thread) with no spill. One block an SM;
//             the two consumer warpgroups overlap each other's softmax and wgmma in whatever order the warp
//             schedulers pick (rung 9 orders them).
// Prediction: 1.05-1.2x rung 7 (FlashAttention-3's ablation credits warp specialization with about 13%), still
//             short of cuDNN's kernel, which also orders its consumers and overlaps within each.
// Variants measured on the way: kernels/NOTES.md, CUDA attention rung 8.
// Signature:  as rung 7, plus USETMAXREG (setmaxnreg: the producer's decrease, the consumers' increase); HGMMA
//             on 128-key tiles at D = 128; no LDL/STL.
#ifndef CONSUMERS  // rung 12: three at D = 64
#define CONSUMERS 2
#define CONSUMER_REGISTERS 240   // 256 x 240 + 128 x 24 = 64,512 of the SM's 65,536
#endif
#define PRODUCER_THREADS 128
#define MIN_BLOCKS 1         // one block an SM: a register cap, which setmaxnreg needs
#define PRODUCER_REGISTERS 24
#include "7_wgmma_tma.cu"
