"""'Did you mean': a name a user types that is not one the program knows is refused with the
closest few it does know (:func:`difflib.get_close_matches`), never with a dump of all of them.

Every place a name is typed uses these: study-file keys and factor names, trial keys, design
options and their words, dataset, objective and augmentation names, metric names, study names
and study files. A short list of choices (at most :data:`MAX_SHOWN`) is shown whole; a long one
is summed up by its count and its prefix groups (``train/``, ``z/``, ``probe/`` …), with how to
list it.

:class:`KnownNames` gives a pydantic model with ``extra="forbid"`` both checks: an unknown key,
and a text value outside a ``Literal``'s choices, are refused with the closest names.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterable
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ValidationInfo, field_validator, model_validator

from trainables.text import NUMBER

MAX_SHOWN = 15  # a list of choices this short is shown whole
CLOSE = 3  # at most this many suggestions

# Names people type for a TrialConfig field under another name (the words of other libraries).
FIELD_SYNONYMS = {
    "learning_rate": "base_lr", "lr": "base_lr", "tau": "temperature", "temp": "temperature",
    "batch": "batch_size", "bs": "batch_size", "budget": "budget_examples",
    "epochs": "budget_examples", "optimiser": "optimizer", "aug": "augmentation",
    "augmentations": "augmentation", "loss": "objective", "wd": "weight_decay",
    "warmup": "warmup_fraction", "data": "dataset", "model": "encoder", "backbone": "encoder",
    "lambda": "lam_t", "lam": "lam_t",
}  # fmt: skip


def close_matches(
    name: str, choices: Iterable[Any], *, synonyms: dict[str, str] | None = None, n: int = CLOSE
) -> list[str]:
    """The choices closest to ``name``, best first, at most ``n``: a known synonym, the same name
    in another case, then difflib's close matches (of the whole name, and of the part after the
    last ``/`` for namespaced names such as ``probe/knn_top1_h``)."""
    options = list(dict.fromkeys(str(c) for c in choices))
    text = str(name)
    found: list[str] = []
    if synonyms and synonyms.get(text) in options:
        found.append(synonyms[text])
    folded = {o.casefold(): o for o in options}
    if text.casefold() in folded:
        found.append(folded[text.casefold()])
    found += difflib.get_close_matches(text, options, n=n, cutoff=0.6)
    if "/" in text:  # the right group, a misspelt name: compare within the group
        group = text.rsplit("/", 1)[0] + "/"
        leaves = {o.removeprefix(group): o for o in options if o.startswith(group)}
        leaf = text.rsplit("/", 1)[1]
        found += [leaves[m] for m in difflib.get_close_matches(leaf, list(leaves), n=n)]
    else:  # a bare name of a namespaced one: knn_top1_h for probe/knn_top1_h
        leaves = {o.rsplit("/", 1)[1]: o for o in options if "/" in o}
        found += [leaves[m] for m in difflib.get_close_matches(text, list(leaves), n=n)]
    return [f for f in dict.fromkeys(found) if f != text][:n]


def did_you_mean(
    name: str, choices: Iterable[Any], *, synonyms: dict[str, str] | None = None
) -> str:
    """``"; did you mean 'a' or 'b'?"``, or ``""`` when nothing is close."""
    close = close_matches(name, choices, synonyms=synonyms)
    if not close:
        return ""
    quoted = [repr(c) for c in close]
    either = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    return f"; did you mean {either}?"


def groups(choices: Iterable[str]) -> dict[str, int]:
    """{prefix group ('probe/', 'z/' …): how many names it holds}; names without a ``/`` are
    counted under ''."""
    counts: dict[str, int] = {}
    for choice in choices:
        group = choice.split("/", 1)[0] + "/" if "/" in choice else ""
        counts[group] = counts.get(group, 0) + 1
    return counts


def listing(choices: Iterable[Any], *, noun: str = "names", how_to_list: str = "") -> str:
    """The choices in a few words: all of them when there are at most :data:`MAX_SHOWN`, else
    their count, prefix groups and ``how_to_list``."""
    options = list(dict.fromkeys(str(c) for c in choices))
    if len(options) <= MAX_SHOWN:
        return f"{noun}: {', '.join(options)}"
    text = f"{len(options)} {noun}"
    found = groups(options)
    named = {g: c for g, c in found.items() if g}
    if len(named) > 1:
        shown = ", ".join(f"{g} ({c})" for g, c in sorted(named.items()))
        other = f" and {found['']} without a group" if "" in found else ""
        text += f", in the groups {shown}{other}"
    if how_to_list:
        text += f"; {how_to_list}"
    return text


def unknown(
    what: str,
    name: Any,
    choices: Iterable[Any],
    *,
    noun: str = "",
    how_to_list: str = "",
    synonyms: dict[str, str] | None = None,
) -> str:
    """``"unknown factor 'temprature'; did you mean 'temperature'? (63 TrialConfig fields; …)"``."""
    options = list(dict.fromkeys(str(c) for c in choices))
    hint = did_you_mean(str(name), options, synonyms=synonyms)
    known = listing(options, noun=noun or f"known {what}s", how_to_list=how_to_list)
    return f"unknown {what} {name!r}{hint} ({known})"


# ---------------------------------------------------------------------------------------------
# pydantic models: unknown keys and Literal choices
# ---------------------------------------------------------------------------------------------
def _members(annotation: Any) -> tuple[Any, ...]:
    if get_origin(annotation) in (typing.Union, types.UnionType):
        return get_args(annotation)
    return (annotation,)


def literal_choices(annotation: Any) -> tuple[tuple[str, ...], bool] | None:
    """(the text choices of a ``Literal`` field, whether it holds a sequence of them) for
    ``Literal[...]``, ``Literal[...] | None`` and ``tuple[Literal[...], ...]``; None otherwise."""
    for member in _members(annotation):
        if get_origin(member) is Literal:
            values = get_args(member)
            if all(isinstance(v, str) for v in values):
                return tuple(values), False
        if get_origin(member) in (tuple, list):
            inner = [a for a in get_args(member) if a is not Ellipsis]
            if len(inner) == 1 and get_origin(inner[0]) is Literal:
                values = get_args(inner[0])
                if all(isinstance(v, str) for v in values):
                    return tuple(values), True
    return None


def choice_error(annotation: Any, value: Any) -> str | None:
    """Why ``value`` is not one of a ``Literal`` field's text choices, with the closest ones;
    None when it is one of them, or is not text (the field's own validation then speaks)."""
    found = literal_choices(annotation)
    if found is None:
        return None
    choices, many = found
    values = list(value) if many and isinstance(value, list | tuple) else [value]
    for item in values:
        if isinstance(item, str) and item not in choices:
            hint = did_you_mean(item, choices)
            return f"{item!r} is not one of {', '.join(repr(c) for c in choices)}{hint}"
    return None


def shown(value: Any) -> str:
    """A value as the user typed it (numbers, kept as text by the loader, without quotes); ''
    for a whole section."""
    if isinstance(value, dict | list | tuple):
        return ""
    if isinstance(value, str) and NUMBER.match(value):
        return value
    text = repr(value)
    return text if len(text) <= 60 else text[:50] + "…"


def unknown_key(model: type[BaseModel], key: Any, value: Any = None) -> str:
    """``"replicate: unknown key; did you mean 'replicates'? (…) (got 3)"``: the message names
    its key first, so a caller that knows where the model sits prefixes its path."""
    fields = list(model.model_fields)
    synonyms = FIELD_SYNONYMS if "base_lr" in fields else None
    hint = did_you_mean(str(key), fields, synonyms=synonyms)
    known = listing(
        fields, noun=f"{model.__name__} keys",
        how_to_list=f"see {model.__module__}.{model.__name__}",
    )  # fmt: skip
    got = shown(value)
    return f"{key}: unknown key{hint} ({known})" + (f" (got {got})" if got else "")


UNKNOWN_KEY = re.compile(r"^([A-Za-z0-9_.-]+): unknown key")


class KnownNames(BaseModel):
    """A model whose unknown keys and unknown ``Literal`` words are refused with the closest
    known ones (``extra="forbid"`` alone says only 'Extra inputs are not permitted')."""

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and cls.model_config.get("extra") == "forbid":
            fields = list(cls.model_fields)
            extra = [k for k in data if k not in fields]
            if extra:
                raise ValueError(unknown_key(cls, extra[0], data[extra[0]]))
        return data

    @field_validator("*", mode="before")
    @classmethod
    def _known_choice(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None:
            message = choice_error(field.annotation, value)
            if message:
                raise ValueError(message)
        return value


__all__ = [
    "CLOSE", "FIELD_SYNONYMS", "MAX_SHOWN", "UNKNOWN_KEY", "KnownNames", "choice_error",
    "close_matches", "did_you_mean", "groups", "listing", "literal_choices", "shown", "unknown",
    "unknown_key",
]  # fmt: skip
