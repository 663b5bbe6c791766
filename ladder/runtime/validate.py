"""Input checks shared by every launcher: a bad argument gets a ValueError that names it."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from triton.tools.tensor_descriptor import TensorDescriptor


def tensor(name: str, t, *, dtype: torch.dtype, ndim: int, device: str, align_bytes: int = 0) -> None:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise ValueError(f"{name} must be {dtype}, got {t.dtype}")
    if t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {tuple(t.shape)}")
    if t.device.type != device:
        raise ValueError(f"{name} is on {t.device}; this kernel needs tensors on '{device}'")
    if not t.is_contiguous():
        raise ValueError(f"{name} is not contiguous (strides {t.stride()}); call .contiguous() first")
    if align_bytes and t.data_ptr() % align_bytes:
        raise ValueError(f"{name} is not {align_bytes}-byte aligned (address % {align_bytes} = "
                         f"{t.data_ptr() % align_bytes}); this kernel loads {align_bytes}-byte vectors")


def same_shape(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError("shape mismatch: " + ", ".join(f"{n} {s}" for n, s in shapes.items()))


def vector_operands(a, b, out, *, device: str, align_bytes: int = 0) -> torch.Tensor:
    """Check C = A + B operands (fp16 vectors of one length, contiguous, each on an `align_bytes` boundary); returns
    out, a new vector where `out` is None."""
    for name, t in (("a", a), ("b", b)):
        tensor(name, t, dtype=torch.float16, ndim=1, device=device, align_bytes=align_bytes)
    same_shape(a=a, b=b)
    if out is None:
        out = torch.empty_like(a)
    tensor("out", out, dtype=torch.float16, ndim=1, device=device, align_bytes=align_bytes)
    same_shape(a=a, out=out)
    return out


def matmul_operands(a, b, out, *, device: str, dtype: torch.dtype = torch.float16, stored_transposed_b: bool = False):
    """Check C = A·B operands (A M×K, B K×N, row-major, contiguous; with `stored_transposed_b`, B may also be the
    transposed view of a contiguous N×K tensor, as nn.Linear's weight.t()); returns (M, N, K, out).

    `out` may be None: a new M×N tensor is made. Every problem is named in the ValueError.
    """
    tensor("a", a, dtype=dtype, ndim=2, device=device)
    if stored_transposed_b and isinstance(b, torch.Tensor) and b.dim() == 2 and is_stored_transposed(b):
        tensor("b.t()", b.t(), dtype=dtype, ndim=2, device=device)
    else:
        tensor("b", b, dtype=dtype, ndim=2, device=device)
    (M, K), (K_b, N) = a.shape, b.shape
    if K != K_b:
        raise ValueError(f"inner dimensions differ: a is {M}x{K}, b is {K_b}x{N} (need a's columns == b's rows)")
    if out is None:
        out = torch.empty((M, N), dtype=dtype, device=a.device)
    tensor("out", out, dtype=dtype, ndim=2, device=device)
    if tuple(out.shape) != (M, N):
        raise ValueError(f"out has shape {tuple(out.shape)}; a @ b is {M}x{N}")
    return M, N, K, out


def tensor_core_dtype(a) -> torch.dtype:
    """The dtype a tensor-core kernel that also takes bf16 computes in for operand `a`: bf16 where `a` is bf16, else
    fp16 (whose check then names any other dtype as wrong)."""
    return torch.bfloat16 if getattr(a, "dtype", None) is torch.bfloat16 else torch.float16


def is_stored_transposed(b: torch.Tensor) -> bool:
    """b is the transposed view of a contiguous tensor (and not itself contiguous: one row or column is both)."""
    return not b.is_contiguous() and b.t().is_contiguous()


def padded_rows(a: torch.Tensor, b: torch.Tensor):
    """(a, b, K, N) for kernels that load 16-byte row vectors of fp16 A (M×K) and B (K×N): zero-padded
    to K and N multiples of 8 when they are not (the padding adds nothing to the sums), and copied when
    a view starts mid-vector. kernels.cuda.matmul.pad_note says when this copies."""
    K, N = a.shape[1], b.shape[1]
    Kp, Np = _multiple_of_8(K), _multiple_of_8(N)
    if Kp != K:
        a = F.pad(a, (0, Kp - K))
    if (Kp, Np) != (K, N):
        b = F.pad(b, (0, Np - N, 0, Kp - K))
    return _aligned(a), _aligned(b), Kp, Np


def padded_k(a: torch.Tensor, w: torch.Tensor):
    """(a, w) for A (M×K) and W (N×K) both read along K in 16-byte vectors: K zero-padded to a multiple of 8 in
    both (adding nothing to the sums), and a view that starts mid-vector copied."""
    K = a.shape[1]
    Kp = _multiple_of_8(K)
    if Kp != K:
        a, w = F.pad(a, (0, Kp - K)), F.pad(w, (0, Kp - K))
    return _aligned(a), _aligned(w)


def _multiple_of_8(n: int) -> int:
    """n rounded up to 8 fp16 elements: 16 bytes, a vector load and a TMA row pitch."""
    return -(-n // 8) * 8


PLAIN = (torch.Tensor, torch.nn.Parameter)  # tensor types that hold their own data (not fake, functional, ...)


def traced(*args) -> bool:
    """Whether any tensor among `args` is fake or functional: the op launching a kernel with them is being
    traced (its fake run, or Inductor reading its kernels), and must launch through wrap_triton."""
    if _UNTRACED.issuperset(map(type, args)):  # the usual eager launch, decided at C speed
        return False
    return any(isinstance(a, torch.Tensor) and type(a) not in PLAIN for a in args)


# a tensor descriptor wraps a real tensor: the launchers make one only for an eager launch
_UNTRACED = frozenset((*PLAIN, int, float, bool, type(None), TensorDescriptor))


def _aligned(t: torch.Tensor) -> torch.Tensor:
    return t if t.data_ptr() % 16 == 0 else t.clone()
