"""The command line's manners: help that reads as sentences with readable placeholders at 80
columns, tables instead of Python reprs whose headers wrap rather than being cut, no Ray notice
on every run, a progress 'best' that counts trials from before a resume, a parent run name of
its own for an augmented block, and ``study augment`` keeping the user's file as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from search_spaces.designs import build_design
from search_spaces.spec import load_spec, parse_spec
from study.cli import app
from study.tables import column_widths, wrapped_name

BOX = re.compile(r"[│╭╮╰╯─┃━┏┓┗┛┡┩╇┳┻╋]")
COMMANDS = ["plan", "run", "status", "list", "export", "report", "power", "augment", "env"]


def invoke(*argv: str, columns: int = 80):
    return CliRunner().invoke(app, list(argv), env={"COLUMNS": str(columns), "NO_COLOR": "1"})


def flat(text: str) -> str:
    return " ".join(BOX.sub(" ", text).split())


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_at_80_columns_reads_as_sentences(command):
    done = invoke(*([command] if command else []), "--help")
    assert done.exit_code == 0, done.output
    assert max(len(line) for line in done.output.splitlines()) <= 80
    assert "{" not in done.output and "}" not in done.output, done.output
    assert not re.search(r"<(bool|str|int|float|path|text)", done.output), done.output
    text = flat(done.output)
    group = typer.main.get_command(app)
    targets = [group.commands[command]] if command else list(group.commands.values())
    for cmd in targets:
        helps = [p.help for p in cmd.params if getattr(p, "help", None)]
        if not command:  # the list of commands: each command's first sentence, whole
            helps = [cmd.short_help]
        for words in helps:
            assert " ".join(words.split()) in text, f"{command} --help cuts {words!r}:\n{text}"
            assert words[0].isupper() or words.startswith(("ccf", "--")), words
            assert words.rstrip().endswith("."), f"not a sentence: {words!r}"


def test_column_widths_fit_and_keep_values_whole_while_they_can():
    headers = ["point_id", "replicate", "temperature", "examples_seen", "probe/knn_top1_h"]
    rows = [["p000", "0", "0.1026", "76800", "0.8123"]]
    widths = column_widths(headers, rows, 40)
    assert sum(widths) + len(headers) - 1 <= 39
    assert all(w >= len(v) for w, v in zip(widths, rows[0], strict=True))
    assert column_widths(headers, rows, 200) == [len(h) for h in headers]


def test_plan_table_fits_80_columns_with_no_cut_header(workdir):
    done = invoke("plan", "toy_phase_diagram")
    assert done.exit_code == 0, done.output
    _, *rest = done.output.splitlines()  # the description's one line may end cut ( …)
    assert "…" not in "\n".join(rest)
    assert max(len(line) for line in done.output.splitlines()) <= 80


def _finished_study(workdir: Path) -> tuple[str, str]:
    """A small study recorded with finished trials (no training: the record is written as
    the runner writes it), in the working folder's embedded store."""
    from study.mlflow_views import start_described_parent
    from study.record import StudyRecord

    spec = load_spec("digits_tau_batch")
    data = spec.canonical() | {"study": "manners"}
    data["factors"] = {k: v for k, v in data["factors"].items() if k != "augmentation"}
    data["factors"]["temperature"]["levels"] = [0.1, 0.5]
    data["factors"]["batch_size"]["levels"] = [64, 256]
    spec = parse_spec(data)
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    record = StudyRecord(uri, spec.study)
    design = build_design(spec)
    parent = start_described_parent(record, spec, design, "")
    for i, plan in enumerate(design.trials):
        run_id = record.ensure_trial_run(plan, parent, spec.sha)
        result = {"probe/knn_top1_h": 0.5 + 0.01 * i, "z/align": 0.3 + 0.02 * (i % 3),
                  "train/examples_seen": 122880}  # fmt: skip
        record.log_evaluation(run_id, result, 122880)
        record.finish_trial(run_id, {"status": "finished", "examples_seen": 122880})
    record.client.set_terminated(parent, "FINISHED")  # as the runner ends a finished study
    return uri, spec.study


def test_status_is_a_table_whose_headers_fit(workdir):
    uri, name = _finished_study(workdir)
    done = invoke("status", name, "--tracking-uri", uri)
    assert done.exit_code == 0, done.output
    out = done.output
    assert "{" not in out and "FINISHED" not in out and "finished finished" not in out
    assert f"study {name}: 8 trials: 8 finished" in out
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 80
    header = out.splitlines()[1:4]
    for word in ("trial", "status", "examples", "seen"):
        assert any(word in line for line in header), header
    assert "50.0%" in out and "122,880" in out  # the target, an accuracy, in percent


