"""The evidence card's per-class geometry, subgroups, shift tests and source return, and release
gate items 8 and 12, on small hand-built results frames; the report's Source return section.

Coverage follows the trainables.corruption_families contract: gaussian_noise <- noise,
gaussian_blur <- blur, contrast <- color, occlusion <- erase, jpeg <- none; toy vectors
noise <- noise, mean_shift <- none. Accuracies and drops are dyadic fractions, so every mean
below is exact."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from matplotlib.figure import Figure
from resultskit import NAN, TRIALS, frame, gate

from analysis.report.evidence.card import SECTION_TITLES, evidence_card
from analysis.report.evidence.shift import (
    HOLD_UP_DROP,
    FamilyShift,
    invariance_claim,
    shift_drops,
    shift_probe,
)
from analysis.report.evidence.source_return import source_return_row
from analysis.report.evidence.subgroups import subgroup_table
from analysis.report.evidence.table import Table

# Two design points of two replicates: p000 (τ 0.1, B 64) and p001 (τ 0.5, B 256).
_A, _B = TRIALS[0][2:], TRIALS[3][2:]
REPLICATED = (("p000", 0, *_A), ("p000", 1, *_A), ("p001", 0, *_B), ("p001", 1, *_B))
CLEAN = [0.875, 0.75, 0.875, 0.875]  # probe/knn_top1_h of the four trials
# family -> per severity, each trial's drop (clean minus corrupted top-1)
DROPS = {
    "gaussian_noise": ([0, 0, 0, 0], [0.0625, 0.03125, 0, 0.03125]),
    "gaussian_blur": ([0.0625] * 4, [0.125] * 4),
    "jpeg": ([0] * 4, [0] * 4),
    "occlusion": ([0.125, 0.125, 0, 0], [0.125, 0.125, 0, 0]),
}
AUG = "crop+noise+erase"  # covers gaussian_noise and occlusion, not gaussian_blur or jpeg


def shifted(drops=DROPS, clean=CLEAN, leaf="knn_top1_h", df=None, **columns) -> pd.DataFrame:
    """The replicated study with shift-test columns: shift/<family>/s<k>/<leaf> = clean - drop
    and the family's mean over severities."""
    df = frame(REPLICATED, **columns) if df is None else df
    df[f"probe/{leaf}"] = clean
    for family, severities in drops.items():
        for k, drop in enumerate(severities, start=1):
            df[f"shift/{family}/s{k}/{leaf}"] = [c - d for c, d in zip(clean, drop, strict=True)]
        means = [sum(d) / len(d) for d in zip(*severities, strict=True)]
        df[f"shift/{family}/{leaf}"] = [c - m for c, m in zip(clean, means, strict=True)]
    return df


def test_shift_drops_per_family_match_hand_computed_means():
    rows = shift_drops(shifted())
    assert rows == (
        # per-trial family drops 1/32, 1/64, 0, 1/64: mean 1/64; p000 3/128, p001 1/128
        FamilyShift(AUG, "gaussian_noise", ("noise",), True, 4, 4, ((1, 0.0), (2, 0.03125)),
                    0.015625, "p000", 0.0234375),
        FamilyShift(AUG, "gaussian_blur", ("blur",), False, 4, 4, ((1, 0.0625), (2, 0.125)),
                    0.09375, "p000", 0.09375),
        FamilyShift(AUG, "jpeg", (), False, 4, 4, ((1, 0.0), (2, 0.0)), 0.0, "p000", 0.0),
        FamilyShift(AUG, "occlusion", ("erase",), True, 4, 4, ((1, 0.0625), (2, 0.0625)),
                    0.0625, "p000", 0.125),
    )  # fmt: skip
    assert [r.verdict for r in rows] == ["held up", "breaks", "held up", "breaks"]
    assert shift_drops(frame()) == ()  # no shift columns
    assert shift_drops(shifted().drop(columns=["probe/knn_top1_h"])) == ()  # no clean value


