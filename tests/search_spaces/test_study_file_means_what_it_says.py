"""A study file means exactly what it says: integers the record cannot hold, numbers a float
cannot hold, levels no reader can tell apart and settings a trial would clamp where it uses them
are refused before anything runs, every offending field named in one refusal (numpy/numpy#17079,
apache/arrow#42242: integers beyond int64; kknn#9: a k larger than the rows it is drawn from)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from search_spaces.designs import build_design
from search_spaces.spec import StudyError, load_spec
from trainables.config import TrialConfig

STUDY = str(Path(sys.executable).with_name("study"))


def study(tmp_path: Path, trial: str = "", factors: str = "", design: str = "") -> Path:
    budget = "" if "budget_examples" in trial else "budget_examples: 7680, "
    text = f"""\
study: means-what-it-says
trial: {{dataset: digits, {budget}{trial}}}
factors:
  temperature: {{levels: [0.1, 0.5], scale: log}}
{factors}design: {{kind: full_factorial, replicates: 2{', ' + design if design else ''}}}
"""
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def refusal(path: Path) -> str:
    with pytest.raises(StudyError) as err:
        build_design(load_spec(path))
    return str(err.value)


def test_a_seed_past_int64_is_refused_naming_design_seed_and_the_limit(tmp_path):
    message = refusal(study(tmp_path, design="seed: 9223372036854775807"))
    assert "design.seed: 9223372036854775807 with 2 replicates gives trial seeds up to " \
           "9223372036854775808" in message  # fmt: skip
    assert "choose a seed of at most 9223372036854775806" in message
    assert build_design(load_spec(study(tmp_path, design="seed: 9223372036854775806")))


def test_a_budget_beyond_exact_counting_is_refused(tmp_path):
    message = refusal(study(tmp_path, trial="budget_examples: 4611686018427387904"))
    assert "budget_examples=4611686018427387904 is beyond 2**53 = 9007199254740992" in message


def test_1e30_is_an_integer_too_large_not_a_non_integer(tmp_path):
    path = study(tmp_path, factors="  batch_size: {levels: [64, 1e30]}\n")
    message = refusal(path)
    assert "batch_size=1000000000000000000000000000000 is beyond the 64-bit integers" in message
    assert "not an integer" not in message
    assert TrialConfig(budget_examples="1e5", batch_size="1e2").budget_examples == 100000


def test_every_overflow_and_underflow_is_named_at_once(tmp_path):
    path = study(tmp_path, trial="base_lr: 1e400, weight_decay: 1e-400",
                 factors="  aug_strength: {range: [0.1, 1e400]}\n")  # fmt: skip
    with pytest.raises(StudyError) as err:
        load_spec(path)
    message = str(err.value)
    assert "trial.base_lr: 1e400 overflows a 64-bit float" in message
    assert "trial.weight_decay: 1e-400 underflows a 64-bit float: it would be read as 0" in message
    assert "factors.aug_strength.range[1]: 1e400 overflows" in message
    assert "low < high" not in message  # the wrong reason, once given for an infinite bound


def test_levels_that_print_alike_are_refused(tmp_path):
    path = study(tmp_path, factors="  aug_strength: {levels: [0.3, 0.30000000000000004]}\n")
    message = refusal(path) if _parses(path) else _spec_refusal(path)
    assert "levels 0.3 and 0.30000000000000004 differ by less than a reader can see" in message


def _parses(path: Path) -> bool:
    try:
        load_spec(path)
    except StudyError:
        return False
    return True


def _spec_refusal(path: Path) -> str:
    with pytest.raises(StudyError) as err:
        load_spec(path)
    return str(err.value)


def test_settings_a_trial_would_clamp_are_refused_all_at_once(tmp_path):
    path = study(tmp_path, trial="probe_train_size: 10, heldout_size: 5000",
                 factors="  knn_k: {levels: [10, 20, 50]}\n")  # fmt: skip
    message = refusal(path)
    assert "trial.heldout_size: heldout_size=5000 is more than the 360 held-out rows" in message
    assert "knn_k=20 is more than the 10 probe rows" in message
    assert "knn_k=50 is more than the 10 probe rows" in message
    assert message.count("heldout_size=5000") == 1  # said once, not once per point
    with pytest.raises(ValueError, match="probe_train_size=2000 is more than the 1437"):
        TrialConfig(dataset="digits", probe_train_size=2000)
    with pytest.raises(ValueError, match="knn_k=40 is more than the 32 probe rows"):
        TrialConfig(dataset="toy", toy_train_size=32, knn_k=40)
    assert TrialConfig(dataset="digits", probe_train_size=10, knn_k=10).knn_k == 10


@pytest.mark.parametrize(
    ("design", "trial", "said"),
    [("seed: 9223372036854775807", "", "design.seed"),
     ("", "base_lr: 1e400", "trial.base_lr: 1e400 overflows")],
)
def test_plan_exits_2_and_writes_nothing(tmp_path, design, trial, said):
    path = study(tmp_path, design=design, trial=trial)
    done = subprocess.run([STUDY, "plan", path.name], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]
    assert yaml.safe_load(path.read_text())  # the file itself untouched


def test_every_offending_factor_and_trial_field_is_named_in_one_refusal(tmp_path):
    path = tmp_path / "three.yaml"
    path.write_text("""\
study: three
trial: {dataset: digits, budget_examples: 7680, lerning_rate: 0.1, heldout_sise: 100}
factors:
  temperature: {levels: [0.1, -0.5], scale: log}
  batch_size: {levels: [64, 63.5]}
  tempreature: {levels: [1, 2]}
design: {kind: full_factorial, replicates: 1}
""")
    with pytest.raises(StudyError) as err:
        load_spec(path)
    message = str(err.value)
    for said in ("unknown factor 'tempreature'", "factors.temperature: scale log needs positive",
                 "factors.batch_size: level '63.5'"):
        assert said in message, message
    path.write_text(path.read_text().replace("  tempreature: {levels: [1, 2]}\n", "").replace(
        "[0.1, -0.5]", "[0.1, 0.5]").replace("63.5", "128"))  # fmt: skip
    with pytest.raises(StudyError) as err:
        load_spec(path)
    assert "'lerning_rate'" in str(err.value) and "'heldout_sise'" in str(err.value)
