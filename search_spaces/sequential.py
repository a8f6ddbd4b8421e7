"""Follow-up study files: a finished two-level factorial becomes a central composite design,
run as a second block (``study augment``), and a finished study's next study (``study next``).

:func:`augment_spec` turns the factorial's study file into the central composite's: the same
study name (so the same MLflow experiment), description, fixed fields, budget, factors,
resources, replicates and seed, with ``design`` set to ``central_composite`` and
``design.augments`` naming the factorial (its ``spec_sha`` and kind). The design built from it
(:func:`search_spaces.designs.augmented_design`, which :func:`search_spaces.designs.build_design`
calls for any study with ``design.augments``) is the factorial's trials as block 1, under their own
keys and seeds (found in the record as FINISHED, never re-run), and the axial and centre points as
block 2. :func:`augmented_yaml` writes the new study file as an edit of the factorial's own. Nothing
here reads or writes the record.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import yaml

from search_spaces.designs import (
    INTEGER_FIELDS,
    FixedDesign,
    build_design,
    check_augmentable,
    fixed_fields,
    snap_integer,
    valid_batch_sizes,
)
from search_spaces.spec import (
    DEFAULT_CENTER,
    StudyError,
    StudySpec,
    parse_spec,
)


# ---------------------------------------------------------------------------------------------
# the augmented study file
# ---------------------------------------------------------------------------------------------
def augment_spec(
    spec: StudySpec,
    *,
    face: str = "ccf",
    alpha: str | float | None = None,
    center: int = DEFAULT_CENTER,
) -> tuple[StudySpec, FixedDesign]:
    """The central composite study that extends ``spec`` (a two-level factorial), and its design
    with every trial validated. StudyError (naming the field and value) for a study that is not a
    two-level factorial with a numeric factor, or a new point that is not a valid trial."""
    check_augmentable(spec)
    data = spec.canonical()
    augments: dict[str, Any] = {"spec_sha": spec.sha, "kind": spec.design.kind}
    for option in ("generators", "resolution"):
        if getattr(spec.design, option) is not None:
            augments[option] = getattr(spec.design, option)
    design: dict[str, Any] = {
        "kind": "central_composite", "face": face, "center": center,
        "replicates": spec.design.replicates, "seed": spec.design.seed, "augments": augments,
    }  # fmt: skip
    if alpha is not None:
        design["alpha"] = alpha
    data["design"] = design
    new = parse_spec(data, f"{spec.study} augmented (study augment)")
    return new, build_design(new)


def augmented_path(source: Path) -> Path:
    """Where the augmented study file goes: beside the factorial's, ``<stem>-ccd.yaml``."""
    return source.with_name(f"{source.stem}-ccd.yaml")


def augmented_yaml(
    spec: StudySpec, design: FixedDesign, source: str, text: str | None = None
) -> str:
    """The augmented study file: a comment saying what it is, then the factorial's own study
    file ``text`` with only its ``design`` changed: its comments, key order, quoting, flow or
    block style and indentation kept (a round trip through ruamel.yaml). Without ``text``, or
    when the edited file would not read back as ``spec``, the canonical spec, with no key whose
    value is absent (never ``range: null``)."""
    blocks = design.structure["blocks"]
    augments = spec.design.augments
    header = [
        f"# {spec.study}: the {augments.kind} of {source} (spec_sha {augments.spec_sha})",
        f"# augmented to a central composite by `study augment` (face {spec.design.face}, alpha "
        f"{design.structure['alpha']:.4g}, {spec.design.center} centre runs).",
        f"# Block 1: its {blocks['1']} finished trials, kept as recorded; block 2: {blocks['2']} "
        "new axial and centre trials.",
        "# `study run` on this file runs block 2 only, as a second parent run of the same study.",
    ]
    body = _edited(text, spec) if text is not None else None
    if body is None:
        body = _canonical_text(spec)
    return "\n".join(header) + "\n" + body


def _reads_back_as(text: str, spec: StudySpec) -> bool:
    """Whether ``text`` is a study file of exactly ``spec`` (as ``study run`` reads it: numbers
    by their fields' types, YAML 1.1's ``yes``/``0x1F``/``1:20`` as text)."""
    from trainables.text import load_yaml

    try:
        again = parse_spec(load_yaml(text), "the augmented study file")
    except (StudyError, yaml.YAMLError):
        return False
    return again.sha == spec.sha and again.canonical() == spec.canonical()


