"""Response surfaces against published, printed analyses (R package rsm, version 2.10.6).

Every number asserted here is copied from a printed output and is matched to its last printed
digit (half a unit in the last place). Sources, in the CRAN mirror on GitHub (cran/rsm):

* ``R/datasets.R``: the data of ChemReact (Myers, Montgomery and Anderson-Cook 2009, Table 7.6),
  heli (Box, Hunter and Hunter 2005, Table 12.5) and codata (ibid., Table 10.17);
* ``inst/doc/article-JSS.html`` (vignette ``article-JSS.rmd``): ``summary(CR2.rsm)``,
  ``summary(heli.rsm)`` and ``canonical(CO.rsm, threshold = 0)``;
* ``inst/doc/illus.html`` (vignette ``illus.rmd``, the cake-baking illustration): the data of
  ``expt1``, ``expt3``, ``expt4`` and ``expt7`` and ``summary(anal1)``, ``summary(anal4)``,
  ``summary(anal7)``.

Coding. rsm codes x = (natural - centre) / step with the step of the first block (for example
Time = 85 ± 5), so star points sit at ±α; ``fit_response_surface`` codes the observed range to
[-1, 1]. With a = half range / step (α here), x_rsm = a x_ours, so b_i(rsm) = b_i / a and
b_ij(rsm) = b_ij / (a_i a_j); t values, sums of squares, the stationary point in natural units
and predictions do not depend on the coding. rsm's blocks are treatment contrasts (Block2 =
block 2 - block 1); ours are sum-to-zero (block[1] = block 1 - the average block), so with two
blocks Block2 = -2 block[1] and rsm's intercept = ours + block[1]. rsm prints the ANOVA of the
first-order (FO), two-way-interaction (TWI) and pure-quadratic (PQ) groups; linear terms and
interactions in these designs are orthogonal to every other term, so FO and TWI are the sums of
our per-term sums of squares.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from rsm_examples import (
    CHEM_REACT,
    HELI_CODING,
    heli_frame,
    linear,
    printed,
)

from analysis.stats.surface import fit_response_surface


def rsm_coefficients(fit, steps: dict[str, float]) -> dict[str, float]:
    """Our coefficients in rsm's coding (x_rsm = (natural - centre) / step), factor terms only."""
    scale = {n: (fit.coding[n].high - fit.coding[n].low) / 2 / s for n, s in steps.items()}
    out = {}
    for term, b in fit.coefficients["estimate"].items():
        if term in scale:
            out[term] = b / scale[term]
        elif term.startswith("I("):
            name = term[2:].split(" ")[0]
            out[f"{name}^2"] = b / scale[name] ** 2
        elif ":" in term:
            a, c = term.split(":")
            out[term] = b / (scale[a] * scale[c])
    return out


def group_ss(fit, kind: str) -> float:
    rows = [t for t in fit.anova.index if t in fit.factors] if kind == "FO" else [
        t for t in fit.anova.index if ":" in str(t)]  # fmt: skip
    return float(fit.anova.loc[rows, "sum_sq"].sum())


def check_anova(fit, lines: dict[str, tuple[int, str]]) -> None:
    """``lines``: name -> (df, printed sum of squares) for Block, FO, TWI, Residuals, Lack of fit
    and Pure error."""
    lof = fit.lack_of_fit
    for name, (df, ss) in lines.items():
        if name == "Residuals":
            assert fit.error_df == df
            printed(fit.error_ms * fit.error_df, ss)
        elif name == "Lack of fit":
            assert lof["df_lack_of_fit"] == df
            printed(lof["ss_lack_of_fit"], ss)
        elif name == "Pure error":
            assert lof["df_pure_error"] == df
            printed(lof["ss_pure_error"], ss)
        elif name in ("FO", "TWI"):
            printed(group_ss(fit, name), ss)
        else:  # the block line
            assert fit.anova.loc[name, "df"] == df
            printed(fit.anova.loc[name, "sum_sq"], ss)


