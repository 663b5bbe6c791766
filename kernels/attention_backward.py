"""Attention backward, dQ, dK, dV of O = softmax(Q·Kᵀ/√D)·V given dO: the problem `attention_backward`.

A shape is (B, H, S, D, causal), as the forward's. Inputs: Q, K, V and dO fp16 (B, H, S, D), and the forward, run
once when the inputs are made (`Forward`): every rung times its backward alone. The output is dQ, dK, dV stacked,
(3, B, H, S, D) fp16; the reference, the same by autograd through the math in fp32 (a few heads at a time).
FLOPs: 2.5x the forward's 4·B·H·S²·D (halved when causal): dV = Pᵀ·dO, dP = dO·Vᵀ, dQ, dK, and Q·Kᵀ recomputed,
five matmuls for the forward's two. The rungs (kernels/triton/attention_backward.py, the kernels and their launchers,
says what each does; rung 4's searches and its choice per shape, kernels/attention_backward_search.py; `record` runs the
searches and builds the kernels' SASS here):

triton:1_materialized  autograd through the math in fp32 (P saved): N/A where its B·H·S² tensors do not fit
triton:2_flash         FlashAttention-2's backward: preprocess, dK/dV kernel, dQ kernel
triton:3_atomic_dq     one kernel: the K/V programs add dQ with atomics (the TMA's bulk reductions where they can)
triton:4_autotuned     rungs 2 and 3 searched per (S, D, causal) on this GPU, the faster run
torch:sdpa             SDPA's backward through its cuDNN backend (forced, as the forward ran under it)
torch:sdpa_flash       SDPA's backward through its FlashAttention-2 backend

Each anchor keeps its own forward's autograd graph and calls torch.autograd.grad on it (retain_graph): what runs
is that backend's backward kernels and autograd's few microseconds. The anchors copy their gradients into the
output on their first call (the check); the timed calls that follow skip the copy, as our rungs write in place.
`record` also measures memory (`measure`): the peak bytes allocated by forward + backward, rung 1 against rung 2.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from ladder import autotune, ops
from ladder.runtime.hardware import detect
from ladder.problems import Problem, Rung, register, same_specialization
from kernels import attention as forward_problem
from kernels.attention_backward_search import autotuned_backward, exact_grads, tune
from kernels.triton import attention_backward as tab

SOURCE = "kernels/triton/attention_backward.py"
HEADLINE = [(4, 32, S, D, causal) for S in (4096, 16384) for D in (64, 128) for causal in (0, 1)]
BUCKETS = sorted({(S, D, causal) for _, _, S, D, causal in HEADLINE})   # rung 4's searches
# Rung 1's backward holds four B·H·S² fp32 tensors at its peak: P (saved), dP, the scores' gradient dS and the
# scaled product's (measured at S 4096: `measure`); a GPU gives a process most, not all, of its memory
MATERIALIZED_TENSORS, USABLE_MEMORY = 4, 0.9


def flops(shape: tuple) -> float:
    return 2.5 * forward_problem.flops(shape)


def min_bytes(shape: tuple) -> float:
    """Q, K, V, O, dO read once, dQ, dK, dV written once (fp16), the log-sum-exp read (fp32)."""
    B, H, S, D, _ = shape
    return 8 * 2 * B * H * S * D + 4 * B * H * S


class Forward:
    """The forward of one set of inputs, run once per kind on first use: "flash" (ladder::attention: O and the
    log-sum-exp, what rungs 2-4 take), or an autograd graph ("materialized", "cudnn", "flash_attention": O and the
    leaves Q, K, V) that torch.autograd.grad runs again and again (retain_graph)."""

    def __init__(self, q, k, v, causal: bool):
        self.q, self.k, self.v, self.causal = q, k, v, causal
        self.made: dict = {}
        self.filled = None   # the output an anchor has copied its gradients into

    def flash(self) -> tuple:
        if "flash" not in self.made:
            self.made["flash"] = torch.ops.ladder.attention(self.q, self.k, self.v, self.causal)
        return self.made["flash"]

    def graph(self, kind: str) -> tuple:
        if kind not in self.made:
            leaves = tuple(t.detach().requires_grad_() for t in (self.q, self.k, self.v))
            with torch.enable_grad():
                if kind == "materialized":
                    out = tab.materialized(*leaves, self.causal)
                else:
                    with sdpa_kernel({"cudnn": SDPBackend.CUDNN_ATTENTION,
                                      "flash_attention": SDPBackend.FLASH_ATTENTION}[kind]):
                        out = F.scaled_dot_product_attention(*leaves, is_causal=self.causal)
            self.made[kind] = out, leaves
        return self.made[kind]


def _make_inputs(shape: tuple, where: str, gen: torch.Generator) -> tuple:
    B, H, S, D, causal = shape
    q, k, v, do = (torch.randn(B, H, S, D, generator=gen, device=where).half() for _ in range(4))
    return q, k, v, do, bool(causal), Forward(q, k, v, bool(causal))


def _new_output(shape: tuple, where: str) -> torch.Tensor:
    return torch.empty((3, *shape[:4]), dtype=torch.float16, device=where)


_REFERENCES: dict = {}   # what `record` checks each rung against, kept (in host memory) across its rungs
REFERENCES_KEPT = len(HEADLINE)


def reference(q, k, v, do, causal: bool, forward: Forward | None = None) -> torch.Tensor:
    """(dQ, dK, dV) stacked, fp32: exact_grads, kept in host memory for the next call on the same inputs. `record`
    times rung by rung, each at every shape, on the same seeded inputs: at S 16384 a reference takes seconds on the
    GPU, and the eight headline shapes' take 12 GB."""
    key = (tuple(q.shape), causal, q.device.type, *(float(t[..., :8].float().sum()) for t in (q, k, v, do)))
    if key not in _REFERENCES:
        if len(_REFERENCES) >= REFERENCES_KEPT:
            _REFERENCES.pop(next(iter(_REFERENCES)))
        want = torch.stack(exact_grads(q, k, v, do, causal))
        _REFERENCES[key] = want if want.device.type == "cpu" else want.cpu()
    return _REFERENCES[key]


