"""Tensor maps for Hopper's tensor memory accelerator (TMA), encoded on the host.

A tensor map is 128 opaque bytes that describe one kind of 2-D tile copy: the matrix's address, its shape and
row stride (for a stack of matrices, their count and stride too), the box one copy moves, and the layout the box
takes in shared memory (here the 128-byte swizzle that wgmma reads). The driver encodes it,
`cuTensorMapEncodeTiled`; CuPy wraps no such call, so it is called through ctypes on libcuda, the driver library
that a process running CUDA already has loaded. A kernel takes the map by value, as a `const __grid_constant__`
parameter: CuPy passes a one-element NumPy array by value, whatever its dtype, so the map travels as one 128-byte
void element (`encode`'s result goes in the argument tuple as it is).

`layout` checks what the TMA requires and says what is wrong in a ValueError; it needs no GPU.
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np
import torch

from ladder.runtime.errors import NotAvailable

MAP_BYTES = 128
SWIZZLE_BYTES = {None: 0, 32: 1, 64: 2, 128: 3}       # CUtensorMapSwizzle
_DATA_TYPES = {torch.float16: 6, torch.bfloat16: 9, torch.float32: 7}  # CUtensorMapDataType
_INTERLEAVE_NONE = 0
_L2_PROMOTION_256B = 3                                  # CUtensorMapL2promotion: fetch 256-byte lines into L2
_OOB_FILL_ZEROS = 0                                     # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: zeros outside


def layout(t: torch.Tensor, box: tuple[int, int], swizzle: int | None = 128) -> dict:
    """What `cuTensorMapEncodeTiled` gets for the row-major matrix `t` and a box of `box` = (rows, columns):
    sizes innermost first (columns, then rows), the row stride in bytes, the box. `t` may also be a stack of
    matrices (count, rows, columns), each box inside one of them (attention: a head's rows): then the sizes end
    with the count and `matrix_stride` gives the distance between matrices in bytes, and past a matrix's last
    row the TMA reads zeros, not the next matrix. Raises a ValueError that names the broken rule (the driver
    itself would say only CUDA_ERROR_INVALID_VALUE)."""
    if t.dtype not in _DATA_TYPES:
        raise ValueError(f"tensor maps here take {', '.join(map(str, _DATA_TYPES))}, got {t.dtype}")
    if t.dim() not in (2, 3) or not t.is_contiguous():
        raise ValueError(f"a tensor map needs a contiguous 2-D matrix (or a 3-D stack of them), got shape "
                         f"{tuple(t.shape)}, strides {t.stride()}")
    *stack, rows, cols = t.shape
    size = t.element_size()
    if t.numel() == 0:
        raise ValueError(f"a tensor map needs a non-empty matrix, got shape {tuple(t.shape)}")
    if t.data_ptr() % 16:
        raise ValueError(f"the TMA needs a 16-byte aligned start (address % 16 = {t.data_ptr() % 16})")
    if cols * size % 16:
        raise ValueError(f"the TMA needs rows that are a multiple of 16 bytes apart: {cols} columns x {size} bytes")
    box_rows, box_cols = box
    if not (0 < box_rows <= 256 and 0 < box_cols <= 256):
        raise ValueError(f"a TMA box has 1 to 256 elements a side, got {box}")
    if box_cols * size % 16:
        raise ValueError(f"a TMA box row must be a multiple of 16 bytes: {box_cols} x {size}")
    if swizzle not in SWIZZLE_BYTES:
        raise ValueError(f"swizzle is one of {list(SWIZZLE_BYTES)} (bytes), got {swizzle}")
    if swizzle and box_cols * size > swizzle:
        raise ValueError(f"with the {swizzle}-byte swizzle a box row holds at most {swizzle} bytes: "
                         f"{box_cols} x {size}")
    spec = dict(data_type=_DATA_TYPES[t.dtype], dims=(cols, rows, *stack), row_stride=cols * size,
                box=(box_cols, box_rows), swizzle=SWIZZLE_BYTES[swizzle])
    return spec | (dict(matrix_stride=rows * cols * size) if stack else {})


@functools.lru_cache(maxsize=None)
def _encoder():
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise NotAvailable(f"Tensor maps need the CUDA driver (libcuda.so.1): {e}") from e
    encode = getattr(libcuda, "cuTensorMapEncodeTiled", None)
    if encode is None:
        raise NotAvailable("This CUDA driver has no cuTensorMapEncodeTiled (it came with CUDA 12.0)")
    u32, u64, p = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_void_p
    encode.argtypes = [p, ctypes.c_int, u32, p, ctypes.POINTER(u64), ctypes.POINTER(u64), ctypes.POINTER(u32),
                       ctypes.POINTER(u32), ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    encode.restype = ctypes.c_int
    return libcuda, encode


def _error_text(libcuda, code: int) -> str:
    text = ctypes.c_char_p()
    libcuda.cuGetErrorString(code, ctypes.byref(text))
    return text.value.decode() if text.value else f"CUresult {code}"


def encode(t: torch.Tensor, box: tuple[int, int], swizzle: int | None = 128) -> np.ndarray:
    """The tensor map of the row-major matrix `t` (on the GPU) for boxes of `box` = (rows, columns): a NumPy
    array of one 128-byte element, which `ladder.runtime.cuda.launch` passes by value. Outside `t` the TMA reads zeros.
    The map holds `t`'s address: `t` must stay alive until the kernel that uses the map has run."""
    spec = layout(t, box, swizzle)
    strides = (spec["row_stride"],) + ((spec["matrix_stride"],) if "matrix_stride" in spec else ())
    return _encoded(t.data_ptr(), spec["data_type"], spec["dims"], strides, spec["box"], spec["swizzle"])


@functools.lru_cache(maxsize=256)  # launchers encode their maps on every call: the same ones give the same map
def _encoded(address: int, data_type: int, dims: tuple, strides: tuple, box: tuple, swizzle: int) -> np.ndarray:
    """A map of len(dims) dimensions: strides (bytes) of all but the innermost; the box 1 deep past the sizes given."""
    libcuda, encode_tiled = _encoder()
    rank, box = len(dims), box + (1,) * (len(dims) - len(box))
    raw = np.zeros(2 * MAP_BYTES, dtype=np.uint8)  # the map aligned to 128 bytes, as CUtensorMap is
    start = -raw.ctypes.data % MAP_BYTES
    out = raw[start:start + MAP_BYTES]
    u32, u64 = ctypes.c_uint32, ctypes.c_uint64
    result = encode_tiled(out.ctypes.data, data_type, rank, address, (u64 * rank)(*dims),
                          (u64 * (rank - 1))(*strides), (u32 * rank)(*box), (u32 * rank)(*(1,) * rank),
                          _INTERLEAVE_NONE, swizzle, _L2_PROMOTION_256B, _OOB_FILL_ZEROS)
    if result:
        raise RuntimeError(f"cuTensorMapEncodeTiled({dims[::-1]}, box {box[::-1]}): {_error_text(libcuda, result)}")
    return out.view(np.dtype((np.void, MAP_BYTES)))


def heads_layout(t: torch.Tensor, box_rows: int, swizzle: int | None = 128) -> dict:
    """What `cuTensorMapEncodeTiled` gets for a (B, H, S, D) view whose rows are contiguous (D's stride 1), for
    boxes of `box_rows` rows of one head and 64 columns: a 4-D map, sizes innermost first, the head and row
    dimensions in the order of their strides, which the TMA wants growing: (D, S, H, B), or (D, H, S, B) where a
    head's rows lie further apart than its heads (`heads_inner`: the views of one (B, S, 3, H, D) projection).
    Past a head's last row the TMA reads zeros. Raises a ValueError that names the broken rule."""
    if t.dim() != 4 or t.stride(3) != 1:
        raise ValueError(f"a heads map needs a (B, H, S, D) view with D contiguous, got shape {tuple(t.shape)}, "
                         f"strides {t.stride()}")
    if t.dtype not in _DATA_TYPES:
        raise ValueError(f"tensor maps here take {', '.join(map(str, _DATA_TYPES))}, got {t.dtype}")
    B, H, S, D = t.shape
    size = t.element_size()
    if t.numel() == 0:
        raise ValueError(f"a tensor map needs a non-empty tensor, got shape {tuple(t.shape)}")
    if t.data_ptr() % 16 or any(t.stride(i) * size % 16 for i in range(3)):
        raise ValueError(f"the TMA needs a 16-byte aligned start and strides that are multiples of 16 bytes: "
                         f"address % 16 = {t.data_ptr() % 16}, strides {t.stride()} x {size} bytes")
    if not 0 < box_rows <= 256 or D % 64:
        raise ValueError(f"a box of 1 to 256 rows and 64 columns of D, a multiple of 64: box_rows {box_rows}, D {D}")
    heads_inner = t.stride(1) < t.stride(2)
    (n1, s1), (n2, s2) = ((H, t.stride(1)), (S, t.stride(2)))[::1 if heads_inner else -1]
    if not (D <= s1 and n1 * s1 <= s2 and (B == 1 or n2 * s2 <= t.stride(0))):
        raise ValueError(f"a heads map needs strides that grow (D, then {'heads, rows' if heads_inner else 'rows, heads'}"
                         f", then the batch) without overlap: shape {tuple(t.shape)}, strides {t.stride()}")
    return dict(data_type=_DATA_TYPES[t.dtype], dims=(D, n1, n2, B), strides=(s1 * size, s2 * size, t.stride(0) * size),
                box=(64, 1, box_rows) if heads_inner else (64, box_rows), swizzle=SWIZZLE_BYTES[swizzle],
                heads_inner=heads_inner)


def encode_heads(t: torch.Tensor, box_rows: int, swizzle: int | None = 128) -> tuple[np.ndarray, bool]:
    """The 4-D tensor map of `heads_layout` for the (B, H, S, D) view `t` (on the GPU), and whether it runs heads
    before rows (heads_inner). The map holds `t`'s address: `t` must stay alive until the kernel has run."""
    spec = heads_layout(t, box_rows, swizzle)
    return (_encoded(t.data_ptr(), spec["data_type"], spec["dims"], spec["strides"], spec["box"], spec["swizzle"]),
            spec["heads_inner"])
