// Attention rung 15 (Hopper only, sm_90a) - autotuned: rung 14's kernel with its consumer warpgroups, key tile and
// ring depth chosen by a search, per GPU and shape.
//
// Idea:       rungs 12-14 fix one block per D: at D = 64 three consumer warpgroups (192 queries), 128-key tiles,
//             a ring of 3. That suits S 4096, where 192 queries leave 12 consumer warps an SM to hide the softmax's
//             waits. It suits a model's shorter sequences less: GPT-2's S 1024 is 5 1/3 blocks of 192 queries, so
//             its last query block of every head is a third full, and causal blocks of 192 queries compute more of
//             the masked triangle than blocks of 128. Here the launcher compiles one variant per configuration
//             (-D), prunes what cannot fit (shared memory; a variant that spills registers), times the rest and
//             caches the winner per GPU (ladder/autotune.py, kernels/attention.py), as rung 6 does for rung 5:
//             CONSUMERS in {2, 3} (240 or 160 registers a consumer thread), BLOCK_N in {64, 128}, STAGES 2-4.
// Prediction: 0.98-1.05x rung 14 at S 4096 (kernels/predictions/attention_cuda.toml: its configuration is in the
//             space, so the search can only match it or find better, up to the timing's spread); more at the
//             model shapes the search also covers, GPT-2's S 1024 above all.
// Variants measured on the way: kernels/NOTES.md, CUDA attention rung 15.
// Signature:  as rung 14 with the chosen configuration: two or three consumer warpgroups' setmaxnreg (240 or
//             160) and turn barriers; no LDL/STL.
#include "14_critical_path.cu"
