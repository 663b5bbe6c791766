"""Lesson 05's model and its decision on CPU: op families, costs, Amdahl, the decision table, the GELU
epilogue in the Triton interpreter against fp64, our kernels swapped into the model, and the `record
capstone` hook (with a fake GPU: it runs for real only on one)."""
import json

import pytest
import torch

import kernels.matmul_bias_relu as mbr
from kernels import attention as attention_problem
from ladder import check, cli, profile, results
from ladder.runtime import hardware
from ladder.capstone import costs, decision, endtoend, families, hot_op, model


@pytest.mark.parametrize("name, family", [
    ("aten::addmm", "matmul"), ("aten::mm", "matmul"), ("aten::linear", "matmul"),
    ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "matmul"),
    ("nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_TNN", "matmul"), ("persistent_kernel", "matmul"),
    ("ladder::matmul", "matmul"), ("triton_tem_fused_addmm_0", "matmul"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"), ("flash_kernel", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64", "attention"),
    ("fmha_cutlassF_f16_aligned_64x64_rf_sm80", "attention"), ("ladder::attention", "attention"),
    ("aten::native_layer_norm", "layer norm"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::Half, float>", "layer norm"),
    ("triton_per_fused_add_native_layer_norm_3", "layer norm"),
    ("aten::gelu", "GELU/bias"), ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>", "GELU/bias"),
    ("triton_poi_fused_addmm_gelu_view_2", "GELU/bias"),
    ("aten::_softmax", "softmax"), ("void (anonymous namespace)::softmax_warp_forward<c10::Half>", "softmax"),
    ("aten::copy_", "copies"), ("Memcpy DtoD (Device -> Device)", "copies"), ("aten::index_select", "copies"),
    ("void at::native::elementwise_kernel<128, 4, at::native::direct_copy_kernel_cuda>", "copies"),
    ("triton_poi_fused_clone_1", "copies"),
    ("aten::add", "elementwise"), ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::Half>>", "elementwise"),
    ("triton_poi_fused_add_embedding_0", "elementwise"),
    ("aten::empty", "other"), ("aten::view", "other"),
])
def test_every_kind_of_row_lands_in_its_family(name, family):
    assert families.family_of(name) == family


def test_the_tiny_model_profiled_on_cpu():
    cfg = model.PRESETS["tiny"]
    net, tokens = model.build(cfg, "cpu"), model.tokens(cfg, "cpu")
    profile = families.profile(lambda: net(tokens), on_gpu=False, steps=1)
    shares = families.shares(profile["us_per_step"])
    assert list(shares) == list(families.FAMILIES) and abs(sum(shares.values()) - 1) < 1e-9
    for family in ("matmul", "attention", "layer norm", "GELU/bias"):
        assert shares[family] > 0, family
    assert len(profile["top"]) == 10 and all(f in families.FAMILIES for _, f, _ in profile["top"])
    table = families.share_table({"eager": profile})
    assert table.splitlines()[0].split() == ["op", "family", "eager"] and "total ms" in table


def test_op_costs_from_shapes():
    cfg = model.PRESETS["gpt2-small"]
    ops = {op.name: op for op in costs.ops(cfg)}
    M, d = cfg.tokens, cfg.d_model
    assert ops["qkv projection"].flops == 2 * M * d * 3 * d
    assert ops["qkv projection"].bytes == 2 * (M * d + d * 3 * d + M * 3 * d + 3 * d)
    shape = (cfg.batch, cfg.heads, cfg.seq, cfg.head_dim, 1)
    assert ops["attention (causal)"].flops == attention_problem.flops(shape)
    assert ops["attention (causal)"].bytes == attention_problem.min_bytes(shape)
    assert ops["vocabulary projection"].per_forward == 1 and ops["layer norm"].per_forward == 2 * cfg.layers + 1
    ceilings = {"copy_TBps": 3.0, "fp16_tc_TFLOPs": 600.0}
    gelu, up = ops["GELU"], ops["MLP up (d -> 4d)"]
    assert gelu.bound(ceilings) == "memory" and gelu.floor_ms(ceilings) == pytest.approx(gelu.bytes / 3e12 * 1e3)
    assert up.bound(ceilings) == "compute" and up.floor_ms(ceilings) == pytest.approx(up.flops / 600e12 * 1e3)
    # fused, the 4d-wide activation is written once and never read back: GELU's bytes are gone
    fused = costs.fused_up_gelu(cfg)
    assert fused.bytes == up.bytes and fused.flops == up.flops
    assert "floor of one forward pass" in costs.floor_table(cfg, ceilings, "given")


