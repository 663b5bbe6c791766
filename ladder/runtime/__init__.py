"""What a kernel needs at run time, and nothing of the harness: the kernels in kernels/ import only this package.

- `world`: GPU or CPU (Triton's interpreter), decided before any kernel is defined; `device()`.
- `hardware`: the GPU in front of us (or the one KERNEL_LADDER_EMULATE names) and what it supports.
- `validate`: operand checks that name what is wrong.
- `cuda`: CUDA C++ compiled through CuPy (or NVRTC alone) and launched on torch's stream.
- `tma`: Hopper tensor maps for the CUDA kernels.
- `errors`, `cache`: what cannot run here, and where compiled binaries are kept.
"""
