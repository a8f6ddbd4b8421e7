"""Study and trial files mean what the researcher wrote.

PyYAML reads YAML 1.1: ``1e-4`` is a string, ``yes``/``on`` are booleans, ``017`` is octal,
``1:20`` is 80, ``2024-05-01`` a date. These tests pin what each such input becomes in a study
file, a trial file and ``--set``: numbers by the field's declared type, text kept exactly.
"""

from __future__ import annotations

import pytest

from search_spaces.designs import build_design, check_generators
from search_spaces.spec import StudyError, load_spec, parse_spec
from trainables.__main__ import parse_overrides
from trainables.config import TrialConfig
from trainables.text import load_yaml


def spec_text(tmp_path, text: str):
    path = tmp_path / "study.yaml"
    path.write_text(text)
    return load_spec(path)


# ---------------------------------------------------------------------------------------------
# the loader
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1e-4", "1e-4"),  # numbers stay text until a declared type reads them
        ("yes", "yes"),
        ("on", "on"),
        ("off", "off"),
        ("No", "No"),
        ("0x1F", "0x1F"),
        ("017", "017"),
        ("1:20", "1:20"),
        ("2024-05-01", "2024-05-01"),
        ("1_000", "1_000"),
        ("true", True),
        ("False", False),
        ("TRUE", True),
        ("null", None),
        ("~", None),
        ("", None),
        ("'a #b'", "a #b"),
        ("a #b", "a"),  # a comment, as in every YAML: quote it to keep it
    ],
)
def test_plain_scalars_resolve_as_written(text, value):
    assert load_yaml(f"k: {text}") == {"k": value}


def test_keys_that_yaml_1_1_reads_as_booleans_stay_text():
    assert load_yaml("on: 1\nyes: 2\n") == {"on": "1", "yes": "2"}


# ---------------------------------------------------------------------------------------------
# TrialConfig reads text by its declared types
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "text", "expected"),
    [
        ("base_lr", "1e-4", 1e-4),
        ("base_lr", "5E-2", 0.05),
        ("temperature", ".5", 0.5),
        ("temperature", "2", 2.0),
        ("budget_examples", "1.024e5", 102400),
        ("budget_examples", "61440.0", 61440),
        ("data_root", "20240501", "20240501"),
        ("data_root", "0x1F", "0x1F"),
        ("data_root", "2024-05-01", "2024-05-01"),
        ("data_root", "017", "017"),
        ("data_root", "yes", "yes"),
        ("linear_probe", "yes", True),
        ("linear_probe", "off", False),
        ("mlp_hidden", "[64, 32]", (64, 32)),
    ],
)
def test_trial_file_values_take_their_fields_type(field, text, expected):
    config = TrialConfig(**load_yaml(f"{field}: {text}\n"))
    value = getattr(config, field)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize(
    ("field", "text", "words"),
    [
        ("batch_size", "64.5", "batch_size"),
        ("seed", "0x1F", "seed"),
        ("temperature", "true", "temperature: expected a number, got the boolean True"),
        ("budget_examples", "false", "budget_examples: expected a number"),
    ],
)
def test_values_a_field_cannot_hold_are_refused_naming_it(field, text, words):
    with pytest.raises(ValueError, match=words):
        TrialConfig(**load_yaml(f"{field}: {text}\n"))


def test_set_overrides_keep_text_fields_exact_and_type_the_rest():
    values = parse_overrides(
        ["data_root=lab notes #3 (50%)", "base_lr=1e-4", "mlp_hidden=[64, 64]",
         "augmentation=crop+noise", "linear_probe=yes", "data_root=20240501"]
    )  # fmt: skip
    config = TrialConfig(**values)
    assert config.data_root == "20240501"
    assert config.base_lr == 1e-4 and config.mlp_hidden == (64, 64) and config.linear_probe
    assert parse_overrides(["data_root=a #b"])["data_root"] == "a #b"
    assert parse_overrides(["data_root=null"])["data_root"] is None


# ---------------------------------------------------------------------------------------------
# study files
# ---------------------------------------------------------------------------------------------
CCD = """
study: lr-tau
trial: {dataset: digits, budget_examples: 1536}
factors:
  base_lr: {levels: [1e-4, 1e-3], scale: log}
  temperature: {levels: [0.05, 0.5], scale: log}
design: {kind: central_composite}
"""


