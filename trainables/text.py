"""Text a researcher types, read so that it means what they wrote.

PyYAML implements YAML 1.1, where ``1e-4`` (no dot) is a string, ``on``/``yes``/``no`` are
booleans, ``0x1F`` and ``017`` are integers, ``1:20`` is 80 and ``2024-05-01`` is a date. Study
and trial files are read with :func:`load_yaml` instead, whose plain scalars resolve as in YAML
1.2's core schema, with one deliberate difference: **numbers are left as their text**. Every value
in these files lands in a field with a declared type (a :class:`~trainables.config.TrialConfig`
field, a design option), and is converted by that type:

- a ``float`` field reads ``1e-4``, ``5E-2``, ``.5`` and ``2`` as numbers;
- an ``int`` field reads ``64``, ``1e5`` and ``64.0`` as integers and refuses ``64.5`` or ``0x40``;
- a ``str`` field keeps the text exactly: a folder named ``20240501`` or ``0x1F`` stays that name;
- ``null``/``~``/empty are None; ``true``/``false`` (any case) are booleans; ``yes``, ``on``,
  ``off`` and dates are text (a ``bool`` field still accepts ``yes``/``on``, by its type).

``a #b`` is still the text ``a`` followed by a comment, as in every YAML; quote it to keep it.
"""

from __future__ import annotations

import decimal
import math
import re
import types
import typing
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, model_validator

_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
NUMBER = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$")


class PyTextLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core nulls and booleans, and numbers kept as their text."""


class TextLoader(getattr(yaml, "CSafeLoader", PyTextLoader)):  # type: ignore[misc]
    """:class:`PyTextLoader`'s types on libyaml's parser where PyYAML has it: PyYAML's own
    parser, in Python, takes a minute to scan a description of 8 MB (libyaml: under a second).
    The resolvers and constructors, which give the types, are the same Python code either way;
    a text libyaml refuses is parsed again by :class:`PyTextLoader`, whose error messages the
    refusals quote."""


def _bool(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> bool:
    return loader.construct_scalar(node).lower() == "true"


for _loader in (PyTextLoader, TextLoader):
    _loader.yaml_implicit_resolvers = {}
    _loader.add_implicit_resolver("tag:yaml.org,2002:null", _NULL, ["~", "n", "N", ""])
    _loader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL, list("tTfF"))
    _loader.add_implicit_resolver("tag:yaml.org,2002:merge", re.compile(r"^(?:<<)$"), ["<"])
    _loader.add_constructor("tag:yaml.org,2002:bool", _bool)


class DuplicateKeyError(yaml.YAMLError):
    """A mapping that gives one key twice: YAML forbids it, PyYAML keeps the last silently
    (yaml/pyyaml#165), and the study that ran would not be the one in the file. Names every
    duplicate of the text at once, with both lines."""


def duplicate_keys(node: yaml.Node | None, path: str = "") -> list[str]:
    """Every key given twice in one mapping of the composed ``node``, at any depth:
    'factors.temperature (lines 9 and 12)'."""
    found: list[str] = []
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            where = f"{path}.{key}" if path else str(key)
            if key is not None and key != "<<":
                line = key_node.start_mark.line + 1
                if key in seen:
                    found.append(f"{where} (lines {seen[key]} and {line})")
                else:
                    seen[key] = line
            found += duplicate_keys(value_node, where)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found += duplicate_keys(item, f"{path}[{i}]")
    return found


def load_yaml(text: str) -> Any:
    """Parse YAML text; plain numbers stay text until a declared type converts them. A key
    given twice in one mapping, at any depth, is refused (:class:`DuplicateKeyError`)."""
    try:
        composed = yaml.compose(text, Loader=TextLoader)
    except yaml.YAMLError:
        yaml.compose(text, Loader=PyTextLoader)  # its words, where libyaml has other words
        raise
    twice = duplicate_keys(composed)
    if twice:
        raise DuplicateKeyError(
            f"a key is given twice in one mapping, and only one can hold: {'; '.join(twice)}"
        )
    return yaml.load(text, Loader=TextLoader)  # a SafeLoader subclass


# ---------------------------------------------------------------------------------------------
# conversion by declared type
# ---------------------------------------------------------------------------------------------
def _members(annotation: Any) -> tuple[Any, ...]:
    """The alternatives of ``X | None`` / ``Optional[X]``, else (annotation,)."""
    if get_origin(annotation) in (typing.Union, types.UnionType):
        return get_args(annotation)
    return (annotation,)


def base_type(annotation: Any) -> Any:
    """``float | None`` -> float; ``Literal['a', 'b']`` -> str; ``tuple[int, ...]`` -> tuple."""
    members = [m for m in _members(annotation) if m is not type(None)]
    if len(members) != 1:
        return Any
    member = members[0]
    if get_origin(member) is Literal:
        kinds = {type(v) for v in get_args(member)}
        return kinds.pop() if len(kinds) == 1 else Any
    return get_origin(member) or member


def accepts_none(annotation: Any) -> bool:
    return type(None) in _members(annotation)


def integral(value: Any) -> Any:
    """``"1e5"``, ``"64.0"``, ``"1e30"`` or 64.0 -> an int when exactly integral (read as
    written, in decimal: ``1e30`` is 10**30, not the float nearest it); anything else unchanged
    (the field's validator then refuses it with its own message, and a bound refuses an integer
    too large to hold)."""
    if isinstance(value, str) and NUMBER.match(value.strip()):
        number = decimal.Decimal(value.strip())
    elif isinstance(value, float) and math.isfinite(value):
        number = decimal.Decimal(value)
    else:
        return value
    if number == number.to_integral_value():
        return int(number)
    return value


FLOAT_MAX = 1.7976931348623157e308


def number_problem(text: str) -> str | None:
    """Why numeric ``text`` cannot be held as a 64-bit float, or None: it overflows (``1e400``
    reads as infinity) or underflows (``1e-400`` reads as 0, a nonzero number lost)."""
    if not NUMBER.match(text.strip()):
        return None
    exact = decimal.Decimal(text.strip())
    number = float(exact)
    if math.isinf(number):
        return f"{text} overflows a 64-bit float (the largest is about {FLOAT_MAX:.4g})"
    if number == 0 and exact != 0:
        return (f"{text} underflows a 64-bit float: it would be read as 0 (the smallest "
                "positive is about 4.9e-324)")
    return None


def number_problems(data: Any, path: str = "") -> list[str]:
    """Every numeric text in ``data`` (as :func:`load_yaml` reads it) that a 64-bit float
    cannot hold, named by its path: 'factors.temperature.range[1]: 1e400 overflows …'."""
    if isinstance(data, dict):
        return [p for k, v in data.items()
                for p in number_problems(v, f"{path}.{k}" if path else str(k))]  # fmt: skip
    if isinstance(data, list | tuple):
        return [p for i, v in enumerate(data) for p in number_problems(v, f"{path}[{i}]")]
    if isinstance(data, str):
        problem = number_problem(data)
        return [f"{path}: {problem}"] if problem else []
    return []


def typed_inputs(values: dict[str, Any], annotations: dict[str, Any]) -> dict[str, Any]:
    """Prepare a mapping for a pydantic model with these field annotations.

    Integer fields take exactly integral numbers written as floats (``1e5``); numeric fields
    refuse booleans (pydantic would read ``true`` as 1). Everything else is left to the field's
    own validation, which converts numeric text by the declared type.
    """
    out = dict(values)
    problems = [p for name, value in values.items() for p in number_problems(value, name)]
    if problems:  # every number a float cannot hold, at once
        raise ValueError("; ".join(problems))
    for name, value in values.items():
        kind = base_type(annotations.get(name, Any))
        if kind in (int, float) and isinstance(value, bool):
            raise ValueError(f"{name}: expected a number, got the boolean {value!r}")
        if kind is int:
            out[name] = integral(value)
    return out


class ReadsText(BaseModel):
    """A pydantic model whose fields read text by their declared types (see the module)."""

    @model_validator(mode="before")
    @classmethod
    def _typed(cls, data: Any) -> Any:
        """Integers written as ``1e5`` are integers; a boolean is never a number."""
        if not isinstance(data, dict):
            return data
        return typed_inputs(data, {n: f.annotation for n, f in cls.model_fields.items()})


__all__ = [
    "NUMBER", "DuplicateKeyError", "ReadsText", "TextLoader", "accepts_none", "base_type",
    "integral", "load_yaml", "number_problem", "number_problems", "typed_inputs",
]  # fmt: skip