# ---------------------------------------------------------------------------------------------
# ChemReact: a central composite design in two blocks (R/datasets.R; article-JSS.html,
# summary(CR2.rsm) with CR2 = djoin(CR1, ChemReact2), x1 = (Time - 85)/5, x2 = (Temp - 175)/5)
# ---------------------------------------------------------------------------------------------
def chem_react(blocks: str | None = "Block"):
    return fit_response_surface(CHEM_REACT, "Yield", ["Time", "Temp"], goal="max",
                                scales=linear("Time", "Temp"), blocks=blocks)  # fmt: skip


def test_chem_react_in_two_blocks_matches_rsm():
    fit = chem_react()
    coef = rsm_coefficients(fit, {"Time": 5, "Temp": 5})
    printed(coef["Time"], "0.932541")
    printed(coef["Temp"], "0.577712")
    printed(coef["Time:Temp"], "0.125000")
    printed(coef["Time^2"], "-1.308555")
    printed(coef["Temp^2"], "-0.933442")
    block = fit.coefficients.loc["Block[B1]", "estimate"]  # B1 - average = -Block2 / 2
    printed(-2 * block, "-4.457530")
    printed(fit.coefficients.loc["Intercept", "estimate"] + block, "84.095427")
    t = fit.coefficients["estimate"] / fit.coefficients["std_err"]
    printed(t["Time"], "16.162")
    printed(t["I(Temp ** 2)"], "-15.541")
    printed(fit.r2, "0.9981")
    printed(fit.adj_r2, "0.9964")
    check_anova(fit, {"Block": (1, "69.531"), "FO": (2, "9.626"), "TWI": (1, "0.063"),
                      "Residuals": (7, "0.186"), "Lack of fit": (3, "0.053"),
                      "Pure error": (4, "0.133")})  # fmt: skip
    printed(fit.anova.loc["Block", "F"], "2611.0950")
    printed(fit.lack_of_fit["f"], "0.5307")
    printed(fit.lack_of_fit_p, "0.6851")
    assert fit.stationary_kind == "maximum"
    printed(fit.stationary_point["Time"], "86.86148")
    printed(fit.stationary_point["Temp"], "176.67190")
    # the fitted value there, from the printed coefficients: the average block's intercept
    # (84.095427 - 4.457530 / 2) + x_s' b / 2 at x_s = (0.3722954, 0.3343802)
    expected = 84.095427 - 4.457530 / 2 + (0.932541 * 0.3722954 + 0.577712 * 0.3343802) / 2
    at = fit.predict(pd.DataFrame([fit.stationary_point]))["mean"].iloc[0]
    assert at == pytest.approx(expected, abs=5e-6)
    assert fit.optimum == pytest.approx(fit.stationary_point, abs=1e-4)  # inside the region
    assert fit.predicted == pytest.approx(expected, abs=5e-6)


def test_chem_react_without_its_blocks_puts_the_block_shift_into_the_error():
    """Ignoring the blocks puts the block shift into the error: lack of fit on 3 df against 5 df
    of pure error across blocks instead of 4 within them."""
    fit = chem_react(blocks=None)
    assert fit.lack_of_fit["df_pure_error"] == 5 and fit.lack_of_fit["df_lack_of_fit"] == 3
    assert fit.error_ms > 100 * chem_react().error_ms


