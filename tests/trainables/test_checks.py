"""The self-checks a study records on its parent run (release gate item 1)."""

from __future__ import annotations

from trainables import checks
from trainables.checks import self_checks


def test_the_info_nce_worked_example_passes():
    assert self_checks() == {"info_nce_worked_example": "pass"}


def test_a_wrong_value_fails_saying_what_it_got(monkeypatch):
    monkeypatch.setattr(checks, "WORKED_EXAMPLE_LOSS", 0.7)
    (result,) = self_checks().values()
    assert result.startswith("fail: 0.655") and result.endswith("!= 0.6551")
