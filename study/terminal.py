"""What the ``study`` commands print, shown as written: every line and every rich table goes
through :func:`trainables.shown.shown`, so text from a study file or the record (a description,
a level, a refusal naming a value) never drives the terminal it is printed on.

The commands print through :func:`echo`, :func:`say` and :class:`ShownConsole`, never through
``print``, ``typer.echo`` or a plain rich ``Console`` (tests/study/test_file_text_shown.py
checks the modules of this package for it).
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.text import Text

from trainables.remote import redacted
from trainables.shown import shown


def echo(text: str = "", err: bool = False) -> None:
    """``typer.echo`` of ``text`` shown as written (stderr with ``err``), the password of any
    URI in it as ``***`` (:func:`trainables.remote.redacted`)."""
    typer.echo(shown(redacted(str(text))), err=err)


def say(text: str = "", *, err: bool = False, flush: bool = False) -> None:
    """``print`` of ``text`` shown as written, for the driver's lines (stderr with ``err``), the
    password of any URI in it as ``***``."""
    print(shown(redacted(str(text))), file=sys.stderr if err else sys.stdout, flush=flush)


class ShownConsole(Console):
    """A rich Console that shows every text it is given as written: escaped by
    :func:`~trainables.shown.shown` before rich reads it, and with neither markup nor emoji
    codes read unless a caller asks (``print(..., markup=True)`` on text it escaped itself), so
    a level ``[blink]x`` or ``:skull:`` is printed as those characters. Rich's own styling (a
    table's lines, a live display's redraws) is written as usual."""

    def __init__(self, **options) -> None:
        super().__init__(**{"markup": False, "emoji": False, **options})

    def render_str(self, text: str, **options) -> Text:
        return super().render_str(shown(text), **options)


__all__ = ["ShownConsole", "echo", "say"]