def test_numbers_as_researchers_write_them_make_a_two_factor_ccd_of_nine_points(tmp_path):
    spec = spec_text(tmp_path, CCD)
    assert spec.factors["base_lr"].levels == [1e-4, 1e-3]
    assert all(type(v) is float for v in spec.factors["base_lr"].levels)
    assert spec.factors["base_lr"].is_numeric
    table = build_design(spec)
    assert len(table.trials) == 11  # 4 corners + 4 axial (face-centred) + 3 centre runs
    assert len({tuple(t.factors.values()) for t in table.trials}) == 9  # nine points
    assert sorted({t.factors["base_lr"] for t in table.trials}) == pytest.approx(
        [1e-4, (1e-4 * 1e-3) ** 0.5, 1e-3]
    )


@pytest.mark.parametrize(
    ("levels", "expected"),
    [("[5E-2, .5]", [0.05, 0.5]), ("['1e-1', '2e-1']", [0.1, 0.2]), ("[1, 2]", [1.0, 2.0])],
)
def test_numeric_fields_never_get_text_levels(tmp_path, levels, expected):
    spec = spec_text(tmp_path, CCD.replace("[0.05, 0.5]", levels))
    assert spec.factors["temperature"].levels == expected
    assert all(type(v) is float for v in spec.factors["temperature"].levels)


def test_integer_fields_read_integral_numbers(tmp_path):
    text = CCD.replace("budget_examples: 1536", "budget_examples: 1.536e3")
    assert spec_text(tmp_path, text).trial["budget_examples"] == 1536
    text = CCD.replace("temperature: {levels: [0.05, 0.5], scale: log}",
                       "batch_size: {levels: [6.4e1, 128]}")  # fmt: skip
    assert spec_text(tmp_path, text).factors["batch_size"].levels == [64, 128]


def test_text_fields_keep_number_like_text(tmp_path):
    text = CCD.replace("dataset: digits", "dataset: digits, data_root: 20240501")
    spec = spec_text(tmp_path, text.replace("study: lr-tau", "study: 2024"))
    assert spec.trial["data_root"] == "20240501" and spec.study == "2024"
    text = CCD.replace(
        "temperature: {levels: [0.05, 0.5], scale: log}",
        "data_root: {levels: [20240501, 0x1F, yes]}",
    )
    assert spec_text(tmp_path, text).factors["data_root"].levels == ["20240501", "0x1F", "yes"]


@pytest.mark.parametrize(
    ("factor", "words"),
    [
        ("augmentation: {levels: [crop, crop+noise], scale: log}",
         "factors.augmentation: scale 'log' applies to numeric factors only, but augmentation "
         "takes text"),
        ("augmentation: {levels: [crop, crop+noise], scale: linear}",
         "factors.augmentation: scale 'linear' applies to numeric factors only"),
        ("linear_probe: {levels: [yes, no], scale: log}",
         "factors.linear_probe: scale 'log' applies to numeric factors only, but linear_probe "
         "takes booleans"),
        ("augmentation: {range: [1, 2]}",
         "factors.augmentation: range [1.0, 2.0] needs a numeric field"),
        ("temperature: {levels: [abc, 0.1]}",
         "factors.temperature: level 'abc': temperature takes numbers"),
        ("batch_size: {levels: [64, 96.5]}", "factors.batch_size: level '96.5': batch_size"),
        ("temperature: {levels: [1e-1, 0.1]}", "factors.temperature: levels repeat 0.1"),
    ],
)  # fmt: skip
def test_factors_whose_type_does_not_fit_are_refused_with_the_reason(tmp_path, factor, words):
    text = CCD.replace("temperature: {levels: [0.05, 0.5], scale: log}", factor)
    with pytest.raises(StudyError) as caught:
        spec_text(tmp_path, text)
    assert words in str(caught.value)


def test_a_ccd_without_numeric_factors_says_why_they_are_categorical(tmp_path):
    text = CCD.replace("base_lr: {levels: [1e-4, 1e-3], scale: log}",
                       "augmentation: {levels: [crop, crop+noise]}").replace(
        "temperature: {levels: [0.05, 0.5], scale: log}",
        "mlp_hidden: {levels: [[64], [128]]}")  # fmt: skip
    with pytest.raises(StudyError, match="augmentation, mlp_hidden are categorical"):
        build_design(spec_text(tmp_path, text))


def test_the_canonical_spec_parses_back_to_itself():
    for name in ("default", "digits_tau_batch", "toy_phase_diagram", "align_uniform_lam_t"):
        spec = load_spec(name)
        again = parse_spec(load_yaml(__import__("yaml").safe_dump(spec.canonical())))
        assert again.sha == spec.sha and again.canonical() == spec.canonical()