@pytest.mark.parametrize(
    ("name", "width", "lines"),
    [
        ("probe/knn_top1_h", 10, ["probe/knn_", "top1_h"]),
        ("probe/knn_top1_h", 8, ["probe/", "knn_", "top1_h"]),
        ("probe/knn_top1_h", 16, ["probe/knn_top1_h"]),
        ("examples_seen", 9, ["examples_", "seen"]),
        ("examples seen", 9, ["examples", "seen"]),
        ("lr_effective", 9, ["lr_", "effective"]),
        ("temperature", 11, ["temperature"]),
    ],
)
def test_a_header_breaks_where_a_reader_would(name, width, lines):
    assert wrapped_name(name, width).splitlines() == lines


def test_plan_headers_break_between_words_not_inside_them(workdir):
    done = invoke("plan", "digits_tau_batch")
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("─"))
    header = [line.split() for line in lines[rule - 2 : rule]]
    words = {word for line in header for word in line}
    assert {"replicate", "seed", "temperature", "augmentation", "steps"} <= words, header
    assert all(len(line) <= 80 for line in lines)


def test_power_with_a_misspelt_metric_names_a_few_not_all(workdir):
    uri, name = _finished_study(workdir)
    args = ("power", name, "--effect", "1", "--tracking-uri", uri)
    done = invoke(*args, "--metric", "z/alignn")
    assert done.exit_code == 2
    assert "--metric 'z/alignn' is not a result of this study; did you mean 'z/align'" in (
        done.output
    )
    assert len(done.output) < 600, done.output
    group = invoke(*args, "--metric", "probe/")
    assert group.exit_code == 2 and "probe/knn_top1_h" in group.output


def test_progress_best_counts_trials_finished_before_a_resume():
    from study.progress import StudyProgress

    progress = StudyProgress("s", total=4, already_done=2, concurrency=1,
                             metric="probe/knn_top1_h", mode="max")  # fmt: skip
    progress.seed({"p000-r0": 0.9, "p001-r0": 0.7, "p002-r0": None})
    assert (progress.best, progress.best_trial) == (0.9, "p000-r0")
    progress.result("p003-r0", 0.8)  # worse than a trial of the earlier run
    assert (progress.best, progress.best_trial) == (0.9, "p000-r0")
    assert "best probe/knn_top1_h 90.0% (p000-r0)" in progress.line()
    low = StudyProgress("s", 2, 1, 1, "train/loss", "min")
    low.seed({"p000-r0": 0.4})
    low.result("p001-r0", 0.2)
    assert (low.best, low.best_trial) == (0.2, "p001-r0")


def test_an_augmented_block_has_a_parent_run_name_of_its_own():
    from search_spaces.sequential import augment_spec
    from study.run_notes import parent_run_name

    old = parse_spec(_toy())
    new, _ = augment_spec(old)
    assert parent_run_name(old) == "toy-2x2"
    assert parent_run_name(new) == "toy-2x2 · block 2 (axial and centre points)"


def _toy() -> dict:
    return {
        "study": "toy-2x2",
        "trial": {"dataset": "toy", "encoder": "mlp", "augmentation": "noise",
                  "budget_examples": 1024, "eval_marks": 1},
        "factors": {"temperature": {"levels": [0.1, 0.4], "scale": "log"},
                    "batch_size": {"levels": [32, 128], "scale": "log"}},
    }  # fmt: skip


TOY_FILE = """\
# The toy 2x2: this comment stays
study: toy-2x2
description: 'temperature × batch size'   # quoted on purpose
trial:
    dataset: toy
    encoder: mlp
    augmentation: noise
    budget_examples: 1024
    eval_marks: 1
    base_lr: 5e-3        # not a float in YAML 1.1
    data_root: 0x1F      # a folder's name, not 31
    toy_photos_per_item: 1
factors:
    temperature: {levels: [0.1, 0.4], scale: log}   # tau
    batch_size:
        levels: [32, 128]
        scale: log
design: {kind: full_factorial, replicates: 1}
resources: {cpu: 1, gpu: 0}
"""


def test_augmented_study_file_keeps_the_users_comments_and_style(tmp_path):
    from search_spaces.sequential import augment_spec, augmented_yaml
    from trainables.text import load_yaml

    path = tmp_path / "toy.yaml"
    path.write_text(TOY_FILE)
    old = load_spec(path)
    new, design = augment_spec(old, face="ccf")
    text = augmented_yaml(new, design, path.name, TOY_FILE)
    for line in TOY_FILE.splitlines():
        if not line.startswith("design:"):
            assert line in text, f"lost {line!r}:\n{text}"
    assert "null" not in text and "range" not in text
    again = parse_spec(load_yaml(text))
    assert again.sha == new.sha and again.trial["data_root"] == "0x1F"
    assert again.trial["base_lr"] == 0.005
    assert f"spec_sha: '{old.sha}'" in text  # text, whatever its digits, in YAML 1.1 too
    import yaml

    assert yaml.safe_load(text)["design"]["augments"]["spec_sha"] == old.sha


