"""Triton launches at the library's launch cost: a kernel's first launch at each specialization goes through
Triton's own path (binding every argument, computing its specialization, the compile or its cache: tens of µs a
launch on the host), which returns the compiled kernel; later launches with the same specialization launch that
kernel directly, its arguments in the kernel's parameter order: through the C++ launcher torch.compile's own code
launches Triton kernels with, where it takes the kernel (run_compiled), else through Triton's.

The key holds all that Triton specializes on: each tensor's dtype and 16-byte alignment, each integer's value,
None arguments, a tensor descriptor's dtype, shape, strides and block, the constexprs and launch options, and the
device. Eager launches on a GPU only: in the interpreter every launch is an interpreted run, and a traced launch
(torch.compile) goes through wrap_triton.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import operator
import threading

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
        # while recording(), this thread's launches: (compiled, grid, pointers, other arguments) each
        self.logs = threading.local()

    @contextlib.contextmanager
    def recording(self):
        """The launches this thread makes inside, as Replay takes them (another thread's launches meanwhile are
        not among them)."""
        self.logs.log = []
        try:
            yield self.logs.log
        finally:
            self.logs.log = None

    def __call__(self, kernel, grid: tuple, args: tuple, keywords: dict) -> None:
        device = torch.cuda.current_device()
        n = self.pointers.get(kernel)
        if n is None:
            n = self.pointers[kernel] = next((i for i, a in enumerate(args) if type(a) in _SCALARS), len(args))
        pointers, rest = args[:n], args[n:]
        key = (kernel, device, rest, tuple([_spec(p) for p in pointers]), tuple(sorted(keywords.items())))
        found = self.compiled.get(key)
        grid3 = (*grid, 1, 1)[:3]
        if found is None:
            compiled = kernel[grid](*args, **keywords)
            named = [p.name for p in kernel.params[len(args):]]
            defaults = {p.name: p.default for p in kernel.params[len(args):]}
            found = self.compiled[key] = compiled, tuple(keywords.get(n, defaults[n]) for n in named)
        else:
            run_compiled(found[0], grid3, (*[_address(p) for p in pointers], *rest, *found[1]), device)
        log = getattr(self.logs, "log", None)
        if log is not None:
            log.append((found[0], grid3, pointers, (*rest, *found[1])))


_SCALARS = (int, float, bool)


class Replay:
    """Launches recorded during one call (DirectLaunches.recording), made again at the compiled launchers' own cost
    for a later call whose tensors have the same layouts (what each launch's key held: dtypes, shapes, strides,
    alignments) in the same places: each launch's pointers are named by their place among the call's tensors (a
    tensor descriptor by its base's place and the recorded descriptor), its other arguments kept as recorded."""

    def __init__(self, log: list, tensors: tuple):
        place = {id(t): i for i, t in enumerate(tensors) if t is not None}
        if len(place) < sum(t is not None for t in tensors):   # one tensor in two places: which is it later?
            raise KeyError("a tensor in two places of the recorded call")
        self.launches = [(compiled, grid, tuple(_named(p, place) for p in pointers), rest)
                         for compiled, grid, pointers, rest in log]
        self.laid_out: list | None = None   # laid_out of each launch, at the first replay

    def __call__(self, tensors: tuple, device: int) -> None:
        context = launch_context(device)
        if self.laid_out is None:   # after the recorded call's launches: each kernel is loaded
            self.laid_out = [laid_out(compiled, grid, named, rest) for compiled, grid, named, rest in self.launches]
        for (compiled, grid, named, rest), laid in zip(self.launches, self.laid_out):
            if laid is None or not run_laid_out(laid, tensors, context):
                run_compiled(compiled, grid, (*[_pointer(n, tensors) for n in named], *rest), device, context)


def _named(arg, place: dict):
    """A recorded pointer argument by where it came from: None, a tensor's place, or, for a tensor descriptor, its
    base's place and its other fields (not the base: a replay keeps no tensor of the recorded call alive). KeyError:
    a tensor that is not among the call's (a replay could not supply it)."""
    if arg is None:
        return None
    if isinstance(arg, TensorDescriptor):
        return place[id(arg.base)], {k: v for k, v in vars(arg).items() if k != "base"}
    return place[id(arg)]


def _pointer(named, tensors: tuple):
    if named is None:
        return None
    if type(named) is int:
        return tensors[named].data_ptr()
    at, fields = named   # the recorded descriptor on the new base, unchecked: its checks passed on this layout
    descriptor = object.__new__(TensorDescriptor)
    descriptor.__dict__.update(fields, base=tensors[at])
    return descriptor


def launch_context(device: int) -> tuple:
    """What every launch on `device` now takes: torch's current stream there, and the launch hooks Triton has set
    (enter, exit)."""
    return (torch._C._cuda_getCurrentRawStream(device), hook(triton.knobs.runtime.launch_enter_hook),
            hook(triton.knobs.runtime.launch_exit_hook))


def laid_out(compiled, grid: tuple, named: tuple, rest: tuple) -> tuple | None:
    """A launch laid out once for torch's launcher, for run_laid_out: its pointer parameters named by their place
    among a call's tensors (`named`: an int each, None for one left out), its other arguments (`rest`, constexprs
    included) fixed. What torch's launcher takes of them is picked here, not at each launch: the places of the
    pointers it reads, and the arguments after them with the scratch pointers. None where torch's launcher does not
    take the kernel (torch_launch) or a pointer is a tensor descriptor (it reads no descriptor)."""
    how = _torch_launch_of(compiled)
    if how is None or any(n is not None and type(n) is not int for n in named):
        return None
    function, warps, shared, types, pick, scratch = how
    kept = pick((*range(len(named)), *[None] * len(rest)))   # the pointers it reads come first, by their index
    places = tuple(named[i] for i in kept if i is not None)
    if None in places:   # a None it would read as a pointer (Triton makes a None argument a constexpr)
        return None
    arguments = pick((*[None] * len(named), *rest))[len(places):] + scratch
    return function, *grid, warps, shared, types, places, arguments


def run_laid_out(laid: tuple, tensors: tuple, context: tuple) -> bool:
    """A launch laid out by laid_out, on `tensors` (each at the place it was named by), through torch's launcher on
    context's stream (launch_context). False, launching nothing, where a launch hook is set (Triton's launcher
    calls it; torch's would not) or torch's launcher is gone (tests take it away)."""
    stream, enter, leave = context
    if enter is not None or leave is not None or _TORCH_LAUNCHER is None:
        return False
    function, x, y, z, warps, shared, types, places, arguments = laid
    _TORCH_LAUNCHER(function, x, y, z, warps, shared, types,
                    (*[tensors[i].data_ptr() for i in places], *arguments), stream)
    return True


def run_compiled(compiled, grid: tuple, args: tuple, device: int, context: tuple | None = None) -> None:
    """A compiled Triton kernel launched: `grid` three sizes, `args` all of its parameters in order (tensors by
    address), on torch's current stream of `device` (context: launch_context(device), where a caller launches
    several kernels at once). Through torch's own launcher for Triton's kernels where it takes the kernel and no
    launch hook is set (torch_launch), else through Triton's, with its hooks."""
    stream, enter, leave = context or launch_context(device)
    if enter is None and leave is None:
        how = _torch_launch_of(compiled)
        if how is not None:
            function, warps, shared, types, pick, scratch = how
            _TORCH_LAUNCHER(function, grid[0], grid[1], grid[2], warps, shared, types, pick(args) + scratch, stream)
            return
    compiled.run(grid[0], grid[1], grid[2], stream, compiled.function, compiled.packed_metadata,
                 None if enter is None else compiled.launch_metadata(grid, stream, *args), enter, leave, *args)


def torch_launch(compiled) -> tuple | None:
    """How torch's C++ launcher for Triton's kernels (torch._C._StaticCudaLauncher, which torch.compile's own
    generated code launches them through: it reads each argument by a one-letter type and calls cuLaunchKernel, with
    none of Triton's Python around its launcher) takes `compiled`: (warps, shared memory bytes, the arguments' type
    letters, a function picking them out of a full argument list, the scratch pointers to append). None where it
    cannot launch it: a cluster, more than one CTA, scratch memory, launch attributes (PDL, a cooperative grid), or
    an argument type it does not read (a tensor descriptor). Reads Triton's compiled metadata, no GPU."""
    metadata, src = compiled.metadata, compiled.src
    scratches = [name for name in ("global_scratch_size", "profile_scratch_size") if hasattr(metadata, name)]
    if (getattr(metadata, "num_ctas", 1) != 1 or any(d > 1 for d in getattr(metadata, "cluster_dims", ()))
            or getattr(metadata, "launch_pdl", False) or getattr(metadata, "launch_cooperative_grid", False)
            or any(getattr(metadata, name) for name in scratches)):
        return None
    position = {name: i for i, name in enumerate(src.fn.arg_names)}
    index = lambda key: position[key] if isinstance(key, str) else key[0] if isinstance(key, tuple) else key
    signature = {index(key): ty for key, ty in src.signature.items()}
    constants = {index(key) for key in getattr(src, "constants", {})}
    kept = tuple(i for i in sorted(signature) if signature[i] != "constexpr" and i not in constants)
    letters = type_letters()
    types = "".join("O" if signature[i].startswith("*") else letters.get(signature[i], "?") for i in kept)
    if "?" in types or not kept:
        return None
    pick = operator.itemgetter(*kept) if len(kept) > 1 else (lambda args: (args[kept[0]],))
    scratch = (None,) * len(scratches)   # Triton's kernels take a pointer for each, null where unused
    return metadata.num_warps, metadata.shared, types + "O" * len(scratch), pick, scratch


@functools.cache
def type_letters() -> dict[str, str]:
    """Triton's scalar types as torch's launcher reads them: torch's own table (its statically launched Triton
    kernel's type_mappings; the module's name differs between torch versions), without fp16 and bf16, which torch
    passes widened to fp32 and our kernels never take as scalars. Empty where this torch has neither module: every
    scalar then reads as unknown, and torch_launch leaves the kernel to Triton's launcher."""
    for module, kernel in (("static_triton_launcher", "StaticallyLaunchedTritonKernel"),
                           ("static_cuda_launcher", "StaticallyLaunchedCudaKernel")):
        try:
            table = getattr(importlib.import_module(f"torch._inductor.runtime.{module}"), kernel).type_mappings()
        except (ImportError, AttributeError):
            continue
        return {ty: letter for ty, letter in table.items() if ty not in ("fp16", "bf16")}
    return {}


def _torch_launch(compiled) -> tuple | None:
    """torch_launch's answer with the compiled kernel's function (loaded by its first launch), or None."""
    how = torch_launch(compiled) if _TORCH_LAUNCHER is not None else None
    if how is None:
        return None
    compiled.run   # noqa: B018 -- loads the module (Triton's first launch has; a property that makes sure)
    return (compiled.function, *how)


def _torch_launch_of(compiled) -> tuple | None:
    """_torch_launch's answer, worked out once a compiled kernel."""
    how = _BY_TORCH.get(compiled, _UNSEEN)
    if how is _UNSEEN:
        how = _BY_TORCH[compiled] = _torch_launch(compiled)
    return how


_UNSEEN = object()
_BY_TORCH: dict = {}   # compiled kernel: _torch_launch's answer
_TORCH_LAUNCHER = getattr(getattr(torch._C, "_StaticCudaLauncher", None), "_launch_kernel", None)