def _design_map(spec: StudySpec, old: Any):
    """The new ``design`` mapping, edited in place when the file had one (its comments stay):
    kind central_composite, the factorial's replicates and seed as written, face, alpha (a ccc
    design's), centre runs and ``augments`` (the spec_sha quoted: it is text)."""
    from ruamel.yaml.comments import CommentedMap
    from ruamel.yaml.scalarstring import SingleQuotedScalarString

    new = spec.design
    mapping = old if isinstance(old, CommentedMap) else CommentedMap()
    if mapping.fa.flow_style():  # it now holds a nested mapping: one key a line reads better
        mapping.fa.set_block_style()
    for option in ("generators", "resolution"):  # they describe the factorial: into augments
        mapping.pop(option, None)
    _set(mapping, "kind", new.kind)
    _set(mapping, "face", new.face)
    if new.face != "ccf":
        _set(mapping, "alpha", new.alpha)
    else:
        mapping.pop("alpha", None)
    _set(mapping, "center", new.center)
    if new.replicates != 1 or "replicates" in mapping:
        _set(mapping, "replicates", new.replicates)
    if new.seed != 0 or "seed" in mapping:
        _set(mapping, "seed", new.seed)
    augments = CommentedMap()
    for key, value in new.augments.model_dump(mode="json", exclude_none=True).items():
        augments[key] = SingleQuotedScalarString(value) if key == "spec_sha" else value
    mapping["augments"] = augments
    return mapping


def _set(mapping, key: str, value: Any) -> None:
    """``mapping[key] = value``; a changed value loses the comment at the end of its line (it
    spoke of the old value: ``kind: full_factorial  # two levels``), never the lines below."""
    slots = mapping.ca.items.get(key)
    if key in mapping and mapping[key] != value and slots and len(slots) > 2 and slots[2]:
        token = slots[2]
        if not token.value.startswith("\n"):  # an end-of-line comment, then what follows
            _, newline, below = token.value.partition("\n")
            if below.strip():
                token.value = newline + below
            else:
                slots[2] = None
    mapping[key] = value


def _edited(text: str, spec: StudySpec) -> str | None:
    """The factorial's study file with its design turned into ``spec``'s; None when it cannot
    be edited so that it reads back as ``spec`` (then the canonical file is written)."""
    import io

    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap
    from ruamel.yaml.error import YAMLError
    from ruamel.yaml.util import load_yaml_guess_indent

    try:
        _, indent, sequence_indent = load_yaml_guess_indent(text)
        editor = YAML(typ="rt")
        editor.preserve_quotes = True
        editor.width = 4096  # a long line the user wrote stays one line
        editor.indent(mapping=indent or 2, sequence=indent or 2, offset=sequence_indent or 0)
        data = editor.load(text)
    except YAMLError:
        return None
    if not isinstance(data, CommentedMap):
        return None
    old = data.get("design")
    after = _take_trailing_comment(old) if isinstance(old, CommentedMap) else None
    data["design"] = _design_map(spec, old)
    if after is not None:  # what followed the old design follows the new one, not its old key
        _put_trailing_comment(data["design"], after)
    out = io.StringIO()
    editor.dump(data, out)
    edited = out.getvalue()
    return edited if _reads_back_as(edited, spec) else None


def _last_line_holder(mapping):
    """(mapping, key) whose comment slot holds what follows ``mapping``'s last line: ruamel.yaml
    keeps a comment (and blank lines) below a block mapping on its last key, the deepest one
    when that key's value is itself a block mapping."""
    from ruamel.yaml.comments import CommentedMap

    key = list(mapping)[-1]
    value = mapping[key]
    if isinstance(value, CommentedMap) and len(value) and not value.fa.flow_style():
        return _last_line_holder(value)
    return mapping, key


def _take_trailing_comment(mapping):
    """Remove and return the comment below ``mapping`` (None when there is none). Keys added
    after the last one would otherwise land below it: a comment on the next section (or the
    blank lines before it) would end up inside the design (ruamel.yaml's round trip keeps a
    comment by its key, not by its place)."""
    if not len(mapping):
        return None
    holder, key = _last_line_holder(mapping)
    slots = holder.ca.items.get(key)
    if not slots or len(slots) < 3 or slots[2] is None:
        return None
    token = slots[2]
    if token.value.startswith("\n"):  # no comment on the last line itself: all of it moves
        slots[2] = None
        return token
    # ``seed: 7  # common`` then the lines below: the end-of-line comment stays on its key
    end_of_line, newline, below = token.value.partition("\n")
    if not below.strip():
        return None
    moved = copy.copy(token)
    token.value, moved.value = end_of_line + newline, newline + below
    return moved


