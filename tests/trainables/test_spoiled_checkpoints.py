"""A checkpoint that cannot be loaded (truncated, garbage) is set aside, never retried: the trial
resumes from the newest one that loads, or starts afresh, and says which (the Ray-free reporter;
the study's own, in its storage, is tested end to end in tests/study/test_spoiled_files.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from trialkit import FAST_EVAL, StopAfter, preset

from trainables.checkpoints import RESUME_NOTE, UNREADABLE, checkpoint_name
from trainables.config import TrialConfig
from trainables.train import CHECKPOINT_FILE, LocalReporter, run_trial

STEP = 128 * 4  # examples between the checkpoints of the trial below


def spoil(path: Path, how: str) -> None:
    if how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 3])
    else:
        path.write_bytes(b"\x00garbage, not a checkpoint\n" * 64)


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A trial stopped after its second checkpoint: checkpoints at STEP and 2 × STEP."""
    cfg = TrialConfig(**preset("digits") | FAST_EVAL | {"budget_examples": 128 * 16,
                                                        "eval_marks": 4})  # fmt: skip
    root = tmp_path_factory.mktemp("interrupted")
    with pytest.raises(KeyboardInterrupt):
        run_trial(cfg, StopAfter(root, n=2))
    return cfg, root


def copied(interrupted, tmp_path) -> Path:
    import shutil

    shutil.copytree(interrupted[1], tmp_path / "run")
    return tmp_path / "run"


@pytest.mark.parametrize("how", ["truncated", "garbage"])
def test_the_newest_checkpoint_spoiled_resumes_from_the_one_before_and_sets_it_aside(
    interrupted, tmp_path, how
):
    cfg, _ = interrupted
    root = copied(interrupted, tmp_path)
    newest = root / checkpoint_name(2 * STEP)
    spoil(newest / CHECKPOINT_FILE, how)
    reporter = LocalReporter(root, keep=10)
    result = run_trial(cfg, reporter)
    assert result["status"] == "finished" and result["resumed_from"] == STEP
    aside = root / f"{checkpoint_name(2 * STEP)}{UNREADABLE}"
    assert aside.is_dir()  # set aside, its bytes kept (the resumed trial wrote a new one)
    note = result[RESUME_NOTE]
    assert f"checkpoint {newest} cannot be loaded" in note and f"set aside as {aside}" in note
    assert f"resumed from the checkpoint before it ({STEP} examples seen)" in note
    assert all(m[RESUME_NOTE] == note for _, m in reporter.history)  # every report says it
    # never retried: a later resume finds only loadable checkpoints, and says nothing
    again = run_trial(cfg, LocalReporter(root, keep=10))
    assert RESUME_NOTE not in again and aside.is_dir()


def test_every_checkpoint_spoiled_starts_afresh_and_says_so(interrupted, tmp_path):
    cfg, _ = interrupted
    root = copied(interrupted, tmp_path)
    for step in (STEP, 2 * STEP):
        spoil(root / checkpoint_name(step) / CHECKPOINT_FILE, "truncated")
    (root / checkpoint_name(2 * STEP) / CHECKPOINT_FILE).unlink()  # a file gone from it, too
    result = run_trial(cfg, LocalReporter(root, keep=10))
    assert result["status"] == "finished" and result["resumed_from"] == 0
    assert result[RESUME_NOTE].endswith("no checkpoint loads: started afresh")
    assert result[RESUME_NOTE].count("set aside as") == 2
    assert sorted(p.name for p in root.glob(f"*{UNREADABLE}")) == [
        f"{checkpoint_name(s)}{UNREADABLE}" for s in (STEP, 2 * STEP)]  # fmt: skip


def test_a_reporter_that_cannot_set_aside_fails_as_before(interrupted, tmp_path):
    """A reporter without set_aside_checkpoint: the error, not a loop reading it again."""
    cfg, _ = interrupted
    root = copied(interrupted, tmp_path)
    spoil(root / checkpoint_name(2 * STEP) / CHECKPOINT_FILE, "garbage")

    class Plain(LocalReporter):
        set_aside_checkpoint = None

    with pytest.raises(Exception, match=r"(?i)pickl|load|zip|magic"):
        run_trial(cfg, Plain(root, keep=10))
