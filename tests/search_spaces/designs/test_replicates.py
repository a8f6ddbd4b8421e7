"""The replicate-extension rule (search_spaces.designs.replicates): more replicates of the same
study file extend it; any other change, or an adaptive design, does not."""

from __future__ import annotations

from search_spaces.designs import extends_replicates
from search_spaces.spec import parse_spec


def study(replicates: int = 1, levels=(0.1, 0.5), kind: str = "full_factorial", **design):
    return parse_spec({"study": "r", "trial": {"budget_examples": 30720, "eval_marks": 2},
                       "factors": {"temperature": {"levels": list(levels)}},
                       "design": {"kind": kind, "replicates": replicates, **design}})  # fmt: skip


def test_more_replicates_of_the_same_file_extend_it():
    assert extends_replicates(study(1), study(3))


def test_fewer_or_as_many_replicates_do_not():
    assert not extends_replicates(study(3), study(3))
    assert not extends_replicates(study(3), study(2))


def test_another_change_with_more_replicates_does_not():
    assert not extends_replicates(study(1), study(2, levels=(0.1, 0.3)))
    assert not extends_replicates(study(1, seed=0), study(2, seed=5))


def test_an_adaptive_design_has_no_replicates_to_add():
    optuna = {"kind": "optuna", "samples": 3, "metric": "probe/knn_top1_z"}
    assert not extends_replicates(study(**optuna), study(**optuna))
