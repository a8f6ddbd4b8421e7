"""A design never replaces a value the user wrote without saying so: a response-surface design
spans each numeric factor's ends and places its own centre, so a level between them that is not
that centre is refused, naming the factor, the level and the centre it would get instead."""

from __future__ import annotations

import math

import pytest

from search_spaces.designs import build_design
from search_spaces.spec import StudyError, load_spec, parse_spec


def spec_with(kind: str, factors: dict):
    data = load_spec(None).canonical()
    data["factors"] = factors
    data["trial"] = {k: v for k, v in data["trial"].items() if k not in factors}
    data["design"] = {"kind": kind}
    return parse_spec(data)


def test_a_central_composite_refuses_a_middle_level_it_would_replace():
    spec = spec_with("central_composite", {
        "temperature": {"levels": [0.05, 0.07, 0.5], "scale": "log"},
        "batch_size": {"levels": [64, 256], "scale": "log"},
    })  # fmt: skip
    with pytest.raises(StudyError) as err:
        build_design(spec)
    text = str(err.value)
    assert text.startswith("factors.temperature: central_composite uses the ends")
    assert "its own centre, 0.1581 on the log scale; the level(s) 0.07 would be replaced" in text


def test_a_box_behnken_refuses_a_middle_level_it_would_replace():
    spec = spec_with("box_behnken", {
        "temperature": {"levels": [0.1, 0.5], "scale": "log"},
        "batch_size": {"levels": [64, 256], "scale": "log"},
        "aug_strength": {"levels": [0.0, 0.9, 1.0]},
    })  # fmt: skip
    with pytest.raises(
        StudyError,
        match=r"factors\.aug_strength: .*its own centre, 0\.5 on "
        r"the linear scale; the level\(s\) 0\.9 would be",
    ):
        build_design(spec)


def test_the_centre_itself_may_be_written_and_is_used():
    centre = math.sqrt(0.05 * 0.5)
    spec = spec_with("central_composite", {
        "temperature": {"levels": [0.05, centre, 0.5], "scale": "log"},
        "batch_size": {"levels": [64, 256], "scale": "log"},
    })  # fmt: skip
    values = {t.factors["temperature"] for t in build_design(spec).trials}
    assert any(math.isclose(v, centre) for v in values)
    assert min(values) == 0.05 and max(values) == 0.5  # exactly as written, not exp(log(…))
