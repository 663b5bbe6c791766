// Attention rung 11 (Hopper only, sm_90a) - the softmax in fewer instructions: rung 10, its exponentials on
// MUFU.EX2 alone.
//
// Idea:       once the products run on wgmma, a 128-key tile costs a consumer warp far more instructions in the
//             softmax than in the products, and at D = 64 the tensor cores wait on them. exp2f is one MUFU.EX2
//             wrapped in a range fix-up for results below 2^-126 (FSETP, and an FMUL before and after, both
//             predicated): three of a score's ~8 instructions. ex2.approx.ftz is the MUFU.EX2 alone; the results
//             it flushes to 0 round to 0 in fp16 P anyway (flash_mma.cuh, exp2_softmax).
// Prediction: 1.03-1.15x rung 10 (kernels/predictions/attention_cuda.toml), more at D = 64, whose tile has half
//             the tensor-core work of D = 128's for the same softmax.
// Variants measured on the way: kernels/NOTES.md, CUDA attention rung 11.
// Signature:  as rung 10, with one MUFU.EX2 per exponential and no FSETP.GEU beside it; no LDL/STL.
#define FAST_EXP2 1
#include "10_intra_overlap.cu"
