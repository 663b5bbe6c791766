// Attention rung 10 (Hopper only, sm_90a) - softmax under the GEMMs inside each warpgroup: rung 9, with each
// consumer warpgroup's own P·V running under its next softmax.
//
// Idea:       in rungs 7-9 a warpgroup waits for its P·V before it touches the next tile: its tensor-core work
//             and its softmax take turns. Here step t issues S = Q·Kᵀ of tile t and P·V of tile t - 1 together
//             (one ping-pong turn for both), waits for S alone (wgmma.wait_group 1) and exponentiates tile t
//             while P·V of tile t - 1 still runs. The softmax's rescale of O waits for that P·V
//             (FlashWarp::softmax<false>, then rescale), and a K/V stage is released a tile later, so the ring
//             is 3 deep at both head sizes. Registers: S of tile t, P of tile t - 1 and O live at once. The
//             first S and the last P·V are issued outside the loop, so that ptxas sees every wait.
// Prediction: 1.02-1.15x rung 9 (FlashAttention-3's ablation credits this overlap with its second ~10%); the
//             issue's goal is >= 1.0x SDPA's cuDNN kernel at D128.
// Variants measured on the way: kernels/NOTES.md, CUDA attention rung 10.
// Signature:  as rung 9, with the products' code twice (the loop's, and the first S and last P·V outside it):
//             3 WARPGROUP.ARRIVE fences and 4 WARPGROUP.DEPBAR waits (the loop's wait_group 1 and 0), where a
//             serialized pipeline (ptxas warns when it serializes) would have one of each per HGMMA; no LDL/STL.
#define INTRA_OVERLAP 1
#include "9_pingpong.cu"
