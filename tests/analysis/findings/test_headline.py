"""The headline of a study: the study in one sentence, the findings
with their evidence, the best point with its interval and the next study, said in at most six
terminal lines, as markdown for MLflow and first in report.html; on hand-built results frames
shaped like the default study (see tests/analysis/stats/test_response_surface_effects.py)."""

from __future__ import annotations

import json
import math
import re
from html.parser import HTMLParser

import pytest
from resultskit import RESPONSE, planted
from scipy import stats

from analysis.findings.headline import Headline
from analysis.report.page import write_report
from analysis.stats.power import replicates_for
from analysis.study_analysis import analyse


def by_point(df, metric=RESPONSE):
    done = df[df["status"] == "finished"]
    return done.groupby("point_id")[metric]


def test_the_study_sentence_names_factors_ranges_design_trials_and_budget():
    top = analyse(planted(-0.02), (RESPONSE,)).headline
    assert top.sentence == (
        "unit varied temperature (0.1 to 0.5) and batch_size (64 to 256) in a full factorial "
        "design: 16 trials, 16 finished, each trained on 30,720 examples."
    )


def test_a_planted_temperature_effect_is_found_with_its_interval_and_the_rest_is_not():
    """knn falls 2 points per doubling of τ; batch size does nothing."""
    top = analyse(planted(-0.02), (RESPONSE,)).headline
    assert len(top.found) == 1
    pattern = (
        r"Doubling temperature lowers probe/knn_top1_h by 2 points \(95% CI [\d.]+ points "
        r"to [\d.]+ points; Holm-adjusted p = "
    )
    assert re.match(pattern, top.found[0])
    assert top.missed == ("batch_size on probe/knn_top1_h",)
    assert top.not_detected[0].startswith(
        "Doubling batch_size: no detectable effect on probe/knn_top1_h (smallest detectable at 80%"
    )


def test_the_best_point_is_the_best_mean_over_replicates_with_its_t_interval():
    df = planted(-0.02)
    means = by_point(df).mean()
    best = means.idxmax()
    values = by_point(df).get_group(best)
    half = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values))
    top = analyse(df, (RESPONSE,)).headline
    assert top.best.startswith(f"Highest probe/knn_top1_h observed at {best} (temperature = 0.1")
    # accuracies are read in percent (analysis.stats.units)
    assert (f"selected among 4 points: mean {means[best] * 100:.1f}% (4 replicates; 95% interval "
            f"{(means[best] - half) * 100:.1f}% to {(means[best] + half) * 100:.1f}%, counting "
            "seeds only") in top.best  # fmt: skip


def test_a_minimised_target_names_the_lowest_point_and_its_own_edge():
    df = planted(-0.02)
    df.loc[df["point_id"] == "p003", RESPONSE] -= 0.01  # p002 and p003 tie otherwise
    df.attrs["target"] = {"metric": RESPONSE, "mode": "min"}
    top = analyse(df, (RESPONSE,)).headline
    assert top.best.startswith("Lowest probe/knn_top1_h observed at p003 (temperature = 0.5")
    assert "temperature at its high end, 0.5; try above it" in top.next_step


def test_an_optimum_at_the_edge_of_the_design_says_to_extend_the_range_there():
    top = analyse(planted(-0.02), (RESPONSE,)).headline
    assert "temperature at its low end, 0.1; try below it" in top.next_step


def test_nothing_detected_says_so_and_plans_the_replicates_that_would_detect_half_as_much():
    df = planted(0.0)
    analysis = analyse(df, (RESPONSE,))
    fit = analysis.fits[RESPONSE]
    assert not fit.findings.beats_mean
    top = analysis.headline
    # the target comes first, said on its own line, not folded into "Not detectable"
    assert top.found == () and top.missed == () and top.not_detected == ()
    assert top.on_target.startswith(f"No factor has a detectable effect on {RESPONSE} (")
    assert top.lines()[1] == top.on_target
    sharpest = min(fit.findings.effects, key=lambda e: e.detectable)
    plan = next(p for p in replicates_for(fit.surface, sharpest.detectable / 2)
                if p.factor == sharpest.factor)  # fmt: skip
    assert plan.replicates_needed > 4
    # --effect takes percentage points for an accuracy, as the headline speaks of them
    points = sharpest.detectable / 2 * 100
    command = f"study power unit --metric {RESPONSE} --effect {points:.3g}"
    expected = f"run {plan.replicates_needed} replicates per point instead of 4 ({command})"
    assert expected in top.next_step


