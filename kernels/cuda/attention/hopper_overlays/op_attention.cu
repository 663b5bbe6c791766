// Rung 15 as ladder.ops launches it (kernels/cuda/attention.py, hopper_op): the same kernel, reading q, k and v as
// the views a model hands it (any (B, H, S, D) views whose rows are contiguous: 4-D tensor maps), writing O laid out
// as q and each query's log-sum-exp, which the backward recomputes the probabilities from. Not a rung: the switch
// is `flatten`'s OP_SWITCHES, off in every rung's file.
#define OP_LAYOUT 1
#include "15_autotuned.cu"
