"""What a T4 (or A100) student would see, as a model from the datasheet (ladder.roofline.gpu_model)."""
import pytest

import kernels.attention as at
import kernels.matmul as mm
import kernels.vector_add as va
from ladder import roofline


def _rows(text):
    return {line.split()[0]: line for line in text.splitlines()[2:]}


def test_t4_matmul_model_says_what_runs_where():
    text = roofline.gpu_model(mm.PROBLEM, (4096, 4096, 4096), "T4")
    assert text.startswith("model, not a measurement: T4 (sm_75) from its datasheet: 320 GB/s")
    rows = _rows(text)
    # 4096³ fp16: 137.4 GFLOP at 65 TFLOP/s on the tensor cores, at 8.1 on the CUDA cores
    assert "tensor cores        2.114            65.0" in rows["cuda:4_tensor_core"]
    assert "no cp.async: runs a register-staged double buffer" in rows["cuda:5_pipelined"]
    assert "CUDA cores         16.968" in rows["triton:6_autotuned"] and "tl.dot on CUDA cores" in rows["triton:6_autotuned"]
    assert "N/A: needs wgmma" in rows["cuda:7_wgmma"] and "N/A: needs tma" in rows["triton:7_tma_persistent"]
    for hopper_only in ("8_tma_warp_specialized", "9_persistent", "10_cluster_multicast", "11_tma_store", "12_autotuned"):
        assert "N/A: needs wgmma" in rows[f"cuda:{hopper_only}"]
    assert "tensor cores" in rows["torch:cublas"]


def test_on_an_a100_triton_uses_the_tensor_cores_and_flash_attention_runs():
    rows = _rows(roofline.gpu_model(mm.PROBLEM, (4096, 4096, 4096), "A100"))
    assert "tensor cores" in rows["triton:6_autotuned"] and "as on any GPU" in rows["cuda:5_pipelined"]
    rows = _rows(roofline.gpu_model(at.PROBLEM, (4, 32, 4096, 64, 0), "A100"))
    assert "N/A" not in rows["torch:sdpa_flash"]
    rows = _rows(roofline.gpu_model(at.PROBLEM, (4, 32, 4096, 64, 0), "T4"))
    assert "N/A: needs flash_attention" in rows["torch:sdpa_flash"]


def test_vector_add_is_bound_by_dram_everywhere():
    rows = _rows(roofline.gpu_model(va.PROBLEM, (100_000_000,), "T4"))
    # 3 x 2 bytes x 1e8 at 320 GB/s
    assert all(" DRAM                1.875" in row for row in rows.values())


def test_an_unknown_gpu_is_named():
    with pytest.raises(ValueError, match="no datasheet row matches 'Z9'"):
        roofline.gpu_model(va.PROBLEM, (10,), "Z9")


def test_a_rung_that_moves_more_than_the_minimum_is_modelled_at_its_own_bytes():
    from ladder.lessons.l04_attention import attention_traffic_bytes
    rows = _rows(roofline.gpu_model(at.PROBLEM, (4, 32, 4096, 64, 0), "T4", moved=attention_traffic_bytes))
    # rung 1's 51.81 GB (the score matrix written twice, read four times) at 320 GB/s; the fused rungs unchanged
    assert " DRAM              161.900" in rows["triton:1_naive"]
    assert "CUDA cores         67.871" in rows["triton:3_fused"]