# ---------------------------------------------------------------------------------------------
# heli: a central composite design in four factors and two blocks (R/datasets.R, coded with
# x1 = (A - 12.4)/0.6, x2 = (R - 2.52)/0.26, x3 = (W - 1.25)/0.25, x4 = (L - 2)/0.5;
# article-JSS.html, summary(heli.rsm))
# ---------------------------------------------------------------------------------------------
def test_paper_helicopter_in_two_blocks_matches_rsm():
    frame = heli_frame()
    fit = fit_response_surface(frame, "ave", list(HELI_CODING), goal="max",
                               scales=linear(*HELI_CODING), blocks="block")  # fmt: skip
    coef = rsm_coefficients(fit, {n: s for n, (_, _, s) in HELI_CODING.items()})
    for term, text in {"A": "-0.083333", "R": "5.083333", "W": "0.250000", "L": "-6.083333",
                       "A:R": "-2.875000", "A:W": "-3.750000", "A:L": "4.375000",
                       "R:W": "4.625000", "R:L": "-1.500000", "W:L": "-2.125000",
                       "A^2": "-2.037500", "R^2": "-1.662500", "W^2": "-2.537500",
                       "L^2": "-0.162500"}.items():  # fmt: skip
        printed(coef[term], text)
    block = fit.coefficients.loc["block[1]", "estimate"]
    printed(-2 * block, "-2.950000")
    printed(fit.coefficients.loc["Intercept", "estimate"] + block, "372.800000")
    printed(fit.r2, "0.9555")
    printed(fit.adj_r2, "0.9078")
    check_anova(fit, {"block": (1, "16.81"), "FO": (4, "1510.00"), "TWI": (6, "1114.00"),
                      "Residuals": (14, "136.15"), "Lack of fit": (10, "125.40"),
                      "Pure error": (4, "10.75")})  # fmt: skip
    printed(fit.anova.loc["block", "F"], "1.7281")
    printed(fit.lack_of_fit["f"], "4.6660")
    printed(fit.lack_of_fit_p, "0.075500")
    assert fit.stationary_kind == "saddle"
    for name, text in {"A": "12.916426", "R": "2.434015", "W": "1.040128",
                       "L": "1.941927"}.items():  # fmt: skip
        printed(fit.stationary_point[name], text)
    # the fitted value there from the printed coefficients: b0 of the average block + x_s' b / 2
    xs = np.array([0.8607107, -0.3307115, -0.8394866, -0.1161465])
    b = np.array([-0.083333, 5.083333, 0.25, -6.083333])
    expected = 372.8 - 2.95 / 2 + xs @ b / 2
    at = fit.predict(pd.DataFrame([fit.stationary_point]))["mean"].iloc[0]
    assert at == pytest.approx(expected, abs=5e-5)


# ---------------------------------------------------------------------------------------------
# The cake-baking illustration (illus.html): expt7, a central composite design in two blocks
# with x1 = (flour - 1.25)/0.1, x2 = (sugar - 0.3)/0.1, x3 = (butter - 0.3)/0.1; summary(anal7)
# ---------------------------------------------------------------------------------------------
EXPT7 = pd.DataFrame(
    [(1.15, 0.2, 0.4, 1, 26.6), (1.15, 0.2, 0.2, 1, 25.6), (1.35, 0.2, 0.4, 1, 26.6),
     (1.15, 0.4, 0.2, 1, 26.2), (1.35, 0.4, 0.4, 1, 24.5), (1.15, 0.4, 0.4, 1, 27.3),
     (1.35, 0.2, 0.2, 1, 23.5), (1.35, 0.4, 0.2, 1, 24.7), (1.25, 0.3, 0.3, 2, 27.9),
     (1.45, 0.3, 0.3, 2, 22.0), (1.25, 0.3, 0.1, 2, 25.2), (1.25, 0.1, 0.3, 2, 26.5),
     (1.25, 0.5, 0.3, 2, 25.9), (1.25, 0.3, 0.5, 2, 27.8), (1.05, 0.3, 0.3, 2, 26.0),
     (1.25, 0.3, 0.3, 2, 29.3)],
    columns=["flour", "sugar", "butter", "Block", "rating"],
)  # fmt: skip
CAKE = ["flour", "sugar", "butter"]


