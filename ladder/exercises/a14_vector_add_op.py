"""Assignment 14: the vector add as a PyTorch operator (torch.library), with its fake implementation.

The student registers `vector_add(a, b)` with `@torch.library.custom_op(..., mutates_args=())`: it launches the
course's Triton kernel (kernels/triton/vector_add.py, `vector_add_kernel`) on two fp16 vectors of one length and
returns the sum in a new tensor, refusing vectors of different lengths. Its fake (`register_fake`) refuses what the
op refuses and returns a tensor with the op's output's shape, dtype and device, from the inputs' metadata alone.

Three checks, each on fresh random data on this world's device (the GPU, or the CPU in Triton's interpreter):
(1) the op's result against a + b in fp32, at ragged lengths, launched through vector_add_kernel, inputs untouched,
a new tensor returned, vectors of different lengths refused; (2) torch.library.opcheck; (3) the fake against the
op under FakeTensorMode at several lengths, on the meta device, and on vectors of different lengths. While a check
runs, a launch of vector_add_kernel is counted, and one on tensors without data (a fake's) is stopped before it
touches them. Feedback names what is wrong: the expected result is the task's own statement, a + b.
"""
from __future__ import annotations

import logging
import secrets
import warnings
from contextlib import contextmanager

import torch
from torch._library.custom_ops import _maybe_get_opdef
from torch._subclasses.fake_tensor import FakeTensorMode, is_fake

from kernels.triton.vector_add import vector_add_kernel
from ladder.exercises.grading import Fail, Result, first_line, judge, unanswered
from ladder.runtime.world import device


RESULT, OPCHECK, FAKE = "(1) the op's result", "(2) opcheck", "(3) the fake"
RESULT_SIZES = (1, 4097)          # plus one random length: ragged for any power-of-two block
OPCHECK_SIZES = (1, 4097)
FAKE_SIZES = (1, 7, 4097)
KERNEL = "vector_add_kernel (kernels/triton/vector_add.py)"
NO_DATA = ("tracers (torch.compile, torch.export, FakeTensorMode) call the fake on tensors that hold no data; it "
           "only makes the output tensor, of the right shape, dtype and device")


class _LaunchWithoutData(Exception):
    """A launch of the kernel on tensors that hold no data (fake or meta): stopped before the kernel reads them."""


def _without_data(t) -> bool:
    return isinstance(t, torch.Tensor) and (t.device.type == "meta" or is_fake(t))


@contextmanager
def _watched():
    """Count launches of vector_add_kernel (`launches[0]`) and stop one on tensors without data; torch's warnings and
    its fake-tensor log stay out of the feedback line."""
    launches = [0]
    run = vector_add_kernel.run

    def watched(*args, **kwargs):
        if any(_without_data(t) for t in (*args, *kwargs.values())):
            raise _LaunchWithoutData("vector_add_kernel launched on tensors without data")
        launches[0] += 1
        return run(*args, **kwargs)

    log = logging.getLogger("torch._subclasses.fake_tensor")
    level = log.level
    vector_add_kernel.run = watched
    log.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield launches
    finally:
        del vector_add_kernel.run   # the class's run again
        log.setLevel(level)


def _chain(e: BaseException) -> list[BaseException]:
    seen = []
    while e is not None and e not in seen:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def _launched_without_data(e: BaseException) -> bool:
    return any(isinstance(x, _LaunchWithoutData) for x in _chain(e))


def _text(e: BaseException) -> str:
    return " ".join(str(x) for x in _chain(e))


def _parts(op):
    """(the operator to call, its Python implementation, its fake or None) of a torch.library op; None otherwise."""
    if isinstance(op, torch._ops.OpOverloadPacket):
        op = op.default
    if isinstance(op, torch.library.CustomOpDef):
        opdef = op
    elif isinstance(op, torch._ops.OpOverload):
        opdef = _maybe_get_opdef(op)
        if opdef is None:   # an operator defined otherwise (torch.library.Library, C++): called, not read
            return op, op, op
    else:
        return None
    return op, getattr(opdef, "_init_fn", op), getattr(opdef, "_abstract_fn", op)