def test_amdahl():
    assert costs.amdahl(0.5, 2.0) == pytest.approx(4 / 3)
    assert costs.amdahl(0.0, 100.0) == 1.0 and costs.amdahl(1.0, 3.0) == pytest.approx(3.0)
    assert costs.amdahl(0.1, 1e9) < 1.12   # a tenth of the time can never buy more than 1/0.9
    assert costs.predicted_ms(10.0, [(2.0, 2.0), (1.0, 4.0)]) == pytest.approx(10 - 1 - 0.75)


@pytest.mark.parametrize("shape", [(1, 1, 1), (17, 33, 65), (33, 47, 31)])
def test_gelu_epilogue_against_fp64_on_ragged_shapes(shape):
    M, N, K = shape
    a, b, bias = mbr._make_inputs(shape, "cpu", torch.Generator().manual_seed(sum(shape)))
    a = 3 * a   # both tails of GELU, where tanh saturates
    out = torch.empty(M, N, dtype=torch.float16)
    verdict = check.check(mbr.fused_gelu, (a, b, bias), out, mbr.reference_gelu(a, b, bias))
    assert verdict.ok, verdict
    relu = check.check(mbr.fused, (a, b, bias), out, mbr.reference(a, b, bias))   # ReLU's epilogue unchanged
    assert relu.ok, relu


def test_gelu_epilogue_names_a_bad_activation():
    from kernels import matmul_triton_search as triton_search
    a, b, bias = (torch.ones(2, 2).half(), torch.ones(2, 2).half(), torch.ones(2).half())
    with pytest.raises(ValueError, match="activation 'silu': the epilogue knows relu, gelu"):
        triton_search.launch_autotuned(a, b, torch.empty(2, 2).half(), bias, activation="silu")


def test_our_kernels_swapped_into_the_model_compute_what_it_computes():
    cfg = model.PRESETS["tiny"]
    verdict = endtoend.check_swap(cfg, "cpu", batch=1, seq=32)
    assert verdict.ok, verdict
    net = model.use_our_kernels(model.build(cfg, "cpu"))
    assert model.uses_our_kernels(net)
    assert not model.uses_our_kernels(model.use_our_kernels(net, on=False))


def test_our_kernels_are_one_graph_for_torch_compile():
    # custom ops: Dynamo traces the model without a graph break around them (fullgraph would raise)
    from torch._dynamo.testing import CompileCounter
    cfg = model.PRESETS["tiny"]
    net = model.use_our_kernels(model.build(cfg, "cpu"))
    counter = CompileCounter()
    with torch.no_grad():
        torch.compile(net, backend=counter, fullgraph=True)(model.tokens(cfg, "cpu")[:1, :16])
    assert counter.frame_count == 1


def fake_row(eager_ms=10.0, ours_ms=9.0):
    cfg = model.PRESETS["gpt2-small"]
    variants = {"eager": eager_ms, "eager + ours": ours_ms, "torch.compile": 8.0, "compile + ours": 7.9}
    return {"model": cfg.name, "config": cfg.as_dict(), "dtype": "float16",
            "ceilings": {"copy_TBps": 3.0, "fp32_TFLOPs": 58.0, "fp16_tc_TFLOPs": 690.0},
            "variants": {k: {"ms": v, "ms_p20": v * 0.99, "ms_p80": v * 1.01} for k, v in variants.items()},
            "errors": dict.fromkeys(variants, 1e-3), "first_call_s": dict.fromkeys(variants, 1.0),
            "profiles": {k: {"us_per_step": dict.fromkeys(families.FAMILIES, 100.0), "top": []} for k in variants},
            "ops": [{"op": op.name, "torch_ms": 0.05} for op in costs.ops(cfg)],
            "swaps": [{"swap": "attention", "torch_ms": 0.06, "ours_ms": 0.07, "compile_ms": 0.06, "rel_error": 1e-3},
                      {"swap": "MLP up + GELU", "torch_ms": 0.12, "ours_ms": 0.09, "compile_ms": 0.10, "rel_error": 1e-3}]}