def test_cake_central_composite_in_two_blocks_matches_rsm():
    fit = fit_response_surface(EXPT7, "rating", CAKE, goal="max", scales=linear(*CAKE),
                               blocks="Block")  # fmt: skip
    coef = rsm_coefficients(fit, dict.fromkeys(CAKE, 0.1))
    for term, text in {"flour": "-0.90000", "sugar": "-0.05000", "butter": "0.63750",
                       "flour:sugar": "-0.27500", "flour:butter": "0.10000",
                       "sugar:butter": "-0.40000", "flour^2": "-1.15000", "sugar^2": "-0.60000",
                       "butter^2": "-0.52500"}.items():  # fmt: skip
        printed(coef[term], text)
    block = fit.coefficients.loc["Block[1]", "estimate"]
    printed(-2 * block, "0.70000")
    printed(fit.coefficients.loc["Intercept", "estimate"] + block, "27.90000")
    t = fit.coefficients["estimate"] / fit.coefficients["std_err"]
    printed(t["flour"], "-4.8564")
    printed(t["I(flour ** 2)"], "-6.2055")
    printed(fit.r2, "0.9421")
    printed(fit.adj_r2, "0.8262")
    check_anova(fit, {"Block": (1, "1.9600"), "FO": (3, "19.5025"), "TWI": (3, "1.9650"),
                      "Residuals": (5, "2.7475"), "Lack of fit": (4, "1.7675"),
                      "Pure error": (1, "0.9800")})  # fmt: skip
    printed(fit.anova.loc["Block", "F"], "3.5669")
    printed(fit.anova.loc["Block", "PR(>F)"], "0.117568")
    printed(fit.lack_of_fit["f"], "0.4509")
    printed(fit.lack_of_fit_p, "0.789337")
    assert fit.stationary_kind == "maximum"
    for name, text in {"flour": "1.2157809", "sugar": "0.2822723", "butter": "0.3642087"}.items():
        printed(fit.stationary_point[name], text)
    xs = np.array([-0.3421914, -0.1772769, 0.6420873])
    expected = 27.9 + 0.7 / 2 + xs @ np.array([-0.9, -0.05, 0.6375]) / 2
    at = fit.predict(pd.DataFrame([fit.stationary_point]))["mean"].iloc[0]
    assert at == pytest.approx(expected, abs=5e-6)
    assert fit.optimum == pytest.approx(fit.stationary_point, abs=1e-4)
    assert fit.predicted == pytest.approx(expected, abs=5e-6)


# the cake's first experiments: a half fraction (x3 = x1 x2) plus 4 centre points, first order
EXPT1 = pd.DataFrame(
    [(1.1, 0.4, 0.15, 28.9), (1.0, 0.5, 0.25, 25.5), (0.9, 0.6, 0.15, 20.2),
     (1.1, 0.6, 0.35, 27.1), (0.9, 0.4, 0.35, 21.5), (1.0, 0.5, 0.25, 24.7),
     (1.0, 0.5, 0.25, 25.0), (1.0, 0.5, 0.25, 24.7)],
    columns=["flour", "sugar", "butter", "rating"],
)  # fmt: skip
EXPT3 = pd.DataFrame(
    [(1.25, 0.45, 0.25, 26.6), (1.35, 0.35, 0.15, 25.3), (1.35, 0.55, 0.35, 23.7),
     (1.15, 0.55, 0.15, 26.0), (1.25, 0.45, 0.25, 27.8), (1.25, 0.45, 0.25, 26.2),
     (1.15, 0.35, 0.35, 27.3), (1.25, 0.45, 0.25, 27.2)],
    columns=["flour", "sugar", "butter", "rating"],
)  # fmt: skip
EXPT4 = pd.DataFrame(
    [(1.15, 0.35, 0.15, 34.0), (1.25, 0.45, 0.25, 35.1), (1.35, 0.55, 0.15, 31.0),
     (1.15, 0.55, 0.35, 34.6), (1.25, 0.45, 0.25, 35.5), (1.25, 0.45, 0.25, 34.9),
     (1.25, 0.45, 0.25, 35.1), (1.35, 0.35, 0.35, 33.3)],
    columns=["flour", "sugar", "butter", "rating"],
)  # fmt: skip


def first_order(frame: pd.DataFrame, blocks: str | None = None):
    return fit_response_surface(frame, "rating", CAKE, goal="max", scales=linear(*CAKE),
                                quadratic=False, interactions=False, blocks=blocks)  # fmt: skip