def test_the_terminal_gets_at_most_six_lines_and_counts_what_it_leaves_out():
    top = Headline("s", "The study.", RESPONSE, tuple(f"Finding {i}." for i in range(10)),
                   ("x",), ("a on b",), "Best.", "Go on.")  # fmt: skip
    lines = top.lines()
    assert lines == [
        "The study.", "Found: Finding 0.", "… and 9 more findings: see report.html",
        "Not detectable: a on b (the detectable sizes are in report.html).", "Best.",
        "Next: Go on.",
    ]  # fmt: skip
    short = Headline("s", "The study.", RESPONSE, ("One.",), (), (), None, None)
    assert short.lines() == ["The study.", "Found: One."]
    for df in (planted(-0.02), planted(0.0)):
        assert 2 <= len(analyse(df).headline.lines()) <= 6


def test_the_parent_description_in_mlflow_leads_with_the_findings_then_the_sentence():
    """The parent run's description (study.reporting.parent_note) is the headline's words."""
    from types import SimpleNamespace

    from study.reporting import parent_note

    top = analyse(planted(-0.02), (RESPONSE,)).headline
    parent = SimpleNamespace(data=SimpleNamespace(params={}, tags={}))
    text = parent_note(top, parent)
    assert text.startswith(f"**In short.** Doubling temperature lowers {RESPONSE} by")
    assert "\n\n**Findings.** Doubling temperature lowers" in text
    assert f"\n\n{top.sentence}\n\n" in text
    assert "**Best point.** Highest" in text and "**Next study.**" in text


class _Page(HTMLParser):
    """Ids, links, images, figure captions and the order of the headings of a page."""

    def __init__(self):
        super().__init__()
        self.ids, self.links, self.images, self.order = set(), [], [], []
        self.captions, self._in = [], None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
            self.order.append(attrs["id"])
        if tag == "a" and attrs.get("href", "").startswith("#"):
            self.links.append(attrs["href"][1:])
        if tag == "img":
            self.images.append(attrs["src"])
        if tag in ("figcaption", "pre"):
            self._in = tag
            if tag == "pre":
                self.order.append("pre")

    def handle_endtag(self, tag):
        if tag == self._in:
            self._in = None

    def handle_data(self, data):
        if self._in == "figcaption":
            self.captions.append(data)


@pytest.mark.filterwarnings("ignore")
def test_report_html_opens_with_the_headline_and_renders_the_evidence_card(tmp_path):
    df = planted(-0.02)
    written = write_report(analyse(df), tmp_path)
    text = (tmp_path / "report.html").read_text()
    page = _Page()
    page.feed(text)
    order = page.order
    assert order.index("headline") < order.index("findings") < order.index("toc")
    assert order.index("toc") < order.index("surfaces") < order.index("evidence")
    assert text.index('id="headline"') < text.index("R²")  # findings before statistics
    assert set(page.links) <= page.ids and {"findings", "surfaces", "figures"} <= set(page.links)
    figures = [k for k in written if k.startswith("figure:")]
    assert len(page.images) == len(figures) > 0
    embedded = ("data:image/png;base64,", "data:image/svg+xml;base64,")
    assert all(src.startswith(embedded) for src in page.images)  # offline
    assert "pre" not in order[order.index("evidence") :]  # the card is HTML, not preformatted
    card = text[text.index('id="evidence"') :]
    assert "<table>" in card and '<h3 id="evidence-receiver-job">Receiver job</h3>' in card
    assert 'name="viewport"' in text and "<script" not in text
    assert not re.search(r"""(src|href)=["']?https?:|<link""", text)  # nothing to fetch
    captions = "".join(page.captions)
    assert captions.count(".") >= 2 * len(figures)  # every figure: its name, then what to see


