"""What the lessons' cells call, one module per lesson (or run of lessons), named so that `ls` lists them in
course order. A notebook imports the package and names the module in each call (`lessons.source.show_diff(...)`,
`lessons.l02_matmul_cuda.roofs_summary(...)`): a cell says which file its helper is in.

source                                the kernel-source viewer every lesson prints with (a file, a diff, the
                                      #if versions of a later rung folded), and the readers of a .cu file's
                                      constants that the diagrams and exercises use
signatures                            the SASS signature tables lessons 01-04 print
reading                               how long a lesson takes to read (tests/test_lesson_budgets.py)
l02_matmul_cuda                       02a-02c, the CUDA matmul ladder
l03_matmul_triton                     03, the Triton matmul ladder
l04_attention                         04a-04c, attention in CUDA C++ and Triton; its SASS builds serve 04d-04f
l04d_attention_backward               04d
l04e_attention_hopper                 04e (its table of blocks an SM holds, 04f too)
l04f_attention_softmax_instructions   04f
l06_shipping_a_kernel                 06

Lessons 00, 01 and 05 have no module of their own: 01 calls source, signatures and ladder.roofline's gpu_model
(the roofline model of a datasheet GPU, which lessons 02a-04c print too), 05 calls source and ladder.capstone.
"""
from __future__ import annotations

import importlib

MODULES = ("source", "signatures", "reading", "l02_matmul_cuda", "l03_matmul_triton", "l04_attention",
           "l04d_attention_backward", "l04e_attention_hopper", "l04f_attention_softmax_instructions",
           "l06_shipping_a_kernel")


def __getattr__(name: str):
    """`lessons.<module>`: the module, imported on first use. Deferred so that importing one module (ladder.capstone
    and the exercises import `source`) does not load every lesson's kernels and operators."""
    if name not in MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module(f"{__name__}.{name}")


def __dir__() -> list[str]:
    """The modules too, loaded or not: what a notebook's completion offers after `lessons.`."""
    return sorted({*globals(), *MODULES})
