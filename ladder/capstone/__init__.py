"""Lesson 05, "Should you write this kernel?": profile a real model, then decide on measured data.

config    the model's shapes (GPT-2 small at lesson 05's batch; a tiny one for the CPU)
model     a GPT-2-shaped decoder-only transformer from plain torch modules, random weights, our kernels
          switchable in through ladder.ops (the Triton flash-attention rung; the fused matmul + bias + GELU)
families  torch.profiler's rows sorted into op families (matmuls, attention, layer norm, ...) and time shares
costs     FLOPs and bytes of each op of the model from its shapes; its floor on a roofline; Amdahl's law
decision  the three conditions and the six checks, each answered from a measurement or marked a judgement
endtoend  the four end-to-end variants (eager, eager + ours, torch.compile, compile + ours) timed on a GPU,
          the swapped ops timed alone, and the row `python -m ladder record capstone` stores
"""
