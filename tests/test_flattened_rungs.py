"""CUDA attention rungs 7-15 are generated (ladder/flatten.py) from kernels/cuda/attention/hopper_overlays/, one
readable file a rung: the committed files are what the generator writes, and the compiler sees the same program in
a generated file as in its overlay for every configuration the rung is compiled with (the launcher's at both head
dimensions; rung 15: also every configuration of its search).

"The same program" is checked twice over, cheaply: the C preprocessor (`cpp`, standing in for NVRTC's, with NVRTC's
sm_90a macros) turns both into the same token stream for every configuration, and NVRTC compiles both to the same
SASS at one configuration a rung. Compiling every configuration to SASS twice would take 84 compiles (over a
minute on two cores); a token stream is a few milliseconds, and equal streams are one program to any compiler."""
import re
import shutil
import subprocess

import pytest

from ladder import flatten, sass
from ladder.runtime import cuda

RUNGS = flatten.rungs()
SM90A = ("-D__CUDA_ARCH__=900", "-D__CUDA_ARCH_FEAT_SM90_ALL=1", "-D__CUDACC__=1", "-D__CUDACC_RTC__=1")


def overlay(rung: str) -> str:
    return f"attention/hopper_overlays/{rung}.cu"


def generated(rung: str) -> str:
    return f"attention/{rung}.cu"


def test_the_family_is_rungs_7_to_15_and_its_switches_are_the_rung_files_defines():
    assert RUNGS == ["7_wgmma_tma", "8_warp_specialized", "9_pingpong", "10_intra_overlap", "11_fast_exp2",
                     "12_three_consumers", "13_persistent", "14_critical_path", "15_autotuned"]
    assert flatten.switches() == {"CONSUMERS", "CONSUMER_REGISTERS", "PRODUCER_THREADS", "PRODUCER_REGISTERS",
                                  "MIN_BLOCKS", "PINGPONG", "INTRA_OVERLAP", "FAST_EXP2", "PERSISTENT", "SHORT_PATH",
                                  "OP_LAYOUT"}   # the op's switch, off in every rung
    assert [len(flatten.configurations(r)) for r in RUNGS] == [2] * 8 + [2 + 2 * 12]   # rung 15: its search too


def test_the_committed_rung_files_are_what_the_generator_writes():
    assert flatten.stale() == [], "run `python -m ladder.flatten`"
    assert flatten.main(["--check"]) == 0


@pytest.mark.parametrize("rung", RUNGS)
def test_a_generated_rung_reads_top_to_bottom(rung):
    """The rung's header first, the note, then its kernel: no include of another rung, no #if on a switch but the
    ones its configurations disagree on (rungs 12-15: CONSUMERS, three at D64 unless rung 15's search passes it)."""
    text = (cuda.KERNELS_DIR / generated(rung)).read_text()
    header = (cuda.KERNELS_DIR / overlay(rung)).read_text().split("\n#")[0]
    assert text.startswith(header + "\n// Generated from hopper_overlays/")
    assert re.findall(r'#include "(.*)"', text) == ["flash_mma.cuh", "../matmul/tma.cuh"]
    conditions = re.findall(r"^\s*#\s*(?:if|ifdef|ifndef|elif)\b\s*(.*?)\s*(?://.*)?$", text, re.M)
    disagree = ["HEAD_DIM == 64 && !defined(CONSUMERS)", "CONSUMERS"] if int(rung.split("_")[0]) >= 12 else []
    assert conditions == disagree + ["STAGES", "defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)"]
    for switch in ("PINGPONG", "INTRA_OVERLAP", "PERSISTENT"):   # read by the resolved conditions alone
        assert re.search(rf"^\s*#\s*define\s+{switch}\b", text, re.M) is None


def test_the_partial_preprocessor_resolves_switches_only_and_says_when_it_cannot(tmp_path):
    def run(text, configs, switches=frozenset({"A", "B"})):
        (tmp_path / "rung.cu").write_text(text)
        return flatten._Flattener(tmp_path / "rung.cu", configs, switches, tmp_path).flatten().split("\n")[2:]

    text = "// header\n#if A  // a's\n  a();\n#elif B\nb();\n#else\nc();\n#endif\n#if X\nx();\n#endif\nA;\n"
    assert run(text, [dict(A=1)]) == ["  // a's", "  a();", "#if X", "x();", "#endif", "A;", ""]
    assert run(text, [dict(B=1)]) == ["b();", "#if X", "x();", "#endif", "A;", ""]
    # the configurations disagree: the directives stay, an #elif whose #if went becomes the #if
    assert run(text, [dict(B=1), dict(B=0)])[:5] == ["#if B", "b();", "#else", "c();", "#endif"]
    # a switch's #define that only resolved conditions read goes with them
    assert run("// h\n#if A\n#define B 1\n#endif\n#if B\nb();\n#endif\n", [dict(A=1)]) == ["b();", ""]
    assert run("// h\n#if A\na();\n#elif X\nx();\n#endif\n", [dict(A=1)]) == ["a();", ""]   # taken: the rest goes
    with pytest.raises(flatten.FlattenError, match="cannot tell which rungs"):
        run("// h\n#ifdef __CUDA_ARCH__\n#define A 1\n#endif\n", [{}])
    value = lambda expr, env: flatten._Expression(flatten._tokens(expr), env).value()   # noqa: E731
    assert value("!A == 0", dict(A="0")) == 0 and value("defined B || -7 / 2 == -3", {}) == 1   # C's rules
    assert value("CONSUMERS * 64 == BLOCK", dict(CONSUMERS="3", BLOCK="(2 + 1) * 64")) == 1


def preprocessed(path: str, defines: dict) -> list[str]:
    """The tokens the compiler is given for `path` with `defines`, as the C preprocessor makes them: ladder.runtime.cuda's
    text (local includes inlined, as NVRTC gets it), its system #includes left as tokens (the same in both files),
    NVRTC's macros for sm_90a."""
    text = re.sub(r"^\s*#\s*include\s*<([^>]*)>", r"__system_include <\1>", cuda.source(path), flags=re.M)
    options = ["-P", "-undef", "-nostdinc", "-x", "c++", *SM90A, *cuda.defines_options(defines), "-"]
    out = subprocess.run([shutil.which("cpp") or "cpp", *options], input=text, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.mark.parametrize("rung", RUNGS)
def test_the_compiler_sees_the_overlays_program_in_every_configuration(rung):
    for defines in flatten.configurations(rung):
        tokens = preprocessed(generated(rung), defines)
        assert len(tokens) > 3000 and tokens == preprocessed(overlay(rung), defines), defines


@pytest.mark.parametrize("rung", RUNGS)
def test_nvrtc_compiles_the_generated_rung_to_the_overlays_sass(rung):
    """At one configuration a rung (rung 15: a searched one), both head dimensions over the family."""
    configs = flatten.configurations(rung)
    defines = tuple(sorted(configs[-1 if rung.startswith("15") else RUNGS.index(rung) % 2].items()))
    cubins = [cuda.compile_cubin(path(rung), "sm_90a", defines) for path in (generated, overlay)]
    if cubins[0] != cubins[1]:
        one, other = (sass.disassemble(c, "sm_90a") for c in cubins)
        assert one.functions == other.functions
