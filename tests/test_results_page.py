"""RESULTS.md is what `python -m ladder results-page` writes from results/*.json now (so it cannot go stale), and it
has a section for every recorded GPU with its provenance."""
from __future__ import annotations

import json

import pytest

from ladder import cli, results, results_page


@pytest.fixture(scope="module")
def page() -> str:
    return results_page.page()


def test_the_committed_page_is_what_the_recordings_give(page):
    assert results_page.PAGE.read_text() == page, "RESULTS.md is stale: run `python -m ladder results-page`"


def test_it_names_each_recorded_gpu_with_its_provenance(page):
    recordings = sorted(results.RESULTS_DIR.glob("*.json"))
    assert recordings
    for path in recordings:
        p = json.loads(path.read_text())["provenance"]
        assert f"\n## {p['gpu']}\n" in page
        assert f"`results/{path.name}`: driver {p['driver']}, CUDA {p['cuda']}, torch {p['torch']}, " \
               f"Triton {p['triton']}" in page and p["date"] in page


def test_a_recording_with_model_rows_shows_each_model_and_step(page):
    for path in sorted(results.RESULTS_DIR.glob("*.json")):
        for row in json.loads(path.read_text()).get("model", []):
            assert f"{row['model']}, {row['step']}:" in page and f"{row['ms']:8.3f}" in page


def test_check_says_whether_the_page_is_stale(tmp_path, monkeypatch, capsys):
    assert cli.main(["results-page", "--check"]) == 0
    monkeypatch.setattr(results_page, "PAGE", tmp_path / "RESULTS.md")
    assert cli.main(["results-page", "--check"]) == 1
    assert "stale" in capsys.readouterr().err