# ---------------------------------------------------------------------------------------------
# every field of a study file is checked before anything runs
# ---------------------------------------------------------------------------------------------
FRACTIONAL = """
study: frac
trial: {dataset: digits, budget_examples: 1536}
factors:
  temperature: {levels: [0.1, 0.5]}
  batch_size: {levels: [64, 128]}
  aug_strength: {levels: [0.5, 1.0]}
design: {kind: fractional_factorial, generators: "GEN"}
"""


@pytest.mark.parametrize(
    ("generators", "words"),
    [
        ("a b abd", "word 'abd' uses d, which is not a main factor"),
        ("a a b", "(single letters) must be a b c, once each and in that order; got a a b"),
        ("a b aab", "column 'aab' equals column 'b'"),
        ("a b ba ab", "defines 4 columns but the study has 3 factors"),
        ("b c bc", "must be a b, once each and in that order; got b c"),
        ("a b 2", "word '2' is not made of letters"),
        ("a b aa", "word 'aa' cancels to a constant column"),
    ],
)
def test_bad_generators_are_refused_naming_design_generators(tmp_path, generators, words):
    with pytest.raises(StudyError) as caught:
        build_design(spec_text(tmp_path, FRACTIONAL.replace("GEN", generators)))
    message = str(caught.value)
    assert message.startswith("design.generators: ") and words in message


def test_good_generators_in_any_case_give_the_half_fraction(tmp_path):
    lower = build_design(spec_text(tmp_path, FRACTIONAL.replace("GEN", "a b ab")))
    upper = build_design(spec_text(tmp_path, FRACTIONAL.replace("GEN", "A B -AB")))
    assert len(lower.trials) == len(upper.trials) == 4
    for plans in (lower.trials, upper.trials):  # every pair of columns is balanced
        assert {(p.factors["temperature"], p.factors["batch_size"]) for p in plans} == {
            (0.1, 64), (0.1, 128), (0.5, 64), (0.5, 128)
        }  # fmt: skip
    assert check_generators("a b c abc", ["w", "x", "y", "z"]) == ["a", "b", "c", "abc"]


@pytest.mark.parametrize(
    ("design", "words"),
    [
        ("{kind: full_factorial, samples: 3}", "design.samples: 3 applies to latin_hypercube"),
        ("{kind: full_factorial, face: cci}", "design.face: 'cci' applies to central_composite"),
        ("{kind: latin_hypercube, samples: 4, metric: z/align}", "design.metric: 'z/align'"),
        ("{kind: full_factorial, generators: a b ab}", "design.generators: 'a b ab' applies"),
        ("{kind: fractional_factorial, generators: a b ab, resolution: 3}",
         "give generators ('a b ab') or resolution (3), not both"),
    ],
)  # fmt: skip
def test_design_options_the_kind_would_ignore_are_refused(tmp_path, design, words):
    text = CCD.replace("design: {kind: central_composite}", f"design: {design}")
    with pytest.raises(StudyError, match=__import__("re").escape(words)):
        spec_text(tmp_path, text)


@pytest.mark.parametrize("length", [101, 245])
def test_study_names_too_long_for_a_file_name_are_refused_at_plan(tmp_path, length):
    with pytest.raises(StudyError, match=f"study: a name of {length} characters is too long"):
        spec_text(tmp_path, CCD.replace("study: lr-tau", "study: " + "s" * length))
    spec_text(tmp_path, CCD.replace("study: lr-tau", "study: " + "s" * 100))


@pytest.mark.parametrize(
    ("where", "metric", "words"),
    [
        ("design", "probe/knn_top1", "did you mean 'probe/knn_top1_"),
        ("design", "probe/linear_top1_h", "not a metric this study's trials report"),
        ("target", "z/allign", "did you mean 'z/align'"),
    ],
)
def test_metrics_no_trial_reports_are_refused_before_anything_runs(tmp_path, where, metric, words):
    text = CCD.replace("design: {kind: central_composite}", (
        f"design: {{kind: optuna, samples: 2, metric: {metric}, mode: max}}"
        if where == "design" else f"target: {{metric: {metric}}}"
    )).replace("budget_examples: 1536", "budget_examples: 1536, linear_probe: false")  # fmt: skip
    with pytest.raises(StudyError) as caught:
        build_design(spec_text(tmp_path, text))
    assert str(caught.value).startswith(f"{where}.metric: '{metric}'") and words in str(
        caught.value
    )