def test_without_the_users_file_the_canonical_file_has_no_null_keys(tmp_path):
    from search_spaces.sequential import augment_spec, augmented_yaml
    from trainables.text import load_yaml

    new, design = augment_spec(parse_spec(_toy()))
    text = augmented_yaml(new, design, "toy.yaml")
    assert "range: null" not in text and "levels: null" not in text
    assert parse_spec(load_yaml(text)).sha == new.sha


SPACED_FILE = """\
# header

study: toy-2x2
trial: {dataset: toy, encoder: mlp, augmentation: noise, budget_examples: 1024, eval_marks: 1,
  toy_photos_per_item: 1}

# the factors, between blank lines

factors:
  temperature: {levels: [0.1, 0.4], scale: log}
  batch_size:
    levels: [32, 128]   # powers of two
    scale: log

# the design: a 2x2

design:
  kind: full_factorial   # two levels
  replicates: 2
  # seed kept common

  seed: 7   # common

# resources last

resources: {cpu: 1, gpu: 0}
# the end
"""


def test_comments_between_blank_lines_stay_where_the_user_put_them(tmp_path):
    """ruamel.yaml keeps a comment by the key above it (pycontribs/ruyaml#115 is the same kind
    of loss): the comment on the section after ``design`` must stay after the design, not end
    up among its new keys; a comment on a value that changed goes with the old value."""
    from search_spaces.sequential import augment_spec, augmented_yaml
    from trainables.text import load_yaml

    path = tmp_path / "toy.yaml"
    path.write_text(SPACED_FILE)
    new, design = augment_spec(load_spec(path), face="ccf")
    lines = augmented_yaml(new, design, path.name, SPACED_FILE).splitlines()
    design_at, resources_at = lines.index("design:"), lines.index("# resources last")
    design_keys = [line.split(":")[0].strip() for line in lines[design_at + 1 : resources_at]
                   if line.startswith("  ") and not line.strip().startswith("#")]  # fmt: skip
    assert {"kind", "face", "center", "augments", "seed"} <= set(design_keys)
    assert lines[resources_at - 1] == "" and lines[resources_at + 2].startswith("resources:")
    assert "  seed: 7   # common" in lines and "  # seed kept common" in lines
    assert "  kind: central_composite" in lines  # '# two levels' spoke of the factorial
    assert lines[-1] == "# the end" and "    levels: [32, 128]   # powers of two" in lines
    assert parse_spec(load_yaml("\n".join(lines))).sha == new.sha


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"temperature": {"levels": [0, 0.5]}}, "factors.temperature: level 0.0"),
        ({"batch_size": {"levels": [64, 100]}}, "budget_examples=1024 is unmatchable"),
    ],
    ids=["linear-temperature-0", "unmatched-batch"],
)
def test_a_refusal_found_after_the_schema_names_the_file_too(workdir, change, says):
    """Every refusal of a study file starts with the file, as the schema's own refusals do."""
    import yaml

    data = yaml.safe_load(TOY_FILE)
    data["factors"] |= change
    (workdir / "bad.yaml").write_text(yaml.safe_dump(data))
    for argv in (("plan", "bad.yaml"), ("run", "bad.yaml")):
        done = invoke(*argv)
        assert done.exit_code == 2, done.output
        assert "bad.yaml: factors." in done.output and says in done.output, done.output
    assert not (workdir / "mlflow.db").exists()


@pytest.mark.parametrize(("code", "status", "said"), [(None, 0, ""), (3, 3, ""), ("why", 1, "why")])
def test_the_command_ends_its_process_as_python_would_without_the_teardown(
    tmp_path, code, status, said
):
    """``study`` skips the module-by-module teardown of a finished interpreter (seconds for a
    driver), but only that: a thread that is not a daemon still finishes its work, exit handlers
    still run, buffered output still arrives, and the exit status is sys.exit's."""
    import subprocess
    import sys

    code_text = repr(code)
    script = (
        "import atexit, pathlib, sys, threading, time\n"
        "from study.cli import _exit_now\n"
        f"folder = pathlib.Path({str(tmp_path)!r})\n"
        "def late():\n"
        "    time.sleep(0.5)\n"
        "    (folder / 'thread').write_text('done')\n"
        "threading.Thread(target=late).start()\n"
        "atexit.register(lambda: (folder / 'handler').write_text('ran'))\n"
        "sys.stdout.write('buffered')\n"
        f"_exit_now({code_text})\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True)
    assert done.returncode == status, done.stderr[-2000:]
    assert done.stdout == "buffered" and done.stderr.strip() == said
    assert (tmp_path / "thread").read_text() == "done" and (
        tmp_path / "handler"
    ).read_text() == "ran"