def test_cake_first_order_without_blocks_matches_rsm():
    """summary(anal1): coded ±0.1 around (1, 0.5, 0.25) is our coding, so no conversion."""
    fit = first_order(EXPT1)
    for term, text in {"Intercept": "24.70000", "flour": "3.57500", "sugar": "-0.77500",
                       "butter": "-0.12500"}.items():  # fmt: skip
        printed(fit.coefficients.loc[term, "estimate"], text)
    printed(fit.coefficients.loc["flour", "std_err"], "0.25403")
    printed(fit.r2, "0.9811")
    printed(fit.adj_r2, "0.9669")
    printed(fit.model_f, "69.2")
    assert fit.model_df == 3 and fit.error_df == 4
    printed(fit.model_p, "0.0006658")
    check_anova(fit, {"FO": (3, "53.587"), "Residuals": (4, "1.033"),
                      "Lack of fit": (1, "0.605"), "Pure error": (3, "0.427")})  # fmt: skip
    printed(fit.lack_of_fit["f"], "4.2456")
    printed(fit.lack_of_fit_p, "0.1314343")


def test_cake_first_order_in_two_blocks_matches_rsm():
    """summary(anal3) (one block: the model does not beat the mean, P = 0.30) and
    summary(anal4) (with its foldover as a second block)."""
    alone = first_order(EXPT3)
    printed(alone.model_f, "1.7132")
    printed(alone.model_p, "0.30145")
    both = pd.concat([EXPT3.assign(Block="1"), EXPT4.assign(Block="2")], ignore_index=True)
    fit = first_order(both, blocks="Block")
    for term, text in {"flour": "-1.07500", "sugar": "-0.57500", "butter": "0.32500"}.items():
        printed(fit.coefficients.loc[term, "estimate"], text)
        printed(fit.coefficients.loc[term, "std_err"], "0.40329")
    block = fit.coefficients.loc["Block[1]", "estimate"]
    printed(-2 * block, "7.92500")
    printed(fit.coefficients.loc["Intercept", "estimate"] + block, "26.26250")
    printed(fit.r2, "0.9486")
    printed(fit.adj_r2, "0.9299")
    check_anova(fit, {"Block": (1, "251.223"), "FO": (3, "12.735"), "Residuals": (11, "14.313"),
                      "Lack of fit": (5, "12.653"), "Pure error": (6, "1.660")})  # fmt: skip
    printed(fit.anova.loc["Block", "F"], "193.0793")
    printed(fit.model_f, "3.2625")  # rsm's FO line: the factor terms after the block
    printed(fit.model_p, "0.063177")
    printed(fit.lack_of_fit["f"], "9.1464")
    printed(fit.lack_of_fit_p, "0.008934")


# ---------------------------------------------------------------------------------------------
# codata: a 3² design in one block, replicated (R/datasets.R, coded with
# x1 = (Ethanol - 0.2)/0.1, x2 = A.F.ratio - 15; article-JSS.html, canonical(CO.rsm, threshold = 0))
# ---------------------------------------------------------------------------------------------
CODATA = pd.DataFrame({
    "x1": [-1, -1, 0, 0, 1, 1, -1, -1, 0, 0, 1, 1, -1, -1, 0, 0, 1, 1],
    "x2": [-1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1],
    "CO": [61.9, 65.6, 80.9, 78, 89.7, 93.8, 72.1, 67.3, 80.1, 81.4, 77.8, 74.8, 66.4, 68.2,
           68.9, 66, 60.2, 57.9],
})  # fmt: skip


def test_co_emissions_saddle_far_outside_matches_rsm():
    frame = pd.DataFrame({"Ethanol": 0.2 + 0.1 * CODATA["x1"], "AF": 15 + CODATA["x2"],
                          "CO": CODATA["CO"]})  # fmt: skip
    fit = fit_response_surface(frame, "CO", ["Ethanol", "AF"], goal="max",
                               scales=linear("Ethanol", "AF"))  # fmt: skip
    b = fit.coefficients["estimate"]  # our coding is rsm's here (±1 = the observed range)
    second = np.array([[b["I(Ethanol ** 2)"], b["Ethanol:AF"] / 2],
                       [b["Ethanol:AF"] / 2, b["I(AF ** 2)"]]])  # fmt: skip
    low, high = np.linalg.eigvalsh(second)
    printed(high, "0.1868328")
    printed(low, "-8.8868328")
    assert fit.stationary_kind == "saddle"
    printed((fit.stationary_point["Ethanol"] - 0.2) / 0.1, "-14.81387")
    printed(fit.stationary_point["AF"] - 15, "15.44149")
    assert "the stationary point lies outside the design region" in fit.notes