def test_held_up_is_judged_on_the_point_mean_over_replicates():
    # p000's replicates drop 3/32 and 0 under occlusion: point mean 3/64 <= 0.05, held up
    drops = {"occlusion": ([0.09375, 0, 0, 0], [0.09375, 0, 0, 0])}
    (row,) = shift_drops(shifted(drops))
    assert row.worst_point == "p000" and row.worst_point_drop == 0.046875 <= HOLD_UP_DROP
    assert row.verdict == "held up"
    assert gate(shifted(drops), 12).status == "pass"


def test_gate_12_fails_when_a_covered_family_breaks():
    item = gate(shifted(), 12)
    assert item.status == "fail"
    assert "not validated: occlusion (crop+noise+erase: 0.125)" in item.evidence
    assert "claimed invariance to gaussian_noise;" in item.evidence
    assert "not covered, breaks: gaussian_blur 0.0938" in item.evidence


def test_gate_12_passes_with_the_claim_limited_to_covered_families_that_held_up():
    drops = {**DROPS, "occlusion": ([0] * 4, [0.03125] * 4)}
    item = gate(shifted(drops), 12)
    assert item.status == "pass"
    assert item.evidence.startswith("every family measured in every finished trial")
    assert "held up at most 0.05" in item.evidence
    assert "crop+noise+erase: claimed invariance to gaussian_noise, occlusion" in item.evidence
    assert "not covered, held up (robustness observed, not claimed): jpeg 0" in item.evidence
    # nothing covered (crop+flip) claims nothing, which is no broader than validated
    plain = gate(shifted(augmentation="crop+flip"), 12)
    assert plain.status == "pass" and "claimed invariance to no tested corruption" in (
        plain.evidence
    )


def test_gate_12_fails_when_shift_tests_are_missing_for_some_trials():
    df = shifted({**DROPS, "occlusion": ([0] * 4, [0] * 4)})
    df.loc[2, [c for c in df.columns if c.startswith("shift/jpeg/")]] = NAN
    item = gate(df, 12)
    assert item.status == "fail" and "jpeg (crop+noise+erase: 3/4 trials)" in item.evidence
    # a diverged trial has no metrics and does not count against the gate
    df["status"] = ["finished", "finished", "diverged", "finished"]
    assert gate(df, 12).status == "pass"


def test_gate_12_not_measured_without_shift_tests_or_augmentation():
    assert gate(frame(), 12).status == "not measured"
    assert "trained with: crop+noise+erase at s = 0.6" in gate(frame(), 12).evidence
    bare = shifted().drop(columns=["augmentation"])
    assert gate(bare, 12).status == "not measured"
    assert "augmentation not recorded" in gate(bare, 12).evidence
    assert {r.covered for r in shift_drops(bare)} == {None}


def test_families_of_another_dataset_are_not_required():
    """Image corruptions for the digits trials, vector shifts for the toy trials."""
    df = frame(REPLICATED, dataset=["digits", "digits", "toy", "toy"],
               augmentation=["crop+noise", "crop+noise", "noise", "noise"])  # fmt: skip
    df = shifted({"gaussian_noise": ([0, 0, NAN, NAN],), "noise": ([NAN, NAN, 0, 0],),
                  "mean_shift": ([NAN, NAN, 0.125, 0.125],)}, df=df)  # fmt: skip
    rows = shift_drops(df)
    assert [(r.augmentation, r.family, r.covered, r.measured, r.trials) for r in rows] == [
        ("crop+noise", "gaussian_noise", True, 2, 2),
        ("noise", "noise", True, 2, 2),
        ("noise", "mean_shift", False, 2, 2),
    ]
    assert gate(df, 12).status == "pass"
    assert "noise: claimed invariance to noise; " in gate(df, 12).evidence
    assert "not covered, breaks: mean_shift 0.125" in gate(df, 12).evidence


def test_shift_probe_follows_a_probe_target_with_shift_columns():
    df = shifted()
    assert shift_probe(df) == "probe/knn_top1_h"
    df.attrs["target"] = {"metric": "probe/knn_top1_z", "mode": "max"}
    assert shift_probe(df) == "probe/knn_top1_h"  # no z shift columns: the default
    df = shifted(df=df, leaf="knn_top1_z", drops={"jpeg": ([0.25] * 4,)})
    assert shift_probe(df) == "probe/knn_top1_z"
    item = gate(df, 12)
    assert item.status == "pass" and "probe/knn_top1_z drop" in item.evidence
    assert "not covered, breaks: jpeg 0.25" in item.evidence


