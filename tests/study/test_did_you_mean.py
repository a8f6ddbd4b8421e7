"""'Did you mean': every name a user types that the program does not know is refused early (exit
2 from the CLI, nothing written), naming the field and the value, with the closest few known
names (:mod:`trainables.names`, difflib) and never a dump of all of them."""

from __future__ import annotations

import copy
import re

import pytest
from typer.testing import CliRunner

from search_spaces.designs import build_design
from search_spaces.spec import StudyError, load_spec, parse_spec
from study.cli import app
from study.services.power_answer import unknown_metric
from trainables.config import TrialConfig
from trainables.names import MAX_SHOWN, close_matches, did_you_mean, listing, unknown

BASE = load_spec(None).canonical()


def refused(change) -> str:
    data = copy.deepcopy(BASE)
    change(data)
    with pytest.raises(StudyError) as caught:
        build_design(parse_spec(data, "study.yaml"))
    return str(caught.value)


def _factor(name: str, factor: dict):
    def change(data):
        data["factors"].pop("temperature", None)
        data["factors"][name] = factor

    return change


def _put(section: str, key: str, value):
    def change(data):
        if section:
            data.setdefault(section, {})[key] = value
        else:
            data[key] = value

    return change


# (what was typed wrong, how, the field the message names, the suggestion it makes)
STUDY_FILE_NAMES = [
    ("factor", _factor("temprature", {"levels": [0.1, 0.5]}),
     "factors: unknown factor 'temprature'", "did you mean 'temperature'"),
    ("trial key", _put("trial", "learning_rate", 0.01),
     "trial: unknown TrialConfig field 'learning_rate'", "did you mean 'base_lr'"),
    ("top-level key", _put("", "factor", {}), "study.yaml: factor: unknown key",
     "did you mean 'factors'"),
    ("design key", _put("design", "replicate", 2), "design.replicate: unknown key",
     "did you mean 'replicates'"),
    ("design kind", _put("design", "kind", "central_composit"), "design.kind:",
     "did you mean 'central_composite'"),
    ("design alpha word", lambda d: d.update(design={"kind": "central_composite", "face": "ccc",
                                                     "alpha": "rotatble"}),
     "design.alpha:", "did you mean 'rotatable'"),
    ("factor key", lambda d: d["factors"]["temperature"].update(levles=[0.1, 0.5]),
     "factors.temperature.levles: unknown key", "did you mean 'levels'"),
    ("factor scale", lambda d: d["factors"]["temperature"].update(scale="logg"),
     "factors.temperature.scale:", "did you mean 'log'"),
    ("resources key", _put("resources", "gpus", 1), "resources.gpus: unknown key",
     "did you mean 'gpu'"),
    ("target metric", _put("target", "metric", "probe/knn_top1"), "target.metric:",
     "did you mean 'probe/knn_top1_"),
    ("target mode", _put("target", "mode", "maximum"), "target.mode:", "did you mean 'max'"),
    ("baseline", _put("", "baselines", ["raw", "random"]), "baselines:",
     "did you mean 'random_init'"),
    ("dataset", _put("trial", "dataset", "cifar"), "trial.dataset: 'cifar'",
     "did you mean 'cifar10' or 'cifar100'"),
    ("objective", _put("trial", "objective", "infonce"), "trial.objective: 'infonce'",
     "did you mean 'info_nce'"),
    ("objective level", _factor("objective", {"levels": ["info_nce", "align_uniformm"]}),
     "factors.objective: level 'align_uniformm'", "did you mean 'align_uniform'"),
    ("augmentation", _put("trial", "augmentation", "crop+flp"), "trial.augmentation:",
     "did you mean 'flip'"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("change", "field", "suggestion"),
    [case[1:] for case in STUDY_FILE_NAMES],
    ids=[case[0] for case in STUDY_FILE_NAMES],
)
def test_a_misspelt_name_in_a_study_file_gets_the_closest_names(change, field, suggestion):
    message = refused(change)
    assert field in message and suggestion in message, message
    assert len(message) < 600, f"a dump, not a suggestion: {message}"


def test_a_misspelt_shipped_study_file_is_suggested():
    with pytest.raises(StudyError) as caught:
        load_spec("digits_tau_batc")
    message = str(caught.value)
    assert "study file 'digits_tau_batc' not found; did you mean 'digits_tau_batch'?" in message


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"learning_rate": 0.1}, "learning_rate: unknown key; did you mean 'base_lr'?"),
        ({"temprature": 0.1}, "did you mean 'temperature'"),
        ({"dataset": "fashion-mnist"}, "did you mean 'fashion_mnist'"),
        ({"objective": "align-uniform"}, "did you mean 'align_uniform'"),
        ({"optimizer": "adamW"}, "did you mean 'adamw'"),
        ({"augmentation": "crop+colour"}, "did you mean 'color'"),
    ],
)
def test_trial_config_suggests_the_field_or_choice(fields, words):
    with pytest.raises(ValueError) as caught:
        TrialConfig(**fields)
    assert words in str(caught.value)


