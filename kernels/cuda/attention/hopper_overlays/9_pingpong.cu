// Attention rung 9 (Hopper only, sm_90a) - ping-pong: rung 8's two consumer warpgroups take turns at the tensor
// cores, so that one's softmax runs while the other's Q·Kᵀ does.
//
// Idea:       in rung 8 the two consumer warpgroups issue their wgmmas whenever they are ready; both often reach
//             Q·Kᵀ together, wait on the tensor cores together, and then both exponentiate while the tensor cores
//             idle. Here they alternate: a warpgroup waits for its turn (named barrier 1 or 2) before issuing
//             Q·Kᵀ and grants the other its turn (bar.arrive) right after, before its own softmax. The other's
//             product then runs under this one's softmax, and the order holds tile after tile.
// Prediction: 1.03-1.15x rung 8 (FlashAttention-3 schedules its two warpgroups so), short of cuDNN's kernel where it
//             also overlaps the next tile's Q·Kᵀ with the softmax inside each warpgroup (rung 10's idea).
// Signature:  as rung 8, plus BAR.SYNC and BAR.ARV on a register-held barrier id (the turns).
#define PINGPONG 1
#include "8_warp_specialized.cu"