# ------------------------------------------------------------- the rungs, as the harness calls them

def _ours(backward):
    """A rung of kernels/triton/attention_backward.py: its gradients written straight into out's three planes."""
    def run(q, k, v, do, causal: bool, forward: Forward, out: torch.Tensor | None = None) -> torch.Tensor:
        out = _new_output((*q.shape, causal), q.device) if out is None else out
        o, lse = forward.flash()
        backward(q, k, v, o, lse, do, causal, out=tuple(out))
        return out
    run.__name__ = backward.__name__
    return run


def _through_autograd(kind: str):
    """A rung that runs the backward of `forward.graph(kind)` (retain_graph: again at every call). Its gradients
    are new tensors: copied into out on the first call with that out (the check), not on the timed ones."""
    def run(q, k, v, do, causal: bool, forward: Forward, out: torch.Tensor | None = None) -> torch.Tensor:
        out = _new_output((*q.shape, causal), q.device) if out is None else out
        o, leaves = forward.graph(kind)
        got = torch.autograd.grad(o, leaves, do, retain_graph=True)
        if forward.filled is not out:
            for plane, g in zip(out, got):
                plane.copy_(g)
            forward.filled = out
        return out
    run.__name__ = kind
    return run


def materialized_need_bytes(shape: tuple) -> int:
    """Rung 1's peak beyond the fp16 inputs: what it saves (P, fp32 copies of Q, K, V) and the backward's others."""
    B, H, S, D, _ = shape
    return tab.saved_bytes(B, H, S, D, "1_materialized") + (MATERIALIZED_TENSORS - 1) * 4 * B * H * S * S


def materialized_unavailable(shape: tuple) -> str | None:
    """Rung 1 where its B·H·S² tensors do not fit this GPU's memory (on CPU: never said, the shapes are tiny)."""
    gpu, need = detect(), materialized_need_bytes(shape)
    if gpu is None or need <= USABLE_MEMORY * gpu.memory_bytes:
        return None
    return (f"N/A: needs {need / 2**30:.0f} GiB ({MATERIALIZED_TENSORS} x B·H·S² fp32 at its peak), "
            f"{gpu.name} has {gpu.memory_bytes / 2**30:.0f} GiB")


_BACKENDS_SEEN: dict = {}


def backend_unavailable(kind: str):
    """Why SDPA's `kind` backend cannot run a shape's head size here (tried once per D on a tiny input), or None."""
    def reason(shape: tuple) -> str | None:
        D = shape[3]
        if detect() is None:
            return f"N/A without a GPU: SDPA's {kind} backend is CUDA only"
        if (kind, D) not in _BACKENDS_SEEN:
            q = torch.randn(1, 1, 128, D, device="cuda", dtype=torch.float16, requires_grad=True)
            try:
                with sdpa_kernel({"cudnn": SDPBackend.CUDNN_ATTENTION,
                                  "flash_attention": SDPBackend.FLASH_ATTENTION}[kind]):
                    F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
                _BACKENDS_SEEN[kind, D] = None
            except RuntimeError as e:
                _BACKENDS_SEEN[kind, D] = f"N/A: SDPA's {kind} backend does not run here: {str(e).splitlines()[0][:160]}"
        return _BACKENDS_SEEN[kind, D]
    return reason