def test_a_long_list_of_names_is_summed_up_by_its_groups():
    names = [f"{group}/m{i}" for group in ("train", "z", "h", "probe", "shift", "baseline")
             for i in range(30)]  # fmt: skip
    message = unknown_metric("probe/m7x", names)
    assert "did you mean 'probe/m7'" in message
    assert "180 numeric results" in message and "probe/ (30)" in message
    assert "--metric probe/" in message  # how to list them
    assert len(message) < 400 and "shift/m29" not in message
    group = unknown_metric("probe/", names)  # a group lists its own names
    assert "probe/m0" in group and "probe/m29" in group and "z/m0" not in group


def test_helpers_list_at_most_a_few_candidates_and_short_lists_whole():
    assert len(close_matches("a", [f"a{i}" for i in range(100)])) <= 3
    assert did_you_mean("zzz", ["alpha", "beta"]) == ""
    short = listing(["a", "b"], noun="choices")
    assert short == "choices: a, b"
    long = listing([f"n{i}" for i in range(MAX_SHOWN + 1)], noun="names", how_to_list="see X")
    assert long.startswith(f"{MAX_SHOWN + 1} names") and long.endswith("see X")
    assert unknown("factor", "tmp", ["temp"]).startswith("unknown factor 'tmp'; did you mean")


# ---------------------------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------------------------
def invoke(*argv: str):
    return CliRunner().invoke(app, list(argv))


def _store(workdir, *names: str) -> str:
    from study.record import StudyRecord

    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    for name in names:
        spec = load_spec(None).model_copy(update={"study": name})
        record = StudyRecord(uri, name)
        parent = record.start_parent(spec, build_design(spec), "")
        record.client.set_terminated(parent, "FINISHED")  # a study run and ended, no driver gone
    return uri


@pytest.mark.parametrize(
    "argv",
    [
        ("status", "digits-tau-batchh"),
        ("export", "digits-tau-batchh", "--out", "x.parquet"),
        ("report", "digits-tau-batchh"),
        ("power", "digits-tau-batchh", "--metric", "z/align", "--effect", "1"),
    ],
    ids=["status", "export", "report", "power"],
)
def test_a_misspelt_study_name_is_suggested_by_every_command(workdir, argv):
    uri = _store(workdir, "digits-tau-batch", "toy-phase")
    done = invoke(*argv, "--tracking-uri", uri)
    assert done.exit_code == 2, done.output
    assert "no study named 'digits-tau-batchh'" in done.output
    assert "did you mean 'digits-tau-batch'?" in done.output
    assert not (workdir / "x.parquet").exists()


def test_a_store_of_many_studies_is_not_dumped(workdir):
    names = [f"study-{i:02d}" for i in range(MAX_SHOWN + 5)]
    uri = _store(workdir, *names)
    done = invoke("status", "study-1", "--tracking-uri", uri)
    assert done.exit_code == 2 and "did you mean" in done.output
    assert f"It holds {len(names)} studies; list them with: study list" in done.output
    assert sum(name in done.output for name in names) <= 3  # the suggestions, no more
    listed = invoke("list", "--tracking-uri", uri)
    assert listed.exit_code == 0 and listed.output.split() == names


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (("--face", "ccd"), "--face 'ccd'"),
        (("--to", "central-composite"), "did you mean 'central_composite'?"),
        (("--face", "cfc"), "did you mean 'ccf' or 'ccc'?"),
    ],
)
def test_augment_options_suggest_their_words(workdir, argv, words):
    done = invoke("augment", "digits_tau_batch", *argv)
    assert done.exit_code == 2 and words in done.output, done.output
    assert list(workdir.iterdir()) == []


def test_plan_of_a_misspelt_study_file_exits_2_with_the_closest(workdir):
    done = invoke("plan", "toy_phase_diagramm")
    assert done.exit_code == 2
    assert re.search(r"not found; did you mean 'toy_phase_diagram'\?", done.output)