def test_invariance_claim_in_words():
    rows = shift_drops(shifted())
    assert invariance_claim(rows) == {
        AUG: f"{AUG}: claimed invariance to gaussian_noise; covered by training but breaks: "
        "occlusion 0.125; not covered, held up (robustness observed, not claimed): jpeg 0; "
        "not covered, breaks: gaussian_blur 0.0938"
    }


def test_shift_section_table():
    section = evidence_card(shifted()).sections["Shift tests"]
    assert isinstance(section, Table)
    assert section.columns == (
        "training augmentation", "family", "covered by training", "drop s1", "drop s2",
        "mean drop", "worst point: mean drop", "trials", "verdict",
    )  # fmt: skip
    p000 = "p000 (temperature=0.1, batch_size=64)"
    assert section.rows == (
        (AUG, "gaussian_noise", "yes (noise)", "0", "0.0312", "0.0156", f"{p000}: 0.0234",
         "4/4", "held up"),
        (AUG, "gaussian_blur", "no (covered by blur)", "0.0625", "0.125", "0.0938",
         f"{p000}: 0.0938", "4/4", "breaks"),
        (AUG, "jpeg", "no (no augmentation covers it)", "0", "0", "0", f"{p000}: 0", "4/4",
         "held up"),
        (AUG, "occlusion", "yes (erase)", "0.0625", "0.0625", "0.0625", f"{p000}: 0.125", "4/4",
         "breaks"),
    )  # fmt: skip
    assert "Seen and unseen corruptions are kept apart: only covered" in section.caption
    assert "seed 0" not in section.caption and "at most 0.05 at every design point" in (
        section.caption
    )
    assert "Named domain shifts (other datasets, sensors, styles): not measured" in section.caption
    df = shifted()
    df["shift/mean_knn_top1_h"] = [0.8125, 0.6875, 0.8125, 0.8125]
    caption = evidence_card(df).sections["Shift tests"].caption
    assert "shift/mean_knn_top1_h: 0.6875 to 0.8125 (clean 0.75 to 0.875)" in caption
    assert evidence_card(frame()).sections["Shift tests"].startswith("not measured")


# ---- per-class geometry and gate item 8
def with_class_geometry(df: pd.DataFrame, spaces: str = "hz") -> pd.DataFrame:
    for space in spaces:
        df[f"{space}/align_worst_class"] = [0.5, 0.625, 0.375, 0.5]
        df[f"{space}/align_class_spread"] = [0.25, 0.125, 0.125, 0.25]
        df[f"{space}/uniform_worst_class"] = [-1.0, -0.5, -0.75, -1.0]
        df[f"{space}/uniform_class_spread"] = [0.5, 0.25, 0.25, 0.5]
    return df


def test_gate_8_passes_with_per_class_geometry_in_both_spaces():
    item = gate(with_class_geometry(frame()), 8)
    assert item.status == "pass"
    assert item.evidence == (
        "per-class alignment and uniformity recorded in h and z for all 4 finished trials "
        "(h: worst-class alignment 0.375 to 0.625 (spread 0.125 to 0.25), worst-class "
        "uniformity -1 to -0.5 (spread 0.25 to 0.5); z: worst-class alignment 0.375 to 0.625 "
        "(spread 0.125 to 0.25), worst-class uniformity -1 to -0.5 (spread 0.25 to 0.5))"
    )
    diverged = with_class_geometry(frame(status=["finished", "diverged", "finished", "finished"]))
    diverged.loc[1, [c for c in diverged.columns if "_class" in c]] = NAN
    assert gate(diverged, 8).status == "pass"
    flagged = with_class_geometry(frame())
    flagged["z/align_worst_class"] = [0.5, 2.0, 0.375, 0.5]
    item = gate(flagged, 8)
    assert item.status == "pass" and "FLAG: worst-class alignment at or above 2" in item.evidence
    assert "z in 1 trial(s)" in item.evidence