def _put_trailing_comment(mapping, token) -> None:
    """Put ``token`` (from :func:`_take_trailing_comment`) below ``mapping``'s new last line."""
    holder, key = _last_line_holder(mapping)
    slots = holder.ca.items.setdefault(key, [None, None, None, None])
    slots[2] = token


def _canonical_text(spec: StudySpec) -> str:
    """The canonical spec as YAML, less every option that is absent (None) outside ``trial``
    (where a field set to null is the user's value)."""
    data = spec.canonical()
    data = {k: v for k, v in data.items() if v is not None}
    data["factors"] = {
        name: {k: v for k, v in factor.items() if v is not None}
        for name, factor in data["factors"].items()
    }
    data["design"] = {k: v for k, v in data["design"].items() if v is not None}
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    if _reads_back_as(text, spec):
        return text
    return yaml.safe_dump(spec.canonical(), sort_keys=False, allow_unicode=True)


# ---------------------------------------------------------------------------------------------
# the next study (study next): more replicates, a path, or a new region, as a new study file
# ---------------------------------------------------------------------------------------------
def next_name(study: str) -> str:
    """``<study>-next1`` after ``<study>``, ``<study>-next2`` after ``<study>-next1``."""
    base, _, number = study.rpartition("-next")
    if base and number.isdigit():
        return f"{base}-next{int(number) + 1}"
    return f"{study}-next1"


def next_path(source: Path, study: str) -> Path:
    """Where the next study file goes: beside the finished one, named after the new study."""
    return source.with_name(f"{next_name(study)}.yaml")


def next_spec(spec: StudySpec, step: dict[str, Any]) -> tuple[StudySpec, FixedDesign]:
    """The study that follows ``spec``, from ``step`` (``analysis.findings.next_step.NextStep`` as
    plain
    data: ``kind`` replicates, path, zoom or move; ``reason``, ``replicates``, ``points``,
    ``bounds``, ``fixed``), with its design built and every trial validated: the same fixed
    fields, budget (so every trial sees the same number of examples), resources, target and
    goals. A path's farthest points are dropped while they are not valid trials (a temperature
    or batch size no trial can take), down to two."""
    data = spec.canonical()
    data["study"] = next_name(spec.study)
    data["description"] = f"after {spec.study}: {step['reason']}"
    # seeds past every recorded one: a (point, seed) pair run again is the same computation,
    # bit for bit, and would count as new evidence
    seed = spec.design.seed if step.get("first_seed") is None else int(step["first_seed"])
    design = {"replicates": spec.design.replicates, "seed": seed}
    kind = step["kind"]
    if kind == "replicates":
        data["design"] = {k: v for k, v in data["design"].items() if v is not None} | {
            "replicates": int(step["replicates"]), "seed": seed}  # fmt: skip
        data["design"].pop("augments", None)
        return _built(data)
    if kind == "confirm":
        return _confirmation(spec, data, step, seed)
    _hold(data, step.get("fixed") or {})
    if kind == "path":
        points = [dict(p) for p in step["points"]]
        while True:
            data["factors"] = _ranges(spec, data, points)
            data["design"] = design | {"kind": "points", "points": points}
            try:
                return _built(data)
            except StudyError:
                if len(points) <= 2:
                    raise
                points = points[:-1]
    if kind == "factorial":
        data["factors"] = {name: {"levels": list(step["bounds"][name]),
                                  "scale": spec.factors[name].scale}
                           for name in step["bounds"]}  # fmt: skip
        data["design"] = design | {"kind": "full_factorial"}
        return _built_snapped(data)
    if kind in ("zoom", "move"):
        data["factors"] = {
            name: ({"range": list(step["bounds"][name]), "scale": spec.factors[name].scale}
                   if name in step["bounds"] else factor)
            for name, factor in data["factors"].items()
        }  # fmt: skip
        data["design"] = design | {"kind": "central_composite", "face": "ccf",
                                   "center": spec.design.center}  # fmt: skip
        return _built(data)
    raise StudyError(f"no next study file for a next step of kind {kind!r}")


