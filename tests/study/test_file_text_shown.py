"""File text is shown, never obeyed: a study file's description, levels and keys with every
control character, escape sequences (clear screen, OSC 8 link, OSC 52 clipboard), C1 controls
and a right-to-left override reach the terminal escaped (``\\x1b``, ``\\u202e``) through the real
``study`` command, and MLflow's Markdown (a real SQLite store, read back) renders them as
written: no element, no link from the file, the product's own links kept."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from search_spaces.designs import build_design
from search_spaces.spec import parse_spec
from study.mlflow_views import start_described_parent
from study.record import StudyRecord

ROOT = Path(__file__).resolve().parents[2]
STUDY = str(Path(sys.executable).with_name("study"))
NOTE = "mlflow.note.content"
CONTROLS = "".join(chr(c) for c in range(0x20) if c != 0x0A) + "\x7f"
C1 = "".join(chr(c) for c in range(0x80, 0xA0))
SEQUENCES = ("\x1b[2J\x1b[31mred\x1b[0m \x1b]8;;http://evil.example/\x07click here\x1b]8;;\x07 "
             "\x1b]52;c;ZWNobyBwd25lZA==\x07 \u202eRLO")  # fmt: skip
HTML = '<img src="http://evil.example/x.png"> [x](http://evil.example/y) *bold* `code`'
DESCRIPTION = f"{CONTROLS}\n{C1}\n{SEQUENCES}\n{HTML}"
# what no byte printed may hold: ESC, the other C0 controls but newline and tab, DEL, C1, bidi
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
LEVELS = ["/data/a\x1b[2Jb\x9b", "/data/c\u202ed"]  # a plan shows a description's first line


def _file(tmp_path: Path, **changes) -> Path:
    doc = {
        "study": "shown-text", "description": DESCRIPTION,
        "trial": {"dataset": "toy", "augmentation": "noise", "encoder": "mlp",
                  "budget_examples": 512, "batch_size": 64},
        "factors": {"temperature": {"levels": [0.1, 0.5]}, "data_root": {"levels": LEVELS}},
    } | changes  # fmt: skip
    path = tmp_path / "study.yaml"
    path.write_text(json.dumps(doc))  # JSON is YAML: every character written as an escape
    return path


def _study(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([STUDY, *argv], cwd=cwd, capture_output=True, timeout=300)


def _clean(data: bytes) -> str:
    text = data.decode("utf-8")
    assert not RAW.search(text), RAW.findall(text)
    return text


def test_plan_prints_the_description_and_levels_escaped(tmp_path):
    done = _study("plan", str(_file(tmp_path)), cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    out = _clean(done.stdout)
    flat = "".join(out.split())  # rich wraps the long first line
    assert "\\x00\\x01" in flat and "\\x1b\\x1c\\x1d" in flat and "\\x7f" in flat
    assert "/data/a\\x1b[2Jb\\x9b" in out and "/data/c\\u202ed" in out


def test_a_refusal_naming_a_key_from_the_file_prints_it_escaped(tmp_path):
    bad = {"temperature": {"levels": [0.1]}, "temp\x1b]52;c;aGk=\x07erature": {"levels": [1]}}
    done = _study("plan", str(_file(tmp_path, factors=bad)), cwd=tmp_path)
    assert done.returncode == 2
    err = _clean(done.stderr)
    assert "temp\\x1b]52;c;aGk=\\x07erature" in err and "Traceback" not in err


@pytest.fixture
def recorded(tmp_path):
    """The study as the runner records it before Ray starts (parent and child runs), one trial
    finished: a real SQLite store."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = parse_spec(json.loads(_file(tmp_path).read_text()))
    design = build_design(spec)
    record = StudyRecord(uri, spec.study, tmp_path / "artifacts")
    parent = start_described_parent(record, spec, design, "the study file")
    runs = {p.key: record.ensure_trial_run(p, parent, spec.sha) for p in design.trials}
    record.finish_trial(runs["p000-r0"], {"status": "finished", "probe/knn_top1_h": 0.5})
    return uri, record, parent, runs


def test_status_over_the_record_prints_the_run_names_escaped(recorded, tmp_path):
    uri, *_ = recorded
    done = _study("status", "shown-text", "--tracking-uri", uri, cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    assert "a\\x1b[2Jb" in "".join(_clean(done.stdout).split())


def _active(markdown: str) -> list[str]:
    """The HTML elements and links a Markdown renderer would make of the text: a tag, a
    [text](url) link, or a bare address (MLflow's showdown links those by itself)."""
    return re.findall(r"<[A-Za-z!/]|(?<!\\)\[[^\]]*(?<!\\)\]\(|https?://|www\.", markdown)


def test_the_markdown_written_to_mlflow_renders_the_file_as_written(recorded):
    uri, record, parent, runs = recorded
    client = MlflowClient(uri)
    experiment = client.get_experiment(record.experiment_id).tags[NOTE]
    parent_note = client.get_run(parent).data.tags[NOTE]
    child = client.get_run(runs["p000-r0"])
    for note in (experiment, parent_note, child.data.tags[NOTE]):
        assert not RAW.search(note)
        assert "<img" not in note and "http://evil" not in note
    for note in (experiment, parent_note):
        file_part = note[note.index("\\x00") : note.index("code") + 10]
        assert _active(file_part) == [], file_part
        assert '&lt;img src="http&#58;//evil.example/x.png"&gt;' in note
        assert "\\[x\\](http&#58;//evil.example/y)" in note and "\\*bold\\*" in note
    assert "/data/a\\\\x1b\\[2Jb\\\\x9b" in child.data.tags[NOTE]  # the level, its backslash kept
    # the product's own Markdown still works: its bold and its links
    assert "**Study `shown-text`**" in experiment
    assert re.search(r"\[parent run\]\(#/experiments/\d+/runs/", experiment)
    assert re.search(r"- \*\*Parent:\*\* \[shown-text\]\(#/experiments/", child.data.tags[NOTE])
    assert "/data/a\\x1b[2Jb\\x9b" in child.info.run_name  # plain text, shown as written
    assert not RAW.search(child.info.run_name)


def test_the_study_commands_print_only_through_the_shown_helpers():
    """study/terminal.py is the one place that prints: a ``print``, ``typer.echo`` or plain
    rich ``Console`` elsewhere in the package would put file text on the terminal raw."""
    found = []
    for path in sorted((ROOT / "study").rglob("*.py")):
        if path.name == "terminal.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = ast.unparse(node.func)
            if name in ("print", "typer.echo", "Console") and not _shown_argument(node):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert found == []


def _shown_argument(call: ast.Call) -> bool:
    """A call whose text is already passed through shown()."""
    first = call.args[0] if call.args else None
    return isinstance(first, ast.Call) and ast.unparse(first.func) == "shown"
