"""ladder.capstone.whole_model: the whole model on the ops computes what torch computes, forward and training, and
the rounds that time the six variants rotate their order."""
import pytest
import torch

from ladder import check, cli
from ladder.capstone import model, whole_model

TINY = model.PRESETS["tiny"]


@pytest.mark.parametrize("name", whole_model.MODELS)
def test_the_model_on_the_ops_computes_what_torch_computes_forward_and_training(name):
    cfg = model.Config("tiny", d_model=128, heads=2, layers=1, seq=32, batch=1, vocab=96)
    for step in whole_model.STEPS:
        runs = whole_model.steps(name, cfg, "cpu", step, variants=("eager", "eager + ops"))
        (eager, eager_net), (ours, ours_net) = runs["eager"], runs["eager + ops"]
        assert model.uses_our_kernels(ours_net) and all(b.attn.every_linear for b in ours_net.blocks)
        training = step == "training"
        want = whole_model._result(eager(), eager_net, training)
        got = whole_model._result(ours(), ours_net, training)
        assert check.compare(got, want.float()).ok, (name, step)


def test_rounds_rotate_the_variants_and_time_every_call():
    calls, order = [], []
    runs = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    timed = whole_model._rotating_rounds(runs, calls=2, rounds=3, sync=lambda: order.append(len(calls)))
    assert [len(t) for t in timed.values()] == [3, 3, 3]
    assert calls[::2] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]


def test_the_table_gives_each_ops_variant_over_the_torch_variant_it_replaces():
    rows = [{"variant": v, "ms": ms, "ms_p20": ms, "ms_p80": ms, "first_call_s": 1.0, "rel_error": 1e-3}
            for v, ms in zip(whole_model.VARIANTS, (2.0, 1.0, 1.0, 2.0, 1.0, 0.5))]
    lines = whole_model.table(rows).splitlines()
    assert "2.000x" in lines[2] and "0.500x" in lines[4] and "2.000x" in lines[6]


def test_record_models_on_cpu_answers_in_one_line(capsys):
    assert cli.main(["record", "models"]) == 2
    assert "`record models` (it times whole models six ways) needs a CUDA GPU" in capsys.readouterr().err
    assert cli.main(["record", "models", "matmul"]) == 2
    assert "record models runs alone" in capsys.readouterr().err