def _not_an_op(op) -> Fail:
    return Fail(f"vector_add is a {type(op).__name__}, not a torch.library operator: decorate it with "
                "@torch.library.custom_op(\"<namespace>::vector_add\", mutates_args=())")


def _device() -> str:
    return device()


def _vectors(n: int, gen: torch.Generator, m: int | None = None) -> tuple:
    """Fresh fp16 vectors a (n) and b (m, default n) on this world's device."""
    return tuple(torch.randn(k, generator=gen).half().to(_device()) for k in (n, n if m is None else m))


def _summands(n: int, gen: torch.Generator) -> tuple:
    """Fresh fp16 vectors a and b of n elements, each in [0.5, 1.5): every a + b is at least 1, so an element the
    op never wrote (a zero, or a) cannot pass for the sum by chance, as it can where a random a + b is near 0."""
    return tuple((0.5 + torch.rand(n, generator=gen)).half().to(_device()) for _ in range(2))


def _fresh() -> torch.Generator:
    return torch.Generator().manual_seed(secrets.randbits(31))


def _aliases(out, *inputs) -> str | None:
    """The name of the input `out` shares memory with (the input itself, or a view of it); None if none."""
    if not isinstance(out, torch.Tensor):
        return None
    storage = out.untyped_storage()._cdata
    return next((name for name, t in zip("ab", inputs) if t is out or t.untyped_storage()._cdata == storage), None)


def _span(idx: torch.Tensor) -> str:
    lo, hi = int(idx.min()), int(idx.max())
    return f"{lo}" if lo == hi else f"{lo} to {hi}"


def _answers(op, with_fake: bool = False) -> tuple:
    """What `judge` tests for the exercise's stub (a `...` in the source): the op's function, and its fake."""
    parts = _parts(op) if not unanswered(op) else None
    if parts is None:
        return (op,)
    _, impl, fake = parts
    return (impl, fake) if with_fake and fake is not None else (impl,)


