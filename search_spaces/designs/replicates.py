"""The replicate-extension rule: when a changed study file is the recorded one with more
replicates and nothing else, so that its new trials are a new block of the same study."""

from __future__ import annotations

from search_spaces.designs.build import build_design
from search_spaces.designs.registry import KINDS
from search_spaces.spec import StudySpec


def extends_replicates(old: StudySpec, spec: StudySpec) -> bool:
    """Whether ``spec`` is the recorded study file ``old`` with more replicates and nothing else
    changed, every recorded trial keeping its key and seed: the new replicates are a new block
    of the same study, on fresh seeds (a fixed design only; an adaptive one has no replicates to
    add)."""
    if KINDS[spec.design.kind].adaptive or spec.design.replicates <= old.design.replicates:
        return False
    design = old.design.model_copy(update={"replicates": spec.design.replicates})
    if old.model_copy(update={"design": design}).sha != spec.sha:
        return False
    before = {t.key: t.seed for t in build_design(old).trials}
    after = {t.key: t.seed for t in build_design(spec).trials}
    new_seeds = {s for k, s in after.items() if k not in before}
    return all(after.get(k) == s for k, s in before.items()) and not new_seeds & set(
        before.values())  # fmt: skip
