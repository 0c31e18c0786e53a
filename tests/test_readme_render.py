"""The README's support table and gain summary, and docs/evidence/README.md, are what the run records render.

The renderer is scripts/dev/render_evidence.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from scripts.dev import render_evidence as render

ROOT = Path(__file__).resolve().parents[1]


def _copy(tmp_path: Path) -> Path:
    """The README, the records and the index in a scratch root, so a test can change them; the logs
    are links to the real ones."""
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(ROOT / render.RECORDS, tmp_path / render.RECORDS)
    shutil.copy(ROOT / render.INDEX, tmp_path / render.INDEX)
    (tmp_path / render.LOGS).mkdir()
    for log in (ROOT / render.LOGS).iterdir():
        (tmp_path / render.LOGS / log.name).symlink_to(log)
    for record in render.load_records(ROOT):  # logs a record keeps outside the evidence folder
        for log in record.logs:
            if not (tmp_path / log).exists():
                (tmp_path / log).parent.mkdir(parents=True, exist_ok=True)
                (tmp_path / log).symlink_to(ROOT / log)
    return tmp_path


def test_readme_and_index_match_the_records():
    assert render.stale(ROOT) == [], "run: python -m scripts.dev.render_evidence"


def test_a_changed_figure_makes_the_readme_stale(tmp_path):
    root = _copy(tmp_path)
    assert render.stale(root) == []
    record = root / "docs/evidence/records/bench-pair-0.5.15-2026-12-02.toml"
    record.write_text(record.read_text().replace("b1 = 1.49", "b1 = 1.59"))
    assert Path("README.md") in render.stale(root)
    assert "1.59x" in render.rendered(root)[Path("README.md")]


def test_a_hand_edit_inside_a_rendered_part_is_stale(tmp_path):
    root = _copy(tmp_path)
    readme = root / "README.md"
    readme.write_text(readme.read_text().replace("| 0.5.17 |", "| 0.5.17 (edited) |", 1))
    assert render.stale(root) == [Path("README.md")]


def test_prose_outside_the_markers_is_kept(tmp_path):
    root = _copy(tmp_path)
    readme = root / "README.md"
    readme.write_text(readme.read_text() + "\nA line after the rendered parts.\n")
    assert render.rendered(root)[Path("README.md")].endswith("\nA line after the rendered parts.\n")


def test_every_release_row_comes_from_a_record():
    records = render.load_records(ROOT)
    table = render.support_table(records)
    named = {v for r in records for v in r.sglang if r.kind in ("cpu-patch", "cpu-runtime", "gpu-matrix")}
    rows = [line.split("|")[1].strip() for line in table.splitlines()[2:]]
    assert rows == sorted(named, key=render.release_key)
    assert rows.index("0.5.12") < rows.index("0.5.12.post1") < rows.index("0.5.13")


@pytest.mark.parametrize("change, message", [
    (lambda t: t.replace('date = "2026-12-02"\n', ""), "missing date"),
    (lambda t: t.replace('kind = "benchmark"', 'kind = "rumour"'), "kind 'rumour'"),
    (lambda t: t.replace("b1 = 1.49\n", ""), "names a figure it lacks"),
    (lambda t: t.replace("docs/benchmarks.md", "docs/no-such-log.txt"), "does not exist"),
    (lambda t: "claim = 2\n" + t, "unknown field"),
])
def test_a_bad_record_is_refused_with_its_file_named(tmp_path, change, message):
    root = _copy(tmp_path)
    record = root / "docs/evidence/records/bench-pair-0.5.15-2026-12-02.toml"
    record.write_text(change(record.read_text()))
    with pytest.raises(render.RecordError, match=message) as caught:
        render.load_records(root)
    assert "bench-pair-0.5.15-2026-12-02.toml" in str(caught.value)


def test_the_index_lists_every_record_and_every_unclaimed_log():
    records = render.load_records(ROOT)
    index = render.evidence_index(records, ROOT)
    for r in records:
        assert f"[{r.id}](records/{r.id}.toml)" in index
    for log in (ROOT / render.LOGS).iterdir():
        assert f"[{log.name}](logs/{log.name})" in index


def test_a_gpu_record_without_row_counts_says_all_rows_only_when_it_passed():
    record = next(r for r in render.load_records(ROOT) if r.kind == "gpu-matrix" and "rows_passed" not in r.figures
                  and r.verdict == "pass")
    assert "all rows" in render.gpu_cell(record)
    figures = dict(record.figures)
    partial = record.__class__(**{**record.__dict__, "verdict": "partial", "figures": figures})
    assert "all rows" not in render.gpu_cell(partial) and "partial" in render.gpu_cell(partial)