def test_gate_8_fails_when_recorded_for_only_some_trials_or_columns():
    df = with_class_geometry(frame())
    df.loc[3, "z/uniform_class_spread"] = NAN
    item = gate(df, 8)
    assert item.status == "fail" and item.evidence.endswith("missing: z/uniform_class_spread in 1")
    z_only = gate(with_class_geometry(frame(), "z"), 8)
    assert z_only.status == "fail" and "h/align_worst_class in 4" in z_only.evidence


def test_gate_8_not_measured_without_per_class_geometry():
    assert gate(frame(), 8).status == "not measured"
    dead = with_class_geometry(frame(status="failed"))
    assert gate(dead, 8).status == "not measured"  # no finished trial


def test_geometry_section_adds_the_per_class_rows():
    table = evidence_card(with_class_geometry(frame())).sections["Geometry"]
    rows = {r[0]: r[1:] for r in table.rows}
    assert rows["align_worst_class"] == ("0.5", "0.375 to 0.625", "0.5", "0.375 to 0.625")
    assert rows["uniform_class_spread"] == ("0.375", "0.25 to 0.5", "0.375", "0.25 to 0.5")
    assert "*_class_spread the highest minus the lowest class" in table.caption
    assert "FLAG" not in table.caption
    plain = evidence_card(frame()).sections["Geometry"]
    assert "align_worst_class" not in {r[0] for r in plain.rows}
    assert "per-class alignment and uniformity: not measured" in plain.caption


# ---- subgroups
def test_subgroup_table_per_probe():
    df = frame()  # probe/knn_top1_h 0.90, 0.92, 0.88, 0.86
    df["probe/knn_top1_h_worst_class"] = [0.5, 0.75, 0.625, 0.5]
    df["probe/knn_top1_h_class_gap"] = [0.25, 0.125, 0.125, 0.5]
    df["probe/linear_top1_z_worst_class"] = [0.75] * 4
    table = subgroup_table(df)
    assert table.columns == ("probe", "overall", "worst class", "class gap")
    assert table.rows == (
        ("probe/knn_top1_h", "0.89 (0.86 to 0.92)", "0.5938 (0.5 to 0.75)", "0.25 (0.125 to 0.5)"),
        ("probe/linear_top1_z", "0.845 (0.83 to 0.86)", "0.75 (0.75)", "n/a"),
    )
    section = evidence_card(df).sections["Subgroups"]
    assert section.rows == table.rows
    assert "Largest class gap: 0.5 (probe/knn_top1_h) at p003 (temperature=0.5, " in (
        section.caption
    )
    assert "Per-group retrieval: no groups in the data." in section.caption
    assert "Per-class alignment and uniformity: not measured." in section.caption


def test_subgroups_with_groups_and_without_any_per_class_metric():
    grouped = frame(dataset="toy", toy_photos_per_item=4, group_policy="positive")
    grouped["probe/knn_top1_h_worst_class"] = [0.5] * 4
    assert "Per-group retrieval: not measured (grouped data" in (
        evidence_card(grouped).sections["Subgroups"].caption
    )
    grouped["probe/knn_top1_h_worst_group"] = [0.25] * 4
    grouped["probe/knn_top1_h_group_gap"] = [0.625, 0.75, 0.625, 0.5]
    section = evidence_card(grouped).sections["Subgroups"]
    assert section.columns == ("probe", "overall", "worst class", "worst group", "group gap")
    assert "Largest group gap: 0.75" in section.caption
    assert evidence_card(frame()).sections["Subgroups"].startswith("not measured")
    geometry_only = evidence_card(with_class_geometry(frame())).sections["Subgroups"]
    assert geometry_only.startswith("Per-class retrieval: not measured")
    assert "see Geometry" in geometry_only


