"""The CUDA C++ rungs, one file a rung under <problem>/, and their launchers: <problem>.py, which runs alone
(`python -m kernels.cuda.matmul`)."""