def test_decision_table_from_a_recorded_row():
    row = fake_row()
    rows = decision.rows_for("MLP up + GELU", row)
    assert len(rows) == 9 and {r.kind for r in rows} == {"measured", "judgement"}
    by_question = {r.question: r for r in rows}
    share = 0.12 * 12 / 10.0
    assert by_question["hot (> 5% of wall-clock)"].evidence == f"{100 * share:.1f}%"
    assert by_question["no off-the-shelf kernel as fast"].favours_writing   # 0.09 < min(0.12, 0.10)
    assert not decision.rows_for("attention", row)[4].favours_writing       # attention: ours slower than SDPA
    assert not by_question["speed-up >= 2x end to end"].favours_writing     # 10 / 9 = 1.11x
    assert decision.verdict(rows).startswith("do not write it; answered no: ")
    assert "survives a model change" in decision.verdict(rows)
    assert "verdict: do not write it" in decision.table("attention", row)


def test_decision_table_without_a_recording_says_so_and_invents_nothing():
    rows = decision.rows_for("attention", None)
    measured = [r for r in rows if r.kind == "measured"]
    assert measured and all(r.answer == "?" and r.evidence == decision.NOT_RECORDED for r in measured)
    assert decision.verdict(rows) == "no verdict until the measured rows are recorded"
    assert "python -m ladder record capstone" in decision.NOT_RECORDED


def test_amdahl_beside_each_variant():
    row = fake_row()
    predicted = endtoend.predictions(row)
    saved_eager = 12 * ((0.06 - 0.07) + (0.12 - 0.09))
    assert predicted["eager + ours"] == pytest.approx(10.0 - saved_eager)
    assert predicted["compile + ours"] == pytest.approx(8.0 - 12 * ((0.06 - 0.07) + (0.10 - 0.09)))
    lines = endtoend.variant_table(row).splitlines()
    assert [line.split("  ")[0].strip() for line in lines[1:]] == list(endtoend.VARIANTS)


def test_the_recorded_h100_answers_come_from_its_rows():
    answers = decision.recorded_answers(results.load())
    assert len(answers) == 3
    assert "% of the copy bandwidth" in answers[0] and "tensor pipe busy" in answers[1] and "captures" in answers[2]


def test_record_capstone_on_cpu_answers_in_one_line(capsys):
    assert cli.main(["record", "capstone"]) == 2
    assert "`record capstone` (it profiles and times a model end to end) needs a CUDA GPU" in capsys.readouterr().err
    assert cli.main(["record", "capstone", "matmul"]) == 2
    assert "record capstone runs alone" in capsys.readouterr().err


def test_record_capstone_writes_its_row_with_provenance(tmp_path, monkeypatch):
    from ladder import ceilings
    gpu = hardware.GPU("NVIDIA Fake 1", (9, 0), 132, 50 << 20, 227 << 10, 80 << 30, None)
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(cli, "require_gpu", lambda what: None)
    monkeypatch.setattr(hardware, "detect", lambda index=0: gpu)
    monkeypatch.setattr(ceilings, "measure", lambda g, refresh=False: {"copy_TBps": 3.0, "fp32_TFLOPs": 58.0,
                                                                      "fp16_tc_TFLOPs": 690.0})
    monkeypatch.setattr(endtoend, "measure", lambda model, ceilings, progress=print: fake_row())
    old = {"provenance": {"gpu": gpu.name, "slug": gpu.slug, "date": "2026-01-01 00:00 UTC"},
           "ceilings": {"copy_TBps": 2.9}, "runs": [{"problem": "matmul", "backend": "torch", "rung": "cublas",
                                                     "shape": [8, 8, 8], "ms": 1.0}]}
    (tmp_path / f"{gpu.slug}.json").write_text(json.dumps(old))
    assert cli.main(["record", "capstone"]) == 0
    saved = results.load(gpu.slug)
    row = saved.capstone()
    assert row["variants"]["eager"]["ms"] == 10.0 and row["recorded"] == saved.data["provenance"]["date"]
    assert saved.data["provenance"]["gpu"] == gpu.name and "torch" in saved.data["provenance"]
    assert saved.runs("matmul")[0]["ms"] == 1.0 and saved.ceilings == {"copy_TBps": 2.9}   # old rows kept
    monkeypatch.setattr(endtoend, "measure", lambda model, ceilings, progress=print: fake_row(eager_ms=11.0))
    assert cli.main(["record", "capstone"]) == 0
    rows = results.load(gpu.slug).data["capstone"]
    assert len(rows) == 1 and rows[0]["variants"]["eager"]["ms"] == 11.0   # recorded again: replaced


