"""Compile-only signatures, asserted: what each vector-add rung's machine code must contain."""
import pytest

from kernels.triton.vector_add import SIGNATURE, vector_add_kernel
from kernels.cuda.vector_add import SCALAR_ELEMS_PER_THREAD
from ladder import sass


@pytest.mark.parametrize("arch", sass.ARCHS)
def test_scalar_vs_vectorized_load_width(arch):
    scalar = sass.cuda_sass("vector_add/1_scalar.cu", arch, {"ELEMS_PER_THREAD": SCALAR_ELEMS_PER_THREAD})
    vector = sass.cuda_sass("vector_add/2_vectorized.cu", arch)
    assert scalar.global_load_bits() == {16}
    assert scalar.count("LDG") == 2 * SCALAR_ELEMS_PER_THREAD  # one per element per input
    assert 128 in vector.global_load_bits()
    body = [op for op in vector.opcodes() if op.startswith("LDG") and "128" in op.split(".")]
    assert sum(vector.opcodes()[op] for op in body) == 2  # one 16-byte load of A, one of B
    assert "vector_add" in scalar.functions and "vector_add" in vector.functions


def test_triton_vectorizes_only_when_it_may_assume_divisibility():
    aligned_ptrs = ("a_ptr", "b_ptr", "c_ptr")
    ragged = sass.triton_sass(vector_add_kernel, SIGNATURE, {"BLOCK": 4096}, "sm_90", aligned_ptrs)
    even = sass.triton_sass(vector_add_kernel, SIGNATURE, {"BLOCK": 4096}, "sm_90", aligned_ptrs + ("n",))
    assert ragged.global_load_bits() == {16}
    assert even.global_load_bits() == {128}
    assert even.count("LDG") < ragged.count("LDG")


def test_opcode_parser_reads_predicates_and_modifiers():
    s = sass.Sass("sm_90", {"k": "/*0100*/   @!P6 LDG.E.128 R8, desc[UR4][R2.64] ;\n"
                                  "/*0110*/   HADD2 R0, R1, R2 ;\n/*0120*/  LDG.E.U16 R5, [R4.64] ;"})
    assert s.opcodes() == {"LDG.E.128": 1, "HADD2": 1, "LDG.E.U16": 1}
    assert s.count("LDG") == 2 and s.global_load_bits() == {16, 128}
