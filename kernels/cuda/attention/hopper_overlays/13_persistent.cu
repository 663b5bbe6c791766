// Attention rung 13 (Hopper only, sm_90a) - a persistent grid: rung 12's blocks, one an SM, each computing query
// block after query block.
//
// Idea:       rungs 7-12 launch a block per (query block, head): thousands of blocks, one resident an SM at a time
//             (225 KiB of shared memory at D = 128). Each starts with its tensor cores idle while the TMA brings
//             its Q and first K/V tiles from memory, and ends with them idle while it rescales and stores O. Here
//             the grid is one block an SM, and each walks the items (query block, head) gridDim.x apart, head by
//             head. Its producer goes on to the next item's K/V tiles (the ring carries on) and, as soon as the
//             consumers' last S of an item has landed (barrier q_empty), its Q, while the consumers exponentiate
//             that S, do the last P·V and store O. Causal blocks keep one item each: their lengths differ, and the
//             hardware's block scheduler hands the next one to whichever SM is free, where a fixed stride would
//             not balance them (kernels/attention.py, persistent_grid).
// Prediction: 1.02-1.05x rung 12 without a mask (kernels/predictions/attention_cuda.toml); causal 0.97-1.03x (rung 12's
//             kernel, its loop run once).
// Variants measured on the way: kernels/NOTES.md, CUDA attention rung 13.
// Signature:  as rung 12, plus the q_empty barrier (SYNCS) and the loop over items; no LDL/STL.
#define PERSISTENT 1
#include "12_three_consumers.cu"
