"""Triton launches at the library's launch cost: a kernel's first launch at each specialization goes through
Triton's own path (binding every argument, computing its specialization, the compile or its cache: tens of µs a
launch on the host), which returns the compiled kernel; later launches with the same specialization call that
kernel's launcher directly, its arguments in the kernel's parameter order.

The key holds all that Triton specializes on: each tensor's dtype and 16-byte alignment, each integer's value,
None arguments, a tensor descriptor's dtype, shape, strides and block, the constexprs and launch options, and the
device. Eager launches on a GPU only: in the interpreter every launch is an interpreted run, and a traced launch
(torch.compile) goes through wrap_triton.
"""
from __future__ import annotations

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")   # launch options; every other keyword is a constexpr


def hook(hook):
    """A launch hook to hand Triton's launcher, None where none is set. Newer Tritons keep an empty chain of hooks
    (HookChain) rather than None; handed on, it costs a call before and after each launch and, before them, the
    launch metadata built for it."""
    return None if hook is None or getattr(hook, "calls", True) == [] else hook


def _spec(arg):
    """What Triton specializes on in one argument."""
    if isinstance(arg, torch.Tensor):
        return arg.dtype, arg.data_ptr() % 16 == 0
    if isinstance(arg, TensorDescriptor):
        return (arg.base.dtype, arg.base.data_ptr() % 16 == 0, tuple(arg.shape), tuple(arg.strides),
                tuple(arg.block_shape))
    return type(arg), arg   # int (its value: Triton specializes 1 and multiples of 16), float, bool, None


def _address(arg):
    """An argument as the compiled launcher takes it: a tensor by its address (the checks before the launch made
    sure it is on the GPU), a tensor descriptor as it is (the launcher encodes it)."""
    return arg.data_ptr() if isinstance(arg, torch.Tensor) else arg


class DirectLaunches:
    """kernel[grid](*args, **keywords), eagerly on a GPU, at the cost of the compiled kernel's own launcher after
    the first launch of each specialization. A kernel's pointer parameters come before its other arguments (the
    count is read off its first launch): those others (sizes, strides, scales, each of one type from launch to
    launch) go into the key as one tuple, hashed at C speed, and only the few pointers are looked at one by one."""

    def __init__(self):
        self.compiled: dict[tuple, tuple] = {}
        self.pointers: dict[object, int] = {}

    def __call__(self, kernel, grid: tuple, args: tuple, keywords: dict) -> None:
        device = torch.cuda.current_device()
        n = self.pointers.get(kernel)
        if n is None:
            n = self.pointers[kernel] = next((i for i, a in enumerate(args) if type(a) in _SCALARS), len(args))
        pointers, rest = args[:n], args[n:]
        key = (kernel, device, rest, tuple([_spec(p) for p in pointers]), tuple(sorted(keywords.items())))
        found = self.compiled.get(key)
        if found is None:
            compiled = kernel[grid](*args, **keywords)
            named = [p.name for p in kernel.params[len(args):]]
            defaults = {p.name: p.default for p in kernel.params[len(args):]}
            self.compiled[key] = compiled, tuple(keywords.get(n, defaults[n]) for n in named)
            return
        compiled, constexprs = found
        run_compiled(compiled, (*grid, 1, 1)[:3], (*[_address(p) for p in pointers], *rest, *constexprs), device)


_SCALARS = (int, float, bool)


def run_compiled(compiled, grid: tuple, args: tuple, device: int) -> None:
    """A compiled Triton kernel launched through its own launcher on torch's current stream of `device`: `grid`
    three sizes, `args` all of its parameters in order (tensors by address), the launch hooks Triton has set."""
    stream = torch._C._cuda_getCurrentRawStream(device)
    enter, leave = hook(triton.knobs.runtime.launch_enter_hook), hook(triton.knobs.runtime.launch_exit_hook)
    compiled.run(grid[0], grid[1], grid[2], stream, compiled.function, compiled.packed_metadata,
                 None if enter is None else compiled.launch_metadata(grid, stream, *args), enter, leave, *args)