# ---- source return
def artifact() -> pd.DataFrame:
    """Two anchors: anchor 0 (class 3) has a same-class hardest negative below its positive;
    anchor 1 (class 5) has a different-class negative above its positive."""
    rows = [
        (0, 3, "positive", 10, 3, 0.75, False),
        (0, 3, "negative_1", 11, 3, 0.5, True),
        (0, 3, "negative_2", 12, 1, 0.25, False),
        (0, 3, "negative_3", 13, 2, 0.125, False),
        (1, 5, "positive", 20, 5, 0.5, False),
        (1, 5, "negative_1", 21, 2, 0.625, False),
        (1, 5, "negative_2", 22, 5, 0.25, True),
        (1, 5, "negative_3", 23, 7, 0.0, False),
    ]
    columns = ["anchor", "anchor_label", "role", "index", "label", "similarity", "false_negative"]
    return pd.DataFrame(rows, columns=columns)


def test_source_return_row_from_an_artifact_table():
    assert source_return_row("best point p000", artifact()) == (
        "best point p000", "2", "0.625 (0.5 to 0.75)", "0.5625 (0.5 to 0.625)", "1/2", "2/6",
        "1/2",
    )  # fmt: skip
    as_text = artifact().assign(false_negative=lambda t: t["false_negative"].astype(str))
    assert source_return_row("x", as_text)[5:] == ("2/6", "1/2")  # "True"/"False" from a CSV
    assert source_return_row("x", None)[1] == "panel only (table not passed)"
    assert source_return_row("x", artifact().drop(columns=["similarity"]))[1] == (
        "unreadable: no similarity column"
    )


def test_source_return_section_says_measured_only_when_examples_are_passed():
    df = frame()
    assert evidence_card(df).sections["Source return"].startswith("not measured")
    assert evidence_card(df, source_return={}).sections["Source return"].startswith("not measured")
    examples = {"best point p000": artifact(), "worst point p003": None}
    section = evidence_card(df, source_return=examples).sections["Source return"]
    assert [r[0] for r in section.rows] == ["best point p000", "worst point p003"]
    assert "false negative" in section.caption


def test_full_card_with_every_new_measurement_is_json_clean():
    df = with_class_geometry(shifted())
    df["probe/knn_top1_h_worst_class"] = [0.5] * 4
    card = evidence_card(df, source_return={"best": artifact()})
    data = card.to_json()
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    assert list(data["sections"]) == list(SECTION_TITLES)
    for title in ("Geometry", "Shift tests", "Subgroups", "Source return"):
        assert not card.to_markdown().split(f"## {title}\n\n")[1].startswith("not measured")


# ---- the report's Source return section
@pytest.mark.filterwarnings("ignore")
def test_report_embeds_the_source_return_panels(tmp_path):
    from analysis.report.page import write_report
    from analysis.study_analysis import analyse

    png = tmp_path / "panel.png"
    Figure(figsize=(2, 1)).savefig(png)
    label = "best point p000 (τ=0.1, B=64)"
    panels = {label: png, "worst point p003": tmp_path / "gone.png"}
    out = tmp_path / "report"
    # without figures: the sections and the panels are the same, drawing took most of its time
    written = write_report(analyse(frame(), ("probe/knn_top1_h",)), out, panels=panels,
                           source_return={label: artifact()}, figures=False)  # fmt: skip
    page = written["report.html"].read_text()
    toc = [page.index(f'href="#{anchor}"') for anchor in ("figures", "source-return", "evidence")]
    assert toc == sorted(toc)
    section = page[page.index('<h2 id="source-return">') : page.index('<h2 id="evidence">')]
    assert section.count("<img") == 1 and 'alt="source return: best point p000' in section
    assert "false negative" in section and "Panel file not found" in section
    assert written[f"source_return:{label}"].read_bytes() == png.read_bytes()
    card = json.loads(written["evidence.json"].read_text())["sections"]["Source return"]
    assert card["rows"] == [[label, "2", "0.625 (0.5 to 0.75)", "0.5625 (0.5 to 0.625)",
                             "1/2", "2/6", "1/2"]]  # fmt: skip
    plain = write_report(analyse(frame(), ("probe/knn_top1_h",)), tmp_path / "plain", figures=False)
    page = plain["report.html"].read_text()
    assert 'id="source-return"' not in page and 'href="#source-return"' not in page
    assert not any(k.startswith("source_return:") for k in plain)