def test_the_lesson_reads_the_recording_that_holds_the_capstone(tmp_path, monkeypatch):
    from ladder import results
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    base = {"provenance": {"gpu": "G", "date": "d"}, "ceilings": {}}
    (tmp_path / f"{results.PREFERRED}.json").write_text(json.dumps(base))
    (tmp_path / "other-gpu.json").write_text(json.dumps({**base, "capstone": [{"model": "gpt2-small"}]}))
    assert results.load_having("capstone").path.stem == "other-gpu"
    assert results.load_having("power").path.stem == results.PREFERRED  # none has it: the preferred one
    (tmp_path / f"{results.PREFERRED}.json").write_text(json.dumps({**base, "capstone": [{"model": "gpt2-small"}]}))
    assert results.load_having("capstone").path.stem == results.PREFERRED


def test_the_variant_table_says_how_busy_the_gpu_was():
    row = fake_row()
    row["profiles"]["compile + ours"]["us_per_step"] = {"matmul": 2000.0, "attention": 1000.0}  # 3 ms of kernels
    row["variants"]["compile + ours"]["ms"] = 6.0
    line = next(x for x in endtoend.variant_table(row).splitlines() if x.startswith("compile + ours"))
    assert "3.000" in line and "50%" in line  # half the measured time, the GPU waited for the host


def test_compile_projection_is_the_matmul_kernel_without_a_bias_epilogue():
    row = fake_row()
    row["profiles"]["torch.compile"]["top"] = [["nvjet_bias_TNN", "matmul", 900.0], ["triton_poi_gelu", "GELU/bias", 800.0],
                                               ["nvjet_TNN", "matmul", 700.0]]
    assert decision.compiled_projection(row) == ("nvjet_TNN", 700.0)
    assert decision.compiled_projection(fake_row()) is None   # a profile without one names none


def test_the_hot_op_is_profiled_in_the_models_layout():
    """ncu runs the projection as nn.Linear does (weight vocab x d_model: cuBLAS's _tn_ kernel), not x @ b."""
    cfg = model.PRESETS["tiny"]
    x, w = hot_op.projection_operands(cfg, cfg.vocab, torch.Generator().manual_seed(0), device="cpu")
    assert x.shape == (cfg.tokens, cfg.d_model) and w.shape == (cfg.vocab, cfg.d_model) and w.is_contiguous()
    command = profile.ncu_sections_command(["python", "-m", "ladder.capstone.hot_op", "tiny"])
    assert command[:3] == ["ncu", "--clock-control", "none"] and command[-3:] == ["-m", "ladder.capstone.hot_op", "tiny"]


def test_the_padding_report_names_each_kernel_or_says_it_was_not_recorded():
    row = fake_row()
    row["ceilings"] = {"copy_TBps": 3.0, "fp16_tc_TFLOPs": 600.0}
    row["vocab_padding"] = {"vocab": 50257, "padded": 50304, "alone_ms": 7.4, "padded_alone_ms": 1.0,
                            "eager_padded": {"ms": 5.0, "ms_p20": 4.9, "ms_p80": 5.1}}
    assert decision.padding_report(row, "rec").count("its kernel's name: not in this recording") == 2
    row["vocab_padding"].update(kernel="cutlass_75_tensorop_f16_s1688gemm_f16_128x128_tn_align1",
                                padded_kernel="nvjet_hsh_256x128_64x4_2x1_v_bz_TNN")
    report = decision.padding_report(row, "rec")
    assert "cuBLAS ran cutlass_75_tensorop_f16_s1688gemm_f16_128x128_tn_align1" in report
    assert "cuBLAS ran nvjet_hsh_256x128_64x4_2x1_v_bz_TNN" in report
