"""report.html a reader can navigate: every section in the contents, an index of the figures
with one line each, alt text that says what a figure plots, a table of the trials, no contours
for a model that does not beat the mean, and a page under 1 MB. Read from the HTML a browser
gets (tests/kits/reportkit.py), on the default study's hand-built results with every figure kind."""

from __future__ import annotations

import pytest
from matplotlib.figure import Figure
from reportkit import MAX_BYTES, ReportPage, navigation_problems
from resultskit import add_class_geometry, add_shift, default_frame, default_history

from analysis.report.evidence.card import SECTION_TITLES
from analysis.report.page import write_report
from analysis.report.plots import title
from analysis.study_analysis import analyse

PANEL = "best point p000 (temperature = 0.1, batch_size = 64)"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """(analysis, written, page) of the default study's results with per-class geometry, shift
    tests, histories and a source-return panel: every section and figure kind."""
    folder = tmp_path_factory.mktemp("report")
    df = add_shift(add_class_geometry(default_frame()))
    png = folder / "panel.png"
    Figure(figsize=(4, 2)).savefig(png)
    analysis = analyse(df)
    written = write_report(analysis, folder / "out", default_history(), panels={PANEL: png})
    return analysis, written, ReportPage(written["report.html"].read_text())


@pytest.mark.filterwarnings("ignore")
def test_the_report_is_navigable_and_under_a_megabyte(report):
    _, written, _ = report
    stems = {k.split(":", 1)[1] for k in written if k.startswith("figure:")}
    assert navigation_problems(written["report.html"], stems) == []
    assert written["report.html"].stat().st_size < MAX_BYTES


@pytest.mark.filterwarnings("ignore")
def test_the_contents_list_every_section_with_the_evidence_cards(report):
    _, _, page = report
    listed = [text for _, text in page.contents]
    for section in ("Findings", "Baselines", "Response surfaces", "Trials", "Figures",
                    "Figure index", "Source return", "Evidence card", "Release gate",
                    *SECTION_TITLES):  # fmt: skip
        assert section in listed, section
    assert listed.count("Source return") == 2  # the panels' section and the card's
    assert len({anchor for anchor, _ in page.contents}) == len(page.contents)
    assert not any("seed 0" in text or "§" in text for text in listed)


@pytest.mark.filterwarnings("ignore")
def test_every_figure_has_one_index_line_and_alt_text_that_says_what_it_plots(report):
    _, written, page = report
    names = [k.split(":", 1)[1] for k in written if k.startswith("figure:")]
    assert len(names) >= 15 and {"shift_knn", "class_spread_z", "trajectories_z"} <= set(names)
    index = dict(page.index)
    for name in names:
        assert index[f"figure-{name}"] == title(name)
    assert index["source-return-1"] == f"Source return: {PANEL}"
    assert len(page.index) == len(page.figures) == len(page.images) == len(names) + 1
    alts = {image.figure: image.alt for image in page.images}
    for name in names:
        assert alts[f"figure-{name}"] == title(name) and name not in alts[f"figure-{name}"]
    assert alts["figure-plane_z"].startswith("Alignment against uniformity of every trial")
    assert all(i.src.startswith(("data:image/png;base64,", "data:image/svg+xml;base64,"))
               for i in page.images)  # fmt: skip


@pytest.mark.filterwarnings("ignore")
def test_the_trials_table_has_a_row_per_trial_rounded_with_units(report):
    analysis, _, page = report
    df = analysis.results
    assert len(page.trial_rows) == len(df) == 8
    headers = page.trial_headers
    assert headers[:5] == ["point_id", "replicate", "status", "temperature", "batch_size"]
    assert "examples seen" in headers and "probe/knn_top1_h (%)" in headers
    assert "z/align" in headers and "z/uniform" in headers
    first = dict(zip(headers, page.trial_rows[0], strict=True))
    assert first["point_id"] == "p000" and first["replicate"] == "0"
    assert first["status"] == "finished" and first["examples seen"] == "30,720"
    assert first["probe/knn_top1_h (%)"] == "97.5"  # 0.9750 as a percentage, one decimal
    assert first["z/align"] == "0.4352"


@pytest.mark.filterwarnings("ignore")
def test_no_contours_where_the_model_does_not_beat_the_mean(report):
    analysis, written, _ = report
    text = written["report.html"].read_text()
    flat, beats = [], []
    for response, fit in analysis.fits.items():
        if fit.findings is None:
            continue
        (beats if fit.findings.beats_mean else flat).append(response)
        slug = response.replace("/", "_")
        drawn = any(k.startswith(f"figure:contours_{slug}_") for k in written)
        assert drawn == fit.findings.beats_mean, response
    assert flat and beats  # both cases occur in this study
    note = text[text.index(">Response-surface contours</h3>") :]
    assert note.startswith(">Response-surface contours</h3><p>No contours for ")
    assert all(r in note[: note.index("</p>")] for r in flat)