class VectorAddOp:
    """The three checks of the vector add as a torch.library operator."""

    def check_result(self, op) -> Result:
        def body() -> str:
            call, impl, _ = _parts(op) or (None, None, None)
            if call is None:
                raise _not_an_op(op)
            gen = _fresh()
            sizes = (*RESULT_SIZES, 5000 + int(torch.randint(0, 3000, (1,), generator=gen)) * 2 + 1)
            for n in sizes:
                _result_at(call, impl, n, *_summands(n, gen))
            a, b = _vectors(7, gen, 6)
            try:
                with _watched():
                    call(a, b)
            except Exception:
                pass
            else:
                raise Fail("with a of 7 elements and b of 6 your op returns a result: it must refuse vectors of "
                           "different lengths (raise), or the kernel reads past the end of b")
            return (f"correct: a + b at n = {', '.join(map(str, RESULT_SIZES))} and a random odd n, by "
                    f"{KERNEL.split()[0]}, in a new fp16 tensor, the inputs untouched; vectors of different lengths "
                    "refused")
        return judge(RESULT, _answers(op), body)

    def check_opcheck(self, op) -> Result:
        def body() -> str:
            call = (_parts(op) or (None,))[0]
            if call is None:
                raise _not_an_op(op)
            gen = _fresh()
            for n in OPCHECK_SIZES:
                with _watched():
                    outcome = torch.library.opcheck(call, _vectors(n, gen), raise_exception=False)
                for test, said in outcome.items():
                    if said != "SUCCESS":
                        raise Fail(f"at n = {n}: {_opcheck_failure(test, said)}")
            return (f"correct: torch.library.opcheck passes at n = {' and '.join(map(str, OPCHECK_SIZES))} "
                    f"({', '.join(outcome)})")
        return judge(OPCHECK, _answers(op, with_fake=True), body)

    def check_fake(self, op) -> Result:
        def body() -> str:
            parts = _parts(op)
            if parts is None:
                raise _not_an_op(op)
            call = parts[0]   # no fake registered: the first call under FakeTensorMode says so (a triton_op traces one)
            gen = _fresh()
            for n in FAKE_SIZES:
                a, b = _vectors(n, gen)
                try:
                    with _watched():
                        real = call(a, b)
                except Exception:
                    raise Fail(f"the op itself fails at n = {n}, so there is nothing to hold the fake to: check (1) "
                               "says why") from None
                if not isinstance(real, torch.Tensor):
                    raise Fail(f"the op itself returns a {type(real).__name__} at n = {n}: check (1) says more")
                got, inputs = _fake_call(call, a, b, f"at n = {n}")
                _same_metadata(got, inputs, real.shape, real.dtype, real.device, f"at n = {n}",
                               "the op's output")
            n = FAKE_SIZES[-1]   # the op's output at this n: `real`
            a, b = (torch.empty(n, dtype=torch.float16, device="meta") for _ in range(2))
            got, inputs = _fake_call(call, a, b, "on the meta device", meta=True)
            _same_metadata(got, inputs, real.shape, real.dtype, a.device, "for inputs on the meta device",
                           "the inputs'")
            a, b = _vectors(7, gen, 6)
            try:
                _fake_call(call, a, b, "")
            except Fail:
                pass
            else:
                raise Fail("with a of 7 elements and b of 6 your fake returns a tensor: it must refuse what the op "
                           "refuses, or torch.compile traces a call the op would reject")
            return (f"correct: the fake's output has the op's shape, dtype and device at n = "
                    f"{', '.join(map(str, FAKE_SIZES))} (FakeTensorMode) and on the meta device, without launching "
                    "the kernel; vectors of different lengths refused")
        return judge(FAKE, _answers(op, with_fake=True), body)


def _result_at(call, impl, n: int, a: torch.Tensor, b: torch.Tensor) -> None:
    """One call of the op on fresh vectors of n elements: Fail names what is wrong."""
    where = f"at n = {n}"
    a0, b0 = a.clone(), b.clone()
    try:
        with _watched() as launches:
            out = call(a, b)
    except Exception as e:
        try:   # the dispatcher refuses an output that is an input: the student's function, called directly, shows it
            with _watched():
                x, y = a0.clone(), b0.clone()
                alias = _aliases(impl(x, y), x, y) if impl is not call else None
        except Exception:
            alias = None
        if alias:
            raise Fail(f"your op returns {alias} (or a view of it): an operator declared with mutates_args=() "
                       "returns a new tensor and leaves its inputs as they were") from None
        raise Fail(f"your op fails {where} ({first_line(e)})") from None
    if not isinstance(out, torch.Tensor):
        raise Fail(f"your op returns a {type(out).__name__} {where}, not a tensor")
    alias = _aliases(out, a, b)
    if alias:
        raise Fail(f"your op returns {alias} (or a view of it): an operator declared with mutates_args=() "
                   "returns a new tensor and leaves its inputs as they were")
    for name, t, t0 in (("a", a, a0), ("b", b, b0)):
        if not torch.equal(t, t0):
            raise Fail(f"your op writes into {name} {where}: an operator declared with mutates_args=() leaves its "
                       "inputs as they were; write the sum into a new tensor")
    if not launches[0]:
        raise Fail(f"your op does not launch {KERNEL} {where}: the task is to wrap that Triton kernel as an op")
    if out.dtype != a.dtype:
        raise Fail(f"your op returns {out.dtype} {where}; the sum of two fp16 vectors is fp16, as a + b is")
    if out.device != a.device:
        raise Fail(f"your op's output is on {out.device} {where}, its inputs on {a.device}")
    if out.shape != a.shape:
        raise Fail(f"your op returns shape {tuple(out.shape)} {where}, for vectors of {n} elements")
    got, want = out.float().cpu(), a0.float().cpu() + b0.float().cpu()
    bad = ~torch.isclose(got, want, rtol=1e-3, atol=1e-3)
    if not bad.any():
        return
    idx = bad.nonzero().flatten()
    first = int(idx.min())
    if bad[first:].all() and first > 0:
        raise Fail(f"{where} the elements from index {first} on are not a + b, the ones before are: the launch "
                   "leaves the tail out; the grid must cover all n elements, and a ragged n ends in a partial block")
    if torch.isclose(got, a0.float().cpu(), rtol=1e-3, atol=1e-3).all():
        raise Fail(f"{where} the output holds a: b was never added")
    raise Fail(f"{where} {int(bad.sum())} of {n} elements (indices {_span(idx)}) are not a + b")