@pytest.mark.filterwarnings("ignore")
def test_study_report_prints_the_findings_before_the_path(tmp_path, monkeypatch):
    """``study report`` (not ``--json``) says the headline's lines first, as ``study run`` ends."""
    import json

    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from analysis.reading.record import rows_table
    from study.cli import app

    df = planted(-0.02)
    meta = {k: v if isinstance(v, str) else json.dumps(v) for k, v in df.attrs.items()}
    pq.write_table(rows_table(df.to_dict("records"), meta), tmp_path / "results.parquet")
    monkeypatch.chdir(tmp_path)  # no record here: the report is written from the file alone
    out = tmp_path / "report"
    done = CliRunner().invoke(app, ["report", "--results", str(tmp_path / "results.parquet"),
                                    "--out", str(out)])  # fmt: skip
    assert done.exit_code == 0, done.output
    lines = json.loads((out / "report.json").read_text())["headline"]["lines"]
    assert done.output.splitlines()[-len(lines) - 1 :] == [*lines, f"wrote {out / 'report.html'}"]
    assert lines[1].startswith("Found: Doubling temperature lowers probe/knn_top1_h by 2 points")
    assert not (tmp_path / "mlflow.db").exists()  # reading a file creates no store


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_trial_left_out_for_a_missing_or_non_finite_target_is_named(bad):
    """A finished trial whose target is NaN or infinite is left out of every fit and of the best
    point, and the headline's count says which."""
    df = planted(-0.02)
    row = df.index[(df["point_id"] == "p001") & (df["replicate"] == 1)][0]
    df.loc[row, RESPONSE] = bad
    top = analyse(df, (RESPONSE,)).headline
    assert top.sentence.endswith(
        "16 trials, 16 finished, each trained on 30,720 examples; 1 left out of the analysis "
        f"of {RESPONSE}, for a missing or non-finite value: p001-r1."
    )
    assert "p001" not in (top.best or "") or "3 replicates" in top.best


def test_when_the_seed_alone_explains_the_response_next_never_asks_for_replicates_it_has():
    """Two replicates per point, the response the seed's alone: the block model reproduces every
    trial. "Replicate the design points" would ask for what the design has; the headline and
    study next say that the seeds decide, and ask for more items or more seeds instead."""
    from resultskit import study


    df = study(lambda tau, batch, r, i: 0.9 + 0.01 * r, replicates=2)
    analysis = analyse(df, (RESPONSE,))
    top = analysis.headline
    words = " ".join(top.lines())
    assert "replicate the design points" not in words and "replicate the points" not in words
    assert "seeds decide the outcome" in (top.next_step or "") + " ".join(top.not_detected) + (
        top.on_target or "")  # fmt: skip
    step = analysis.next_step
    assert step.kind == "none" and "seeds decide the outcome" in step.reason


@pytest.mark.parametrize("lacking", [2, 3])
def test_a_response_too_short_of_finite_values_to_fit_is_named_with_its_count(tmp_path, lacking):
    """A response whose NaNs leave too few values for any model (2 of the 4 trials of a
    two-factor study leave no residual degree of freedom; 3 leave one value) is not dropped in
    silence: the headline's terminal lines, report.html's notes and report.json name it and the
    count."""
    from resultskit import frame

    metric = "probe/knn_top1_z"
    column = [math.nan] * lacking + [0.80, 0.82, 0.78, 0.76][lacking:]
    analysis = analyse(frame(**{metric: column}))
    said = f"{metric}: no finite value in {lacking} of 4 finished trials (missing, NaN or infinite)"
    assert analysis.fits[metric].surface is None
    assert any(f"Not fitted: {said}, too few to fit." in line for line in
               analysis.headline.lines())  # fmt: skip
    write_report(analysis, tmp_path, figures=False)
    page = (tmp_path / "report.html").read_text()
    assert f"{metric} has no finite value in {lacking} of 4 finished trials" in page
    assert "Not fitted:" in page
    report = json.loads((tmp_path / "report.json").read_text())
    assert said + ", too few to fit" in report["headline"]["unfitted"][0]


def test_a_response_no_trial_measured_is_not_said_to_be_short_of_values():
    from resultskit import frame

    analysis = analyse(frame(**{"probe/knn_top1_z": [math.nan] * 4}))
    assert not analysis.headline.unfitted
    assert not any("Not fitted" in line for line in analysis.headline.lines())
