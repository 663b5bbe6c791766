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
// Measured on the way (H100, one run, 5 interleaved rounds, x SDPA at S 4096, D128 / D128 causal / D64 / D64
//             causal): the rescale moved alone 1.009 / 1.010 / 1.085 / 0.983, the zeroing gone alone 0.992 / 1.010
//             / 1.080 / 0.980, both (this rung) 1.002 / 1.013 / 1.091 / 0.988, rung 13 0.989 / 1.012 / 1.075 / 0.967.
//             FlashAttention-3's D128 tile, 176 keys in a ring of 2 with K and V on barriers of their own (K
//             released once S lands, V once P·V does), on top of this rung: 1.000 / 0.975. Rung 13 with a ring of
//             2 and one barrier for K and V: 0.75x to 0.78x SDPA at every key tile tried (128-192), the next copy
//             waiting for the last tile's P·V.
// Signature:  as rung 13; HGMMA as many, one more WARPGROUP.ARRIVE (the fence before P·V); no LDL/STL.
#define SHORT_PATH 1
#include "13_persistent.cu"