def confirm_name(study: str) -> str:
    """``<study>-confirm``: the confirmation study of ``<study>``."""
    return f"{study}-confirm"


def _confirmation(
    spec: StudySpec, data: dict[str, Any], step: dict[str, Any], seed: int
) -> tuple[StudySpec, FixedDesign]:
    """The confirmation study: the chosen point and its rival as a ``points`` design, on fresh
    seeds (``seed`` on), ``step['replicates']`` each, with ``confirms`` naming them. A factor
    both points share becomes a fixed field; a numeric one spans the two, a category lists
    both levels."""
    chosen, rival = (dict(p) for p in step["points"])
    data["study"] = confirm_name(spec.study)
    data["description"] = f"confirmation of {spec.study}: {step['reason']}"
    factors = {}
    for name in list(chosen):
        a, b = chosen[name], rival[name]
        factor = spec.factors[name]
        if a == b:
            data["trial"][name] = a
            chosen.pop(name)
            rival.pop(name)
        elif factor.is_numeric:
            factors[name] = {"range": [min(a, b), max(a, b)], "scale": factor.scale}
        else:
            factors[name] = {"levels": [a, b]}
    data["factors"] = factors
    data["design"] = {"kind": "points", "points": [chosen, rival],
                      "replicates": int(step["replicates"]), "seed": seed}  # fmt: skip
    data["confirms"] = step["confirms"]
    return _built(data)


def _hold(data: dict[str, Any], fixed: dict[str, Any]) -> None:
    """Categorical factors held at ``fixed`` levels: fixed fields of the new study."""
    for name, level in fixed.items():
        data["factors"].pop(name, None)
        data["trial"][name] = level


def _ranges(spec: StudySpec, data: dict[str, Any], points: list[dict]) -> dict[str, Any]:
    """Each numeric factor's range over ``points`` (a factor the points do not move becomes a
    fixed field); the points keep only the factors that remain. A batch size along the path is
    first snapped to the nearest size that keeps the budget matched: a path that barely moves it
    (122.5 to 124.3) would otherwise ask for a range that holds no valid size."""
    factors = {}
    for name in list(points[0]):
        if name == "batch_size":
            _snap_batches(data, points)
        values = [p[name] for p in points]
        if math.isclose(min(values), max(values)):
            held = values[0]
            if name in INTEGER_FIELDS:  # a batch size that keeps the budget matched
                held = snap_integer(name, held, spec.factors[name], fixed_fields(spec))
            data["trial"][name] = held
            for p in points:
                p.pop(name)
            continue
        factors[name] = {"range": [min(values), max(values)], "scale": spec.factors[name].scale}
    return factors


def _snap_batches(data: dict[str, Any], points: list[dict]) -> None:
    """Each point's batch size -> the nearest (on the log scale) that divides the budget and
    splits over the workers."""
    fixed = {**data["trial"], "workers": data["resources"]["workers"]}
    candidates = valid_batch_sizes(2, int(max(p["batch_size"] for p in points) * 4), fixed)
    for p in points:
        p["batch_size"] = min(candidates, key=lambda d, v=p["batch_size"]: abs(math.log(d / v)))


def _built_snapped(data: dict[str, Any]) -> tuple[StudySpec, FixedDesign]:
    """Like :func:`_built`, the factorial's batch-size levels first snapped to sizes that keep
    the budget matched (a factorial's levels are used as written)."""
    factor = data["factors"].get("batch_size")
    if factor is not None:
        fixed = {**data["trial"], "workers": data["resources"]["workers"]}
        low, high = factor["levels"]
        candidates = valid_batch_sizes(2, int(high * 4), fixed)
        factor["levels"] = sorted({min(candidates, key=lambda d, v=v: abs(math.log(d / v)))
                                   for v in (low, high)})  # fmt: skip
    return _built(data)


def _built(data: dict[str, Any]) -> tuple[StudySpec, FixedDesign]:
    new = parse_spec(data, f"{data['study']} (study next)")
    return new, build_design(new)


def next_yaml(spec: StudySpec, previous: str, reason: str) -> str:
    """The next study file: a comment saying where it comes from and why, then the spec."""
    header = [f"# {spec.study}: written by `study next` after {previous}.",
              *(f"# {line}" for line in _wrapped(f"Why: {reason}."))]  # fmt: skip
    return "\n".join(header) + "\n" + _canonical_text(spec)


def _wrapped(text: str, width: int = 96) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width)
