"""The evidence card and release gate, on small hand-built results frames (no files read)."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest
from resultskit import NAN, TRIALS, frame, gate

from analysis.report.evidence.augmentation import AUGMENTATION_INFO
from analysis.report.evidence.candidates import candidate_table, effective_candidates
from analysis.report.evidence.card import SECTION_TITLES, EvidenceCard, evidence_card
from analysis.report.evidence.gate import GATE_ITEMS, GateItem
from analysis.report.evidence.sections import gpu_hours, temperature_table
from analysis.report.evidence.table import Table
from trainables.augment import COMPONENTS


def test_every_augmentation_component_is_classified():
    assert set(AUGMENTATION_INFO) == set(COMPONENTS)
    for name, info in AUGMENTATION_INFO.items():
        assert info.preserves and info.destroys, name
        assert isinstance(info.magnitude(1.0), str) and isinstance(info.magnitude(0.0), str)


# ---- gate items, each both ways
@pytest.mark.parametrize(
    ("checks", "status"),
    [
        ({"info_nce_worked_example": "pass"}, "pass"),
        ({"info_nce_worked_example": "fail: 2.31 != 2.30"}, "fail"),
        ({}, "not measured"),
    ],
)
def test_gate_1_worked_example(checks, status):
    assert gate(frame(checks=checks), 1).status == status


def test_gate_2_candidates():
    assert gate(frame(), 2).status == "pass"
    assert "B=64: 126" in gate(frame(), 2).evidence
    # loss/candidates missing in one trial falls back to 2B - 2 as derived
    assert gate(frame(**{"loss/candidates": [NAN, 510.0, 126.0, 510.0]}), 2).status == "pass"
    gap = {"loss/candidates": [NAN, 510.0, 126.0, 510.0], "derived.negatives_per_anchor": NAN}
    assert gate(frame(**gap), 2).status == "fail"
    bare = frame().drop(columns=["loss/candidates", "derived.negatives_per_anchor"])
    assert gate(bare, 2).status == "not measured"


def test_gate_3_temperature_with_similarity():
    assert gate(frame(), 3).status == "pass"
    assert gate(frame(temperature=[0.1, NAN, 0.5, 0.5]), 3).status == "fail"
    au = frame(objective="align_uniform", lam_t=2.0)
    assert gate(au, 3).status == "pass" and "lam_t = 2" in gate(au, 3).evidence
    assert gate(frame(objective="align_uniform"), 3).status == "fail"  # lam_t NaN
    assert gate(frame().drop(columns=["objective"]), 3).status == "not measured"


def test_gate_4_classified_transformations():
    assert gate(frame(), 4).status == "pass"
    item = gate(frame(augmentation=["crop+warp", "crop", "crop", "crop"]), 4)
    assert item.status == "fail" and "warp" in item.evidence
    assert gate(frame().drop(columns=["augmentation"]), 4).status == "not measured"


def test_gate_5_false_negative_rate():
    assert gate(frame(), 5).status == "pass"
    assert gate(frame(**{"sim/false_negative_rate": [0.7, NAN, 0.8, 0.8]}), 5).status == "fail"
    # a failed trial without metrics does not count against it
    failed = frame(status=["finished", "failed", "finished", "finished"])
    failed.loc[1, "sim/false_negative_rate"] = NAN
    assert gate(failed, 5).status == "pass"
    no_column = frame().drop(columns=["sim/false_negative_rate"])
    assert gate(no_column, 5).status == "not measured"


def test_gates_never_measured_here():
    for number in (6, 8, 10, 12):
        assert gate(frame(), number).status == "not measured"
    assert gate(frame(), 6).evidence == "no hard-negative mining in this study"
    assert "crop+noise+erase" in gate(frame(), 12).evidence


def test_gate_7_both_spaces_probed():
    assert gate(frame(), 7).status == "pass"
    z_less = frame().drop(columns=["probe/knn_top1_z", "probe/linear_top1_z"])
    assert gate(z_less, 7).status == "fail" and "z" in gate(z_less, 7).evidence
    probe_less = z_less.drop(columns=["probe/knn_top1_h", "probe/linear_top1_h"])
    assert gate(probe_less, 7).status == "not measured"


def test_gate_9_multi_positive():
    assert gate(frame(), 9).status == "pass"
    grouped = {"dataset": "toy", "toy_photos_per_item": 4}
    assert gate(frame(**grouped), 9).status == "fail"
    assert gate(frame(**grouped, group_policy="positive"), 9).status == "pass"
    assert gate(frame(**grouped, group_policy="mask"), 9).status == "pass"
    # align_uniform ignores groups: group mates are pushed apart whatever the policy says
    au = frame(**grouped, group_policy="positive", objective="align_uniform", lam_t=2.0)
    assert gate(au, 9).status == "fail"
    # photos per item only makes groups on the toy data
    assert gate(frame(toy_photos_per_item=4), 9).status == "pass"
    assert gate(frame().drop(columns=["toy_photos_per_item"]), 9).status == "not measured"


def test_gate_11_reproducibility_record():
    assert gate(frame(), 11).status == "pass"
    assert gate(frame(seed=[0, None, 0, 0]), 11).status == "fail"
    assert gate(frame().drop(columns=["data_seed"]), 11).status == "not measured"


# ---- tables and numbers
def test_candidate_table():
    table = candidate_table(frame())
    assert table.rows == (
        ("64", "1", "all", "126", "126", "2"), ("256", "1", "all", "510", "510", "2"),
    )  # fmt: skip
    assert candidate_table(frame().drop(columns=["batch_size"])).rows == ()


# B = 64 and 256 over W = 2 workers: all gathers every worker's views (2B - 2), local keeps the
# worker's own B / W sources (2 · 32 - 2 = 62, 2 · 128 - 2 = 254)
SPLIT = {"workers": 2, "negatives": ["all", "all", "local", "local"],
         "loss/candidates": [126.0, 510.0, 62.0, 254.0],
         "derived.negatives_per_anchor": [126, 510, 62, 254]}  # fmt: skip


def test_candidate_table_across_workers():
    table = candidate_table(frame(**SPLIT))
    assert table.rows == (
        ("64", "2", "all", "126", "126", "1"), ("64", "2", "local", "62", "62", "1"),
        ("256", "2", "all", "510", "510", "1"), ("256", "2", "local", "254", "254", "1"),
    )  # fmt: skip
    assert "Measured across devices" in effective_candidates(frame(**SPLIT), {}).caption
    assert "One worker per trial" in effective_candidates(frame(), {}).caption


def test_gate_2_measured_across_devices():
    item = gate(frame(**SPLIT), 2)
    assert item.status == "pass"
    assert "B=64, W=2, negatives local: 62" in item.evidence
    assert "measured across devices" in item.evidence
    assert "no cross-device gather" in gate(frame(), 2).evidence
    # a recorded count the pool cannot hold (local over 2 workers logging the global 2B - 2)
    wrong = SPLIT | {"loss/candidates": [126.0, 510.0, 126.0, 254.0]}
    item = gate(frame(**wrong), 2)
    assert item.status == "fail"
    assert "recorded 126, expected 62" in item.evidence


def test_temperature_table():
    table = temperature_table(frame(), "probe/knn_top1_h")
    assert table.columns == ("τ", "C = 126", "C = 510")
    assert table.rows == (
        ("0.1", "0.900 (n=1)", "0.920 (n=1)"),
        ("0.5", "0.880 (n=1)", "0.860 (n=1)"),
    )


def test_cost_numbers():
    df = frame()  # wall_s 3600 + 1800 + 5400 + 3600 = 14400 s at 0.5 GPU each
    assert gpu_hours(df) == pytest.approx(2.0)
    cost = evidence_card(df).sections["Cost"]
    assert "GPU hours: 2 " in cost and "total 14400.0 s, mean 3600.0 s" in cost
    assert "Compute-matched: all 4 finished trials saw 30720 examples" in cost
    cpu = frame(resources={"cpu": 1.0, "gpu": 0.0})
    assert gpu_hours(cpu) == 0.0 and "0 (CPU-only" in evidence_card(cpu).sections["Cost"]
    assert gpu_hours(frame(resources={})) is None
    # data-parallel: 4 workers of 1 GPU each hold 4 GPUs for each trial's 14400 s in all
    four = frame(resources={"workers": 4, "cpu": 2.0, "gpu": 1.0})
    assert gpu_hours(four) == pytest.approx(16.0)
    assert "(Σ wall_s × 4 workers × 1 GPU / 3600)" in evidence_card(four).sections["Cost"]
    assert "(cpu and gpu per worker)" in evidence_card(four).sections["Cost"]
    assert "GPU hours: not measured" in evidence_card(frame(resources={})).sections["Cost"]
    uneven = evidence_card(frame(examples_seen=[30720.0, 30720.0, 30000.0, 30720.0]))
    assert "FLAG" in uneven.sections["Cost"]


# ---- the card as a whole
def test_markdown_has_every_section_and_gate_line():
    md = evidence_card(frame()).to_markdown()
    for title in SECTION_TITLES:
        assert f"\n## {title}\n" in md
    for number, text in enumerate(GATE_ITEMS, start=1):
        assert f"| {number} | {text} | " in md
    assert md.index("## Receiver job") < md.index("## Source return") < md.index("Release gate")


def test_json_round_trip():
    card = evidence_card(frame())
    data = card.to_json()
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    assert list(data["sections"]) == list(SECTION_TITLES)
    assert data["study"] == "unit" and data["n_trials"] == 4 and len(data["gate"]) == 12
    first = data["sections"]["Effective candidates"]["rows"][0]
    assert first == ["64", "1", "all", "126", "126", "2"]


def test_card_survives_failed_single_and_bare_frames():
    failed = frame(status=["finished", "failed", "killed", "diverged"])
    for col in ("probe/knn_top1_h", "wall_s", "loss/candidates", "z/align"):
        failed.loc[1:, col] = NAN
    single = frame(TRIALS[:1])
    bare = pd.DataFrame({"status": ["failed"]})
    empty = pd.DataFrame()
    for df in (failed, single, bare, empty):
        card = evidence_card(df)
        assert tuple(card.sections) == SECTION_TITLES and len(card.gate) == 12
        json.dumps(card.to_json(), allow_nan=False)
        assert card.to_markdown().count("\n## ") == len(SECTION_TITLES) + 1
    assert {g.status for g in evidence_card(bare).gate} == {"not measured"}
    assert "unfinished" in evidence_card(failed).sections["Cost"]


def test_types_are_frozen_and_checked():
    with pytest.raises(ValueError, match="status"):
        GateItem(1, "x", "maybe", "")
    card = evidence_card(frame())
    with pytest.raises(dataclasses.FrozenInstanceError):
        card.study = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        card.sections["Cost"] = "free"  # type: ignore[index]
    assert isinstance(card.sections["Effective candidates"], Table)
    assert isinstance(card, EvidenceCard)