# ------------------------------------------------------------- rung 4's searches, and memory (for `record`)
def _tune(labels: list[str]) -> list:
    return tune(BUCKETS, exact_grads) if "triton:4_autotuned" in labels else []


def peak_bytes(run_forward_backward, device: str = "cuda") -> tuple[int, int]:
    """(peak bytes allocated during run_forward_backward(), bytes allocated before it), the peak counted from
    a reset just before it."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    run_forward_backward()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated(), before


MEMORY_SHAPES = [("1_materialized", (4, 32, 4096, 64, 0)), ("2_flash", (4, 32, 4096, 64, 0)),
                 ("1_materialized", (1, 1, 16384, 64, 0)), ("2_flash", (1, 1, 16384, 64, 0)),
                 ("2_flash", (4, 32, 16384, 64, 0))]


def measure_memory(labels: list[str]) -> dict[str, list[dict]]:
    """Forward + backward's peak bytes allocated, rung 1 against rung 2, fp16 inputs (Q, K, V, dO allocated
    before the reset: counted in `inputs_bytes`, not in `peak_above_inputs_bytes`). Rung 1 at S 16384 is measured
    at B 1, H 1 (its row says so, with what B 4, H 32 would need: `needs_at_headline_bytes`)."""
    rows = []
    for rung, shape in MEMORY_SHAPES:
        if f"triton:{rung}" not in labels:
            continue
        B, H, S, D, causal = shape
        gen = torch.Generator("cuda").manual_seed(3)
        q, k, v, do = (torch.randn(B, H, S, D, generator=gen, device="cuda").half() for _ in range(4))
        leaves = tuple(t.requires_grad_() for t in (q, k, v))

        def step(leaves=leaves, do=do, causal=bool(causal)):
            run = tab.materialized if rung == "1_materialized" else lambda q, k, v, c: ops.attention(q, k, v, causal=c)
            run(*leaves, causal).backward(do)
        peak, before = peak_bytes(step)
        headline = (4, 32, S, D, causal)
        rows.append({"problem": "attention_backward", "backend": "triton", "rung": rung, "shape": list(shape),
                     "peak_bytes": peak, "inputs_bytes": before, "peak_above_inputs_bytes": peak - before,
                     "saved_bytes": tab.saved_bytes(B, H, S, D, rung),
                     **({"needs_at_headline_bytes": materialized_need_bytes(headline),
                         "headline": list(headline)} if rung == "1_materialized" and shape != headline else {})})
        del q, k, v, do, leaves
    torch.cuda.empty_cache()
    return {"memory": rows}


def memory_table(rows: list[dict]) -> str:
    """The recorded memory rows as text (the CPU world reads them from results/)."""
    lines = [f"{'rung':16s} {'shape':>18s} {'peak GiB':>9s} {'above inputs':>13s}  note"]
    for r in rows:
        note = (f"at B4 H32 it would need {r['needs_at_headline_bytes'] / 2**30:.0f} GiB"
                if "needs_at_headline_bytes" in r else "")
        lines.append(f"{r['rung']:16s} {'x'.join(map(str, r['shape'])):>18s} {r['peak_bytes'] / 2**30:9.2f} "
                     f"{r['peak_above_inputs_bytes'] / 2**30:13.2f}  {note}")
    return "\n".join(lines)


# ------------------------------------------------------------- the kernels compiled ahead of time (ladder.sass)

def sass_case(kernel: str, head_dim: int = 64, causal: bool = True, config: dict | None = None,
              qdo_tma: bool = False, delta_in_dq: bool = True) -> dict:
    """ladder.sass.triton_sass's arguments for "dkdv" or "dq" as rung 4 launches it on a GPU from ladder.ops, or
    "dkdv_atomic" as rung 3 does: fp16 operands (16-byte aligned), fp32 sums, the scale as Inductor passes it
    (fp64), each row's elements adjacent (stride 1 along D, the others multiples of 16). config: tiles, warps and
    stages (default: rung 2's, tab.GPU_TILES). qdo_tma: the K/V kernel with Q and dO through the TMA (as an eager
    launch on sm_90 takes them), and rung 3's dQ sums too where its tiles say DQ_BY_TMA. delta_in_dq: the Q kernel
    computing Δ (rung 4's launch; False: rung 2's, Δ read)."""
    atomic = kernel == "dkdv_atomic"
    config = dict(config or tab.GPU_TILES[head_dim][kernel])
    dq_tma = bool(config.pop("DQ_BY_TMA", False)) and atomic and qdo_tma
    kernel = "dkdv" if atomic else kernel
    fn = {"dkdv": tab.dkdv_kernel, "dq": tab.dq_kernel}[kernel]
    names = fn.arg_names[:fn.arg_names.index("HEAD_DIM")]
    types = {n: "*fp32" if n in ("lse_ptr", "delta_ptr") else "*fp16" if n.endswith("_ptr") else
             "fp64" if n == "scale" else "i32" for n in names}
    constexprs = dict(HEAD_DIM=head_dim, BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"], CAUSAL=causal,
                      **{n: 1 for n in names if n.startswith("stride") and n.endswith("d")})
    extra = {}
    if kernel == "dq":  # Δ computed from O (rung 4's launch) or read (rung 2's); no gradient of the log-sum-exp
        types["dlse_ptr"] = "constexpr"
        constexprs["dlse_ptr"] = None
        if not delta_in_dq:
            types["o_ptr"] = "constexpr"
            constexprs["o_ptr"] = None
    if kernel == "dkdv":  # rung 3's fp32 dQ sums, or rung 2's None
        types["dq_ptr"] = "*fp32" if atomic else "constexpr"
        constexprs.update({"ATOMIC_DQ": atomic, "QDO_BY_TMA": qdo_tma, "DQ_BY_TMA": dq_tma,
                           **({} if atomic else {"dq_ptr": None})})
        extra.update(ATOMIC_DQ="constexpr", QDO_BY_TMA="constexpr", DQ_BY_TMA="constexpr")
        if qdo_tma:
            box = f"[1,1,{config['BLOCK_M']},{head_dim}]>"
            types.update(q_ptr="tensordesc<fp16" + box, do_ptr="tensordesc<fp16" + box,
                         **({"dq_ptr": "tensordesc<fp32" + box} if dq_tma else {}))
    return dict(kernel=fn, signature={**types, "HEAD_DIM": "constexpr", "BLOCK_M": "constexpr",
                                      "BLOCK_N": "constexpr", "CAUSAL": "constexpr", **extra},
                constexprs=constexprs,
                divisible_by_16=tuple(n for n in names if (n.endswith("_ptr") and types[n] != "constexpr"
                                                           and not types[n].startswith("tensordesc"))
                                      or (n.startswith("stride") and not n.endswith("d"))),
                num_warps=config["num_warps"], num_stages=config["num_stages"])


def _triton(name: str, run, **kw) -> Rung:
    return Rung("triton", name, run, SOURCE, **kw)


PROBLEM = register(Problem(
    name="attention_backward",
    flops=flops,
    min_bytes=min_bytes,
    make_inputs=_make_inputs,
    reference=reference,
    new_output=_new_output,
    check_shapes=[(1, 2, 1, 64, 0), (2, 3, 100, 64, 1), (1, 2, 1000, 128, 0), (1, 2, 777, 64, 1)],
    bench_shapes=HEADLINE,
    interpret_shapes=[(1, 2, 40, 64, 0), (1, 1, 19, 64, 1)],
    compute_roof="fp16_tc_TFLOPs",
    tune=_tune,
    compile_shape=lambda s: (1, same_specialization(s[1]), same_specialization(s[2]), s[3], s[4]),
    measure=measure_memory,
    rungs=[
        _triton("1_materialized", _through_autograd("materialized"), slow=True,
                unavailable_at=materialized_unavailable),
        _triton("2_flash", _ours(tab.backward), needs="tensor_cores"),
        _triton("3_atomic_dq", _ours(tab.atomic_dq_backward), needs="tensor_cores"),
        _triton("4_autotuned", _ours(autotuned_backward), needs="tensor_cores", searches=True),
        # needs: SDPA's fused backends, cuDNN's as FlashAttention's, from sm_80 on (and a GPU: none on CPU)
        Rung("torch", "sdpa", _through_autograd("cudnn"), needs="flash_attention",
             unavailable_at=backend_unavailable("cudnn")),
        Rung("torch", "sdpa_flash", _through_autograd("flash_attention"), needs="flash_attention",
             unavailable_at=backend_unavailable("flash_attention")),
    ],
))
