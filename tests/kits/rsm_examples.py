"""Published response-surface examples (R package rsm 2.10.6, ``R/datasets.R``; printed
outputs in ``inst/doc/article-JSS.html``) and the check that a value agrees with a printed
number to its last printed digit; the analysis tests that assert rsm's numbers share them."""

from __future__ import annotations

import numpy as np
import pandas as pd


def printed(value: float, text: str) -> None:
    """``value`` agrees with the printed ``text`` to its last printed digit."""
    digits = len(text.split(".")[1]) if "." in text else 0
    assert abs(value - float(text)) <= 0.5 * 10.0**-digits * (1 + 1e-9), (value, text)


def printed_sig(value: float, text: str) -> None:
    """Like :func:`printed` for a number printed in scientific notation (``2.879e-10``)."""
    mantissa, exponent = text.split("e")
    digits = len(mantissa.split(".")[1]) if "." in mantissa else 0
    assert abs(value - float(text)) <= 0.5 * 10.0 ** (int(exponent) - digits) * (1 + 1e-9)


def linear(*names: str) -> dict[str, str]:
    return dict.fromkeys(names, "linear")


# ChemReact (Myers, Montgomery and Anderson-Cook 2009, Table 7.6): the first block (rows 1-7,
# ChemReact1: a 2^2 factorial and three centre points) and the second (axial and centre points)
CHEM_REACT = pd.DataFrame({
    "Time": [80, 80, 90, 90, 85, 85, 85, 85, 85, 85, 92.07, 77.93, 85, 85],
    "Temp": [170, 180, 170, 180, 175, 175, 175, 175, 175, 175, 175, 175, 182.07, 167.93],
    "Block": ["B1"] * 7 + ["B2"] * 7,
    "Yield": [80.5, 81.5, 82, 83.5, 83.9, 84.3, 84, 79.7, 79.8, 79.5, 78.4, 75.6, 78.5, 77],
})  # fmt: skip


# heli (Box, Hunter and Hunter 2005, Table 12.5), coded with x1 = (A - 12.4)/0.6,
# x2 = (R - 2.52)/0.26, x3 = (W - 1.25)/0.25, x4 = (L - 2)/0.5
HELI_CODED = {
    "x1": [-1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, 0, 0, -2, 2] + [0] * 10,
    "x2": [-1, -1, 1, 1] * 4 + [0, 0, 0, 0, -2, 2] + [0] * 8,
    "x3": ([-1] * 4 + [1] * 4) * 2 + [0] * 6 + [-2, 2] + [0] * 6,
    "x4": [-1] * 8 + [1] * 8 + [0] * 8 + [-2, 2, 0, 0, 0, 0],
}
HELI_AVE = [367, 369, 374, 370, 372, 355, 397, 377, 350, 373, 358, 363, 344, 355, 370, 362, 377,
            375, 361, 364, 355, 373, 361, 360, 380, 360, 370, 368, 369, 366]  # fmt: skip
HELI_CODING = {"A": ("x1", 12.4, 0.6), "R": ("x2", 2.52, 0.26), "W": ("x3", 1.25, 0.25),
               "L": ("x4", 2.0, 0.5)}  # fmt: skip


def heli_frame() -> pd.DataFrame:
    """heli in natural units, with its blocks (18 runs, then 12) and ``ave``."""
    frame = pd.DataFrame({name: centre + step * np.array(HELI_CODED[x])
                          for name, (x, centre, step) in HELI_CODING.items()})  # fmt: skip
    frame["block"] = ["1"] * 18 + ["2"] * 12
    frame["ave"] = HELI_AVE
    return frame
