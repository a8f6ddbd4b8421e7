"""Response-surface and fractional designs against published tables.

Sources, copied by hand into the tables below:

* NIST/SEMATECH e-Handbook of Statistical Methods, 5.3.3.6.1 "Central Composite Designs"
  (https://www.itl.nist.gov/div898/handbook/pri/section3/pri3361.htm): Table 3.22 (ccf has
  alpha = 1; a cci is the ccc with every level divided by alpha), Table 3.23 (rotatable alpha)
  and the two-factor rotatable design of its orthogonal-blocking example.
* The same, 5.3.3.6.3 "Comparisons of Response Surface Designs"
  (https://www.itl.nist.gov/div898/handbook/pri/section3/pri3363.htm): Table 3.24 (coded
  three-factor ccc and ccf, 6 centre runs; Box-Behnken, 3 centre runs), Table 3.25 (ccc and cci
  factor settings, low 10 and high 20) and Table 3.26 (ccf and Box-Behnken settings).
* NIST Dataplot's index of minimal resolution-IV designs
  (https://www.itl.nist.gov/div898/software/dataplot/text/DEXRES4.TXT).
* Montgomery, Design and Analysis of Experiments (8th ed.), §8.4-8.5: the 2^(5-2) design with
  I = ABD = ACE and the 2^(7-4) design with D = AB, E = AC, F = BC, G = ABC.

Designs are compared as multisets of rows within each role (factorial, axial, edge, centre): the
tables list the rows in Yates order, the project varies the first factor slowest.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from search_spaces.designs import (
    alias_structure,
    bb_coded,
    build_design,
    ccd_alpha,
    ccd_coded,
    orthogonal_alpha,
    rotatable_alpha,
)
from search_spaces.spec import StudyError, parse_spec
from trainables.text import load_yaml

# --- NIST 5.3.3.6.3, Table 3.25: CCC, three factors at 10 (low) and 20 (high), 6 centre runs ---
NIST_CCC_3 = [
    (10, 10, 10), (20, 10, 10), (10, 20, 10), (20, 20, 10),
    (10, 10, 20), (20, 10, 20), (10, 20, 20), (20, 20, 20),
    (6.6, 15, 15), (23.4, 15, 15), (15, 6.6, 15), (15, 23.4, 15), (15, 15, 6.6), (15, 15, 23.4),
    *[(15, 15, 15)] * 6,
]  # fmt: skip
# Table 3.25, CCI. The page prints row 7 as (12, 12, 18), a repeat of row 5; a 2^3 factorial
# holds each corner once and the CCC beside it reads (10, 20, 20), so row 7 is (12, 18, 18).
NIST_CCI_3 = [
    (12, 12, 12), (18, 12, 12), (12, 18, 12), (18, 18, 12),
    (12, 12, 18), (18, 12, 18), (12, 18, 18), (18, 18, 18),
    (10, 15, 15), (20, 15, 15), (15, 10, 15), (15, 20, 15), (15, 15, 10), (15, 15, 20),
    *[(15, 15, 15)] * 6,
]  # fmt: skip
# Table 3.26, CCF (6 centre runs) and Box-Behnken (3 centre runs).
NIST_CCF_3 = [
    (10, 10, 10), (20, 10, 10), (10, 20, 10), (20, 20, 10),
    (10, 10, 20), (20, 10, 20), (10, 20, 20), (20, 20, 20),
    (10, 15, 15), (20, 15, 15), (15, 10, 15), (15, 20, 15), (15, 15, 10), (15, 15, 20),
    *[(15, 15, 15)] * 6,
]  # fmt: skip
NIST_BB_3 = [
    (10, 10, 15), (20, 10, 15), (10, 20, 15), (20, 20, 15),
    (10, 15, 10), (20, 15, 10), (10, 15, 20), (20, 15, 20),
    (15, 10, 10), (15, 20, 10), (15, 10, 20), (15, 20, 20),
    *[(15, 15, 15)] * 3,
]  # fmt: skip
# --- NIST 5.3.3.6.1: the rotatable two-factor CCC (alpha 1.414) with 4 centre runs, blocks merged
NIST_CCC_2 = [
    (-1, -1), (1, -1), (-1, 1), (1, 1), (0, 0), (0, 0),
    (-1.414, 0), (1.414, 0), (0, -1.414), (0, 1.414), (0, 0), (0, 0),
]  # fmt: skip
ROLES_CCD_3 = ["factorial"] * 8 + ["axial"] * 6 + ["center"] * 6


def _settings(coded: np.ndarray, low: float = 10, high: float = 20) -> np.ndarray:
    """Coded units -> factor settings on a linear scale (NIST's worksheets)."""
    return (low + high) / 2 + coded * (high - low) / 2


def _same_rows(got: np.ndarray, want: list[tuple], tol: float) -> None:
    """Equal as multisets of rows, within the table's printed rounding."""
    assert len(got) == len(want)
    got_sorted = sorted(tuple(float(v) for v in row) for row in got)
    want_sorted = sorted(tuple(float(v) for v in row) for row in want)
    np.testing.assert_allclose(np.array(got_sorted), np.array(want_sorted), atol=tol)


def _split(rows: list[tuple], roles: list[str]) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    for row, role in zip(rows, roles, strict=True):
        out.setdefault(role, []).append(row)
    return out


# ---------------------------------------------------------------------------------------------
# central composite and Box-Behnken against NIST
# ---------------------------------------------------------------------------------------------
def test_rotatable_alpha_equals_nist_table_3_23():
    assert [round(rotatable_alpha(k), 3) for k in (2, 3, 4)] == [1.414, 1.682, 2.000]


@pytest.mark.parametrize(
    ("face", "table", "tol"),
    [("ccc", NIST_CCC_3, 0.05), ("cci", NIST_CCI_3, 0.05), ("ccf", NIST_CCF_3, 1e-12)],
)
def test_three_factor_ccd_equals_nist_tables_3_25_and_3_26(face, table, tol):
    # CCC settings are printed to 0.1 (6.6 for 6.59), CCI settings to integers (12 for 12.03)
    alpha = ccd_alpha(3, face, "rotatable", 6)
    coded, roles = ccd_coded(3, face, alpha, 6)
    assert roles == ROLES_CCD_3
    got = _split([tuple(r) for r in _settings(coded)], roles)
    want = _split(table, ROLES_CCD_3)
    for role in ("factorial", "axial", "center"):
        _same_rows(np.array(got[role]), want[role], tol)


def test_three_factor_coded_ccc_and_ccf_equal_nist_table_3_24():
    corners = [(x1, x2, x3) for x3 in (-1, 1) for x2 in (-1, 1) for x1 in (-1, 1)]

    def axial(a: float) -> list[tuple]:
        return [(-a, 0, 0), (a, 0, 0), (0, -a, 0), (0, a, 0), (0, 0, -a), (0, 0, a)]

    centre = [(0, 0, 0)] * 6
    coded, _ = ccd_coded(3, "ccc", rotatable_alpha(3), 6)
    _same_rows(coded, corners + axial(1.682) + centre, 5e-4)  # printed to 3 decimals
    ccf, _ = ccd_coded(3, "ccf", 1.0, 6)
    _same_rows(ccf, corners + axial(1) + centre, 1e-12)


@pytest.mark.parametrize("face", ["ccc", "cci", "ccf"])
def test_two_factor_ccd_equals_nist_5_3_3_6_1(face):
    # the published ccc; cci divides it by alpha, ccf puts the axial points at ±1 (Table 3.22)
    alpha = ccd_alpha(2, face, "rotatable", 4)
    coded, roles = ccd_coded(2, face, alpha, 4)
    published = np.array(NIST_CCC_2, dtype=float)
    if face == "cci":
        published = published / 1.414
    elif face == "ccf":
        published = np.where(np.abs(published) > 1, np.sign(published), published)
    _same_rows(coded, [tuple(r) for r in published], 1e-3)
    assert Counter(roles) == {"factorial": 4, "axial": 4, "center": 4}


def test_box_behnken_equals_nist_table_3_26():
    coded, roles = bb_coded(3, 3)
    assert roles == ["edge"] * 12 + ["center"] * 3
    _same_rows(_settings(coded), NIST_BB_3, 1e-12)


def test_orthogonal_alpha_makes_the_quadratic_columns_orthogonal():
    for k, center in [(2, 1), (2, 5), (3, 3), (4, 6)]:
        alpha = orthogonal_alpha(k, center)
        coded, _ = ccd_coded(k, "ccc", alpha, center)
        squares = coded**2 - (coded**2).mean(axis=0)
        gram = squares.T @ squares
        assert np.allclose(gram - np.diag(np.diag(gram)), 0, atol=1e-9)
    assert orthogonal_alpha(2, 1) == pytest.approx(1.0)  # Myers et al.'s table: k = 2, one centre
    assert orthogonal_alpha(3, 1) == pytest.approx(1.215, abs=5e-4)  # k = 3, one centre


# ---------------------------------------------------------------------------------------------
# fractional factorials: defining relation, aliases, resolution
# ---------------------------------------------------------------------------------------------
def _fractional(generators: str) -> dict:
    from pydoe import fracfact

    names = [f"f{i}" for i in range(len(generators.split()))]
    return alias_structure(fracfact(generators), names)


def test_2_5_2_alias_structure_equals_montgomery():
    structure = _fractional("a b c ab ac")
    assert structure["defining_relation"] == ["I", "ABD", "ACE", "BCDE"]
    assert structure["resolution"] == 3
    assert structure["aliases"] == [
        "A = BD = CE", "B = AD", "C = AE", "D = AB", "E = AC", "BC = DE", "BE = CD",
    ]  # fmt: skip


def test_2_7_4_alias_structure_equals_montgomery():
    structure = _fractional("a b c ab ac bc abc")
    published = (
        "I = ABD = ACE = BCF = ABCG = BCDE = ACDF = CDG = ABEF = BEG = AFG = DEF = ADEG = BDFG"
        " = CEFG = ABCDEFG"
    )
    assert set(structure["defining_relation"]) == set(published.split(" = "))
    assert structure["resolution"] == 3
    chains = {frozenset(c.split(" = ")) for c in structure["aliases"]}
    assert chains == {
        frozenset(c.split(" = "))
        for c in ["A = BD = CE = FG", "B = AD = CF = EG", "C = AE = BF = DG", "D = AB = CG = EF",
                  "E = AC = BG = DF", "F = BC = AG = DE", "G = CD = BE = AF"]
    }  # fmt: skip


@pytest.mark.parametrize(
    "generators",
    ["a b c d abc bcd", "a b c d abc bcd acd", "a b c d bcd acd abc abd"],  # NIST's 6, 7, 8
)
def test_nist_minimal_resolution_iv_designs_have_resolution_4(generators):
    assert _fractional(generators)["resolution"] == 4


def test_negative_generator_signs_the_word():
    structure = _fractional("a b c -ab ac")
    assert structure["defining_relation"][:3] == ["I", "-ABD", "ACE"]
    assert structure["aliases"][0] == "A = -BD = CE"


# ---------------------------------------------------------------------------------------------
# through the study file: defaults, seeds, keys, plan
# ---------------------------------------------------------------------------------------------
RSM = """
study: rsm
trial: {{dataset: digits, budget_examples: 1536}}
factors:
  temperature: {{range: [0.05, 0.5], scale: log}}
  base_lr: {{range: [1e-4, 1e-3], scale: log}}
  aug_strength: {{range: [0.4, 1.0]}}
design: {design}
"""


def _spec(design: str, text: str = RSM):
    return parse_spec(load_yaml(text.format(design=design)), "rsm.yaml")


def test_ccd_defaults_give_pure_error_with_distinct_centre_seeds():
    s = _spec("{kind: central_composite, face: ccc, replicates: 2, seed: 7}")
    assert s.design.alpha == "rotatable" and s.design.center == 3
    design = build_design(s)
    assert design.structure["alpha"] == pytest.approx(1.682, abs=5e-4)
    centre = [t for t in design.trials if t.role == "center"]
    assert len(centre) == 3 * 2
    assert sorted(t.seed for t in centre) == list(range(7, 13))  # seed + c * 2 + r, all distinct
    others = [t for t in design.trials if t.role != "center"]
    assert {(t.replicate, t.seed) for t in others} == {(0, 7), (1, 8)}  # common random numbers
    keys = [t.key for t in design.trials]
    assert len(set(keys)) == len(keys)
    assert len({t.run_name for t in design.trials}) == len(keys)
    again = build_design(_spec("{kind: central_composite, face: ccc, replicates: 2, seed: 7}"))
    assert [(t.key, t.seed) for t in again.trials] == [(t.key, t.seed) for t in design.trials]


def test_ccf_keeps_alpha_one_and_alpha_reads_numbers_and_words():
    assert _spec("{kind: central_composite}").design.alpha == 1.0
    assert _spec("{kind: central_composite, face: cci}").design.alpha == "rotatable"
    s = _spec("{kind: central_composite, face: ccc, alpha: 1.5, center: 2}")
    assert s.design.alpha == 1.5 and type(s.design.alpha) is float
    assert build_design(s).structure["alpha"] == 1.5
    assert _spec("{kind: central_composite, face: ccc, alpha: Orthogonal}").design.alpha == (
        "orthogonal"
    )
    again = parse_spec(s.canonical())
    assert again.sha == s.sha and again.design.alpha == 1.5


def test_box_behnken_through_the_study_file():
    design = build_design(_spec("{kind: box_behnken, center: 4}"))
    assert Counter(t.role for t in design.trials) == {"edge": 12, "center": 4}
    assert len({t.seed for t in design.trials if t.role == "center"}) == 4


def test_options_for_other_kinds_leave_old_fingerprints_alone():
    s = _spec("{kind: full_factorial}", RSM.replace("range: [0.4, 1.0]", "levels: [0.4, 1.0]")
              .replace("range: [0.05, 0.5]", "levels: [0.05, 0.5]")
              .replace("range: [1e-4, 1e-3]", "levels: [1e-4, 1e-3]"))  # fmt: skip
    assert "alpha" not in s.canonical()["design"] and "center" not in s.canonical()["design"]
    import hashlib

    # baselines, goals and confirms change no trial: studies recorded before them keep their
    # fingerprint
    data = {k: v for k, v in s.model_dump(mode="json").items()
            if k not in ("description", "baselines", "goals", "confirms")}  # fmt: skip
    for option in ("alpha", "center", "points", "objectives", "sampler"):
        data["design"].pop(option)
    data["resources"].pop("workers")  # neither had studies recorded before resources.workers
    data["resources"].pop("memory")  # nor before resources.memory (unset: left out)
    assert s.sha == hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


@pytest.mark.parametrize(
    ("design", "field", "shown"),
    [
        ("{kind: central_composite, face: ccc, alpha: -1}", "design.alpha", "-1"),
        ("{kind: central_composite, face: ccc, alpha: 0.5}", "design.alpha", "0.5"),
        ("{kind: central_composite, face: ccc, alpha: rotatble}", "design.alpha", "rotatble"),
        ("{kind: central_composite, face: ccc, alpha: true}", "design.alpha", "True"),
        ("{kind: central_composite, face: ccf, alpha: 1.5}", "design.alpha", "ccf"),
        ("{kind: central_composite, center: -2}", "design.center", "-2"),
        ("{kind: central_composite, center: 0}", "design.center", "0"),
        ("{kind: box_behnken, center: 1.5}", "design.center", "1.5"),
        ("{kind: full_factorial, alpha: rotatable}", "design.alpha", "central_composite"),
        ("{kind: latin_hypercube, samples: 4, center: 3}", "design.center", "box_behnken"),
        ("{kind: box_behnken, alpha: 1.5}", "design.alpha", "box_behnken"),
    ],
)
def test_bad_design_options_are_refused_naming_field_and_value(design, field, shown):
    with pytest.raises(StudyError) as err:
        build_design(_spec(design))
    assert field in str(err.value) and shown in str(err.value)


def test_box_behnken_needs_three_numeric_factors():
    two = RSM.replace("  aug_strength: {{range: [0.4, 1.0]}}\n", "")
    with pytest.raises(StudyError, match=r"design.kind: box_behnken needs at least 3 numeric"):
        build_design(_spec("{kind: box_behnken}", two))


def test_plan_json_shows_aliases_and_resolution(tmp_path):
    text = """
study: ff
trial: {dataset: digits, budget_examples: 1536}
factors:
  temperature: {levels: [0.1, 0.5]}
  aug_strength: {levels: [0.5, 1.0]}
  uniform_t: {levels: [1.0, 2.0]}
  base_lr: {levels: [0.001, 0.01]}
  weight_decay: {levels: [0.0, 0.0001]}
design: {kind: fractional_factorial, generators: "a b c ab ac"}
"""
    path = tmp_path / "ff.yaml"
    path.write_text(text)
    plan = [sys.executable, "-m", "study.cli", "plan", str(path)]
    data = json.loads(subprocess.run([*plan, "--json"], capture_output=True, text=True,
                                     check=True).stdout)  # fmt: skip
    structure = data["structure"]
    assert structure["letters"]["A"] == "temperature" and structure["resolution"] == 3
    assert structure["defining_relation"] == ["I", "ABD", "ACE", "BCDE"]
    assert "BC = DE" in structure["aliases"]
    shown = subprocess.run(plan, capture_output=True, text=True, check=True).stdout
    assert "defining relation I = ABD = ACE = BCDE" in shown and "resolution III" in shown


# The shipped studies' fingerprints as recorded before goals and design.points existed: a new
# option must leave them alone, or every recorded study would be refused as changed on resume.
SHIPPED_SHAS = {
    "align_uniform_lam_t.yaml": "7370b5b8fab9bf8e",
    "cifar10_tau_batch_aug.yaml": "bbe9199e5069dbcf",
    "default.yaml": "6618997132c18f06",
    "digits_tau_batch.yaml": "76ba3b475e3f95e3",
    # re-based on the recipe study's recipe, and renamed fashion-mnist-tau-batch-recipe with it:
    # a changed study, so a new fingerprint, and no record of the old study is refused
    "fashion_mnist_tau_batch.yaml": "5cc137b6451c69da",
    "toy_phase_diagram.yaml": "ff49d23903929db8",
}


@pytest.mark.parametrize("name", sorted(SHIPPED_SHAS))
def test_the_shipped_studies_keep_their_fingerprints(name):
    from search_spaces.spec import SPEC_DIR, load_spec

    assert load_spec(SPEC_DIR / name).sha == SHIPPED_SHAS[name]
