"""The CLI on a machine without a GPU, or given a name it does not know: one clear line and a non-zero exit,
never a traceback; and `ladder notebooks` keeps outputs measured on a GPU."""

import pytest

from ladder import cli

ROOT = cli.ROOT


def _answer(capsys, *argv) -> tuple[int, list[str]]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, (captured.out + captured.err).strip().splitlines()


@pytest.mark.parametrize("argv, says", [
    (["record"], "`record` (it checks, times and profiles every rung) needs a CUDA GPU"),
    (["record", "matmul", "--no-profile"], "needs a CUDA GPU"),
    (["record", "nosuch"], "no problem 'nosuch'; known: vector_add, matmul, matmul_bias_relu, attention"),
    (["record", "matmul", "--backends", "cuda:9_fast"], "no backend or rung cuda:9_fast in matmul"),
    # the default backends include cuda, which attention_backward has none of: not an error unless named
    (["record", "attention_backward", "--no-profile"], "needs a CUDA GPU"),
    (["record", "attention_backward", "--backends", "cuda"], "no backend or rung cuda in attention_backward"),
    (["profile", "matmul", "cuda", "9_fast", "64", "64", "64"], "matmul has no rung cuda:9_fast; it has cuda:1_naive"),
    (["profile", "matmul", "cuda", "1_naive", "64", "64", "64"], "`profile` (Nsight Compute) needs a CUDA GPU"),
    (["run-once", "matmul", "cuda", "1_naive", "64", "64", "64"], "run-once needs a CUDA GPU"),
    (["notebooks"], "GPU (NVIDIA H100 80GB HBM3); a CPU run would replace them"),   # the committed lessons (and others)
])
def test_one_line_and_a_non_zero_exit(capsys, argv, says):
    code, lines = _answer(capsys, *argv)
    assert code == 2 and len(lines) == 1 and says in lines[0], lines


def test_a_missing_notebook_is_named():
    with pytest.raises(SystemExit, match="no such notebook: nosuch.ipynb"):
        cli.main(["notebooks", "nosuch.ipynb"])


def test_gpu_outputs_are_recognised_and_cpu_ones_are_not():
    import nbformat
    lesson = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import ladder", outputs=[
        nbformat.v4.new_output("stream", text="world: GPU (NVIDIA H100 80GB HBM3), sm_90\n")])])
    assert cli.executed_on(lesson) == "GPU (NVIDIA H100 80GB HBM3)"  # the world line a lesson prints
    fresh = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1)")])
    assert cli.executed_on(fresh) is None
    fresh.metadata["kernel_ladder"] = {"world": "CPU only (Triton interpreter, compile-only CUDA, recorded timings)"}
    assert cli.executed_on(fresh).startswith("CPU only")


def test_a_cpu_run_of_cpu_notebooks_goes_ahead(tmp_path, capsys):
    import nbformat
    path = tmp_path / "cpu.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")]), path)
    assert cli.main(["notebooks", str(path)]) == 0
    nb = nbformat.read(path, as_version=4)
    assert nb.cells[0].outputs[0]["text"] == "42\n" and nb.metadata["kernel_ladder"]["world"].startswith("CPU only")


def test_compare_sets_the_recordings_side_by_side(capsys):
    assert cli.main(["compare", "nvidia-h100-80gb-hbm3", "nvidia-h200"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0] == "| | NVIDIA H100 80GB HBM3 | NVIDIA H200 |"
    copy = next(line for line in table if line.startswith("| copy"))
    h100, h200 = (float(x) for x in copy.strip("|").split("|")[1:])
    assert h200 > 1.3 * h100  # HBM3e: the memory roof follows the GPU
    assert any("x cublas" in line for line in table if line.startswith("| matmul"))


def test_compare_names_a_missing_recording(capsys):
    assert cli.main(["compare", "nosuch-gpu"]) == 2
    assert "no recorded results for nosuch-gpu" in capsys.readouterr().err