def _fake_call(call, a, b, where: str, meta: bool = False):
    """The op on `a` and `b` made fake (FakeTensorMode; or as they are, on the meta device): (output, inputs)."""
    mode = FakeTensorMode()
    try:
        with _watched():
            if meta:
                return call(a, b), (a, b)
            with mode:
                fa, fb = mode.from_tensor(a), mode.from_tensor(b)
                return call(fa, fb), (fa, fb)
    except Exception as e:
        text = _text(e).lower()
        if _launched_without_data(e):
            raise Fail(f"your fake launches {KERNEL}: {NO_DATA}") from None
        if "no fake impl" in text:
            raise Fail(f"vector_add has no fake implementation: {NO_DATA}; register one with "
                       "@vector_add.register_fake") from None
        if "DataDependent" in type(e).__name__ or "data pointer" in text or "no data" in text:
            raise Fail(f"your fake reads its inputs' data {where} ({first_line(e)}): {NO_DATA}") from None
        raise Fail(f"your fake fails {where} ({first_line(e)})") from None


def _same_metadata(got, inputs, shape, dtype, device, where: str, whose: str) -> None:
    if not isinstance(got, torch.Tensor):
        raise Fail(f"your fake returns a {type(got).__name__} {where}, not a tensor")
    alias = _aliases(got, *inputs)
    if alias:
        raise Fail(f"your fake returns {alias} (or a view of it) {where}, where the op returns a new tensor")
    if got.shape != shape:
        raise Fail(f"{where} your fake's output has shape {tuple(got.shape)}, the op's {tuple(shape)}")
    if got.dtype != dtype:
        raise Fail(f"{where} your fake's output is {got.dtype}, the op's {dtype}")
    if got.device != device:
        raise Fail(f"{where} your fake's output is on {got.device}, {whose} on {device}: the fake must follow "
                   "its inputs' device")


def _opcheck_failure(test: str, error: BaseException) -> str:
    """One of opcheck's failed tests, in words."""
    text = _text(error)
    low = text.lower()
    if _launched_without_data(error):
        return f"your fake launches {KERNEL}: {NO_DATA}"
    if "unbacked" in low or "DataDependent" in text:
        return f"opcheck's {test} fails: your fake reads its inputs' data; {NO_DATA}"
    if "no fake impl" in low:
        return f"opcheck's {test} fails: vector_add has no fake implementation; {NO_DATA}"
    if "not defined as mutable but was mutated" in low:
        return (f"opcheck's {test} fails: your op writes into an input, and its schema (mutates_args=()) says it "
                "does not; write the sum into a new tensor")
    if "must not also be an input" in low or "may not alias" in low:
        return (f"opcheck's {test} fails: your op returns one of its inputs (or a view of one); an operator "
                "returns a new tensor")
    if test == "test_faketensor":
        for key, what in (("Shapes", "shape"), ("Dtypes", "dtype"), ("evice", "device"),
                          ("outputs_alias_inputs", "aliasing: one of them returns an input")):
            if key in text:
                return f"opcheck's test_faketensor fails: the fake's output and the op's differ in {what}"
    return f"opcheck's {test} fails ({first_line(error)})"
