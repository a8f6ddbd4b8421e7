"""Writing one figure, as PNG and SVG; run as a script, a drawing process of
:func:`analysis.report.plots.save_figures`. It imports matplotlib only, so such a process starts in
about a second instead of three (the figure package imports the analysis: pandas, SciPy).

As a drawing process (``_save.py FOLDER OUT_DIR``) it reads figure names from stdin, one a line,
unpickles ``FOLDER/NAME.pickle``, writes it under ``OUT_DIR`` and answers ``done NAME``, until
stdin ends."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure


def figure_paths(out_dir: Path, name: str) -> list[Path]:
    """Where :func:`save_figure` writes figure ``name``: its PNG, then its SVG."""
    return [out_dir / f"{name}.png", out_dir / f"{name}.svg"]


def save_figure(fig: Figure, out_dir: str | Path, name: str) -> list[Path]:
    """Write ``name.png`` (120 dpi) and ``name.svg`` (its text as text: searchable, light, set
    in the reader's sans-serif when DejaVu Sans is missing) under ``out_dir``; returns both
    paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = figure_paths(out, name)
    fig.savefig(paths[0], dpi=120)
    # the layout the PNG's drawing settled on is kept for the SVG: laying out every label again
    # (constrained layout measures every text) was a third of drawing a figure twice
    fig.set_layout_engine("none")
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(paths[1], metadata={"Date": None})
    return paths


def serve(tmp: str, out_dir: str) -> None:
    """A drawing process's work: each figure named on stdin, saved, then said done."""
    for line in sys.stdin:
        name = line.rstrip("\n")
        save_figure(pickle.loads((Path(tmp) / f"{name}.pickle").read_bytes()), out_dir, name)
        print(f"done {name}", flush=True)


if __name__ == "__main__":  # a drawing process of analysis.report.plots._all._DrawingProcess
    serve(sys.argv[1], sys.argv[2])
