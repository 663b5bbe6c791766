"""Assignment 10: the student's prune, judged by what NVRTC makes of rung 6's configurations (compile-only, on an
H100's sm_90 and a T4's sm_75). The solution's rule passes; typical wrong rules do not, each with a line that
names one configuration and the compiler's facts about it; nothing the checker exposes is a rule that passes,
and no wrong answer's feedback tells the right answer's counts. The compile results are shared by every test
(the checker's cache: memory, then disk), so only the first check compiles."""
import importlib.util
import re
from pathlib import Path

import nbformat
import pytest

import kernels.matmul as mm
from kernels.cuda import matmul as cm
from ladder.exercises import NotYet, SearchPrune, strip_solutions
from ladder.exercises import a10_search_prune as a10
from ladder.exercises.grading import hidden

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "solutions" / "10_matmul_search_prune.ipynb"


def _answer_cell() -> str:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    return next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "answer_prune_reason")


def _defined(source: str, folder: Path | None = None, name: str = "answer_cell"):
    """The cell's prune_reason; from a file in `folder` when its source must be readable (as a notebook's is)."""
    if folder is None:
        space = {}
        exec(compile(source, str(NOTEBOOK), "exec"), space)
        return space["prune_reason"]
    path = folder / f"{name}.py"
    path.write_text(source + "\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.prune_reason


@pytest.fixture(scope="module")
def solution():
    """The notebook's rule and its verdict: the first check, which compiles what the others reuse."""
    rule = _defined(_answer_cell())
    return rule, SearchPrune().check(rule)


def _rule(regs=True, threads=True, max_sums=None, split=True, smem=True, limit=None, stages=True):
    """A prune like the solution's, with one of its parts left out or changed."""
    def prune(c, gpu):
        n = 32 * c["WARPS_M"] * c["WARPS_N"]
        sums = (c["BM"] // c["WARPS_M"]) * (c["BN"] // c["WARPS_N"]) // 32
        if regs and sums + 64 > (min(255, 65536 // n) if threads else 255):
            return "spills"
        if max_sums and sums > max_sums:
            return f"{sums} sums"
        if split and ((c["BM"] * c["BK"] // 8) % n or (c["BK"] * c["BN"] // 8) % n):
            return "uneven copies"
        if smem and cm.shared_bytes(c) > (limit or gpu.smem_per_block_bytes):
            return "shared memory"
        if stages and not gpu.has("cp.async") and c["STAGES"] != 2:
            return "two stages"
        return None
    return prune


def _crash(c, gpu):
    return c["num_warps"]   # the Triton space's key


WRONG = {
    "keep-everything": (lambda c, gpu: None, "cannot run"),
    "prune-everything": (lambda c, gpu: "no", "drops too much that runs well"),
    "no-shared-memory": (_rule(smem=False), "KiB of shared memory (a block may have 64 KiB)"),
    "no-registers": (_rule(regs=False), "that spill registers"),
    "no-thread-share": (_rule(threads=False), "that spill registers, e.g. 256x256x"),  # 128 sums at 512 threads
    "too-strict": (_rule(max_sums=64), "drops too much that runs well"),
    "hopper-limits-everywhere": (_rule(limit=227 << 10, stages=False), "on the T4 (sm_75, 64 KiB per block, no"),
    "cp-async-stages-everywhere": (_rule(stages=False), "without cp.async the pipeline is a register-staged double"),
    "no-even-split": (_rule(split=False), "tile pieces must split evenly over the threads"),
    "bool": (lambda c, gpu: False, "a reason (a str) or None"),
    "crash": (_crash, "your code fails (KeyError: 'num_warps')"),
    "compiles": (lambda c, gpu: a10.explore(c), "your prune compiles"),
}


def test_the_solution_passes(solution, capsys):
    rule, result = solution
    assert result.passed and result.reason.startswith("correct: on the H100 it keeps"), result
    assert "on the T4 it keeps" in result.reason
    with hidden():  # the graded cell's hidden test: quiet, and it passes
        assert SearchPrune().check(rule)
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("name", WRONG)
def test_a_wrong_prune_is_told_why(solution, capsys, name):
    rule, expect = WRONG[name]
    result = SearchPrune().check(rule)
    out = capsys.readouterr().out
    assert not result and expect in result.reason, result
    assert out == f"{result}\n"
    with hidden(), pytest.raises(NotYet):
        SearchPrune().check(rule)


def test_a_failure_names_one_configuration_and_its_compiled_facts(solution):
    result = SearchPrune().check(_rule(regs=False))
    named = re.search(r"e\.g\. (\d+)x(\d+)x(\d+) on (\d)x(\d) warps, (\d) stages: (\d+) registers, (\d+) bytes "
                      r"of local", result.reason)
    assert named, result
    BM, BN, BK, WM, WN, S, registers, local = map(int, named.groups())
    facts = a10.compiled_all("sm_90", [a10.config(BM, BN, BK, WM, WN, S)])[0]
    assert (facts.registers, facts.local_bytes) == (registers, local) and local > a10.SMALL_SPILL


def test_wrong_answers_are_not_told_the_right_counts(solution):
    """The pass line's counts (what the right rule keeps, what compiles clean) appear in no wrong answer's line,
    beyond the facts of the one configuration it names."""
    counts = set(re.findall(r"keeps (\d+) of|of the (\d+) that", solution[1].reason))
    counts = {int(n) for pair in counts for n in pair if n}
    assert len(counts) >= 3, solution[1].reason
    for name, (rule, _) in WRONG.items():
        said = SearchPrune().check(rule).reason.split(" e.g. ")[0]
        assert not counts & {int(n) for n in re.findall(r"\b\d+\b", said)}, (name, said)


def test_nothing_the_checker_exposes_is_a_rule_that_passes(solution):
    public = {n: getattr(a10, n) for n in dir(a10) if not n.startswith("_")}
    checker = SearchPrune()
    public.update({f"SearchPrune().{n}": getattr(checker, n) for n in dir(checker) if not n.startswith("_")})
    assert "reference" not in public
    for name, thing in public.items():
        with hidden(), pytest.raises(NotYet):
            SearchPrune().check(thing)


def test_the_exercise_stub_is_not_answered_yet(tmp_path, capsys, monkeypatch):
    stub = strip_solutions(_answer_cell())
    assert "# YOUR ANSWER" in stub and "if " not in stub and "smem_per_block_bytes" not in stub, stub
    monkeypatch.setattr(a10, "compiled_all", lambda *args: pytest.fail("an unanswered check compiles"))
    result = SearchPrune().check(_defined(stub, tmp_path))
    assert not result and not result.answered and capsys.readouterr().out == "search-space prune: not answered yet\n"


def test_a_blank_left_over_but_unused_is_no_matter(solution, tmp_path, capsys):
    source = _answer_cell().replace("### BEGIN SOLUTION", 'shared = ...  # YOUR ANSWER')
    source = "\n".join(line for line in source.splitlines() if "###" not in line)
    assert SearchPrune().check(_defined(source, tmp_path))
    stub = strip_solutions(_answer_cell()).replace("return None", "return None if c else 'never'")
    assert not SearchPrune().check(_defined(stub, tmp_path, "stub")).answered   # it still keeps everything


def test_a_second_check_reads_the_compilers_answers_from_disk(solution, monkeypatch):
    monkeypatch.setattr(a10, "_compile", lambda arch, c: pytest.fail(f"compiled {c} for {arch} again"))
    a10._known.cache_clear()
    try:
        assert SearchPrune().check(solution[0])
    finally:
        a10._known.cache_clear()


def test_the_space_is_rung_sixs_less_its_slowest_compiles():
    space = a10.configs()
    assert all(c in mm.TUNER.configs() for c in space) and len(space) == 126
    assert {c["GROUP_M"] for c in space} == {8}   # one compile per configuration
