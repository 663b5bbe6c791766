// Attention rung 14 (Hopper only, sm_90a) - the critical path: rung 13 with less work between a tile's S landing and
// the warpgroup's next wgmma.
//
// Idea:       in rungs 10-13 a consumer warpgroup's turn at the tensor cores waits on its own softmax: S of tile t
//             lands, and before S of tile t + 1 can be issued the warpgroup exponentiates, waits for P·V of tile
//             t - 1, rescales O by tile t's alpha (64 FMUL a thread at D = 128), packs P and zeroes the next S's
//             accumulators (wgmma adds to them). Two of those need not be there. O's rescale moves under the next S's
//             wgmma, between its issue and P·V's (FlashAttention-3's order: O is rescaled by tile t - 1's alpha
//             just before the P·V that adds tile t - 1 to it); the zeroing goes, the first wgmma of S told not to
//             add (wgmma's accumulate flag).
// Prediction: 1.02-1.04x rung 13 (kernels/predictions/attention_cuda.toml): the instructions leave the path, not the
//             kernel (the rescale still runs, under a wgmma), so the step is at most the path's share of the tile.
// Variants measured on the way: kernels/NOTES.md, CUDA attention rung 14.
// Signature:  as rung 13; HGMMA as many, one more WARPGROUP.ARRIVE (the fence before P·V); no LDL/STL.
#define SHORT_PATH 1
#include "13_persistent.cu"
