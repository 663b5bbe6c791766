// Attention rung 12 (Hopper only, sm_90a) - a third consumer warpgroup at D = 64: rung 11 with blocks of 192 queries.
//
// Idea:       at D = 64 rung 11's consumer warps wait on their own instructions: its profile (lesson 04f) shows
//             the `wait` stall (a fixed-latency dependency) on top, not issue slots or the MUFU pipe, and a tile's
//             products are half of D = 128's, so the softmax is a larger share of each turn. More warps hide
//             latency: here a block at D = 64 is three consumer warpgroups (192 queries, 12 consumer warps an SM
//             against 8) taking turns round robin (warpgroup g's turn is granted by warpgroup g - 1), sharing one
//             K/V ring, each with rung 11's loop. setmaxnreg splits the registers 24 / 160 (3 x 128 x 160 +
//             128 x 24 = 64,512 of 65,536): rung 11's loop fits 160 at D = 64 (64 scores, 32 registers of P and 32
//             accumulators a thread), not at D = 128 (64 accumulators), which keeps rung 11's two warpgroups.
// Prediction: 1.05-1.2x rung 11 at D = 64; at D = 128 rung 11 itself (0.97-1.03x: the same kernel).
// Variants measured on the way: kernels/NOTES.md, CUDA attention rung 12.
// Signature:  at D = 64 as rung 11, with the consumers' setmaxnreg to 160 (not 240) and three turn barriers (named
//             barriers 1-3); no LDL/STL. At D = 128 rung 11's SASS, instruction for instruction.
#if HEAD_DIM == 64 && !defined(CONSUMERS)  // rung 15 passes its searched count
#define CONSUMERS 3
#define CONSUMER_REGISTERS 160
#endif
#include "11_fast_exp2.cu"
