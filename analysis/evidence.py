"""The contrastive representation evidence card (fourteen sections, from the receiver's job to
source return) and the first technical release gate (twelve items), filled only from what a
study's record shows: the results frame of
:mod:`analysis.load` (one row per trial) and its ``attrs``.

    card = evidence_card(read_results("studies/default-digits/results.parquet"))
    print(card.to_markdown())

Anything the record does not carry is reported as "not measured", never guessed: a missing
column, a trial without metrics (failed, killed) or a study of one trial never raises.
Summaries of metrics use finished trials only; cost counts every trial.

Source return is the one section the frame cannot fill: its examples are per-trial artifacts
(held-out anchors with their positive and hardest negatives). The study side passes the ones it
has as ``evidence_card(df, source_return={label: table})`` (see :func:`evidence_card`).
"""

from __future__ import annotations

import contextlib
import functools
import math
import numbers
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from types import MappingProxyType
from typing import Literal

import pandas as pd

from analysis.baselines import NAMES as BASELINE_NAMES
from analysis.baselines import baselines_of, counterpart
from trainables.augment import strength_parameters
from trainables.corruption_families import COVERED_BY, covered

GateStatus = Literal["pass", "fail", "not measured"]
GATE_STATUSES: tuple[str, ...] = ("pass", "fail", "not measured")
NOT_MEASURED = "not measured"

GATE_ITEMS: tuple[str, ...] = (
    "The InfoNCE implementation matches a checked finite example.",
    "Effective candidate count is documented across devices.",
    "Temperature and similarity scale are reported together.",
    "Positive-pair transformations are classified by the information they preserve and destroy.",
    "False-negative risk is measured on at least a diagnostic subset.",
    "Hard-negative mining includes semantic-validity checks.",
    "Projection-head and encoder representations are evaluated separately.",
    "Alignment and uniformity are inspected conditionally, not only as global averages.",
    "Multi-positive data are not forced into one-positive supervision without justification.",
    "Cross-modal or temporal alignment error is measured where relevant.",
    "Batch sampling and distributed negative policies are part of the reproducibility record.",
    "The public invariance claim is no broader than the transformations actually validated.",
)

SECTION_TITLES: tuple[str, ...] = (
    "Receiver job", "Positive relation", "Negative relation", "Augmentations", "Similarity",
    "Temperature", "Effective candidates", "Representation layer", "Geometry", "Transfer",
    "Shift tests", "Subgroups", "Cost", "Source return",
)  # fmt: skip

PROBES: tuple[str, ...] = (
    "probe/knn_top1_h", "probe/knn_top1_z", "probe/linear_top1_h", "probe/linear_top1_z",
)  # fmt: skip
DEFAULT_TARGET = "probe/knn_top1_h"
SPACES = {"h": "h (encoder output)", "z": "z (projection-head output)"}
GEOMETRY = ("align", "uniform", "effective_rank", "dim_std_min", "dim_std_mean")
# Columns that would record a queue or memory-bank candidate pool, were one used (a
# cross-device gather is recorded by the trial fields workers and negatives).
POOL_COLUMNS = ("queue_size", "memory_bank")
# Per held-out class geometry, {h,z}/<name>: the worst class (the highest value: alignment and
# uniformity are both lower-is-better) and the spread (highest minus lowest class).
CLASS_GEOMETRY = ("align_worst_class", "align_class_spread", "uniform_worst_class",
                  "uniform_class_spread")  # fmt: skip
# Per-class and per-group probe accuracy, <probe>_<suffix>: gap = overall top-1 - worst.
SUBGROUP_SUFFIXES = ("worst_class", "class_gap", "worst_group", "group_gap")
# Alignment (Wang & Isola 2020: the mean squared distance between the normalised features of a
# positive pair) of two independent uniform points on the unit sphere: E‖x − y‖² = 2 − 2E[x·y]
# = 2. A class at or above it has positives no closer than unrelated inputs.
NO_INFORMATION_ALIGNMENT = 2.0
# A shift-test family "holds up" at a design point when the point's top-1 under corruption,
# averaged over the severities (and over the point's finished replicates), is at most this much
# below its clean top-1 (absolute, 0.05 = 5 percentage points).
HOLD_UP_DROP = 0.05
# The rows of one trial's source-return artifact (8 held-out anchors, each with its positive and
# its three hardest negatives, role positive | negative_1 | negative_2 | negative_3).
SOURCE_RETURN_COLUMNS = ("anchor", "anchor_label", "role", "index", "label", "similarity",
                         "false_negative")  # fmt: skip


# ---------------------------------------------------------------- augmentation classification
@dataclass(frozen=True)
class AugmentationInfo:
    """What one augmentation component keeps and removes; ``magnitude(s)`` at strength s (the
    formulas of :mod:`trainables.augment`)."""

    preserves: str
    destroys: str
    magnitude: Callable[[float], str]


def _magnitude_words(component: str, s: float) -> str:
    """One component's parameters at strength s, in words (the table is
    :func:`trainables.augment.strength_parameters`)."""
    p = strength_parameters(component, s)
    if component == "crop":
        return (
            f"area {p['area_min']:.2f}-1 of the image, aspect "
            f"{p['aspect_min']:.2f}-{p['aspect_max']:.2f}"
        )
    if component == "flip":
        return f"horizontal, p = {p['p']:.2f}"
    if component == "grayscale":
        return f"p = {p['p']:.2f} (RGB only)"
    if component == "rotate":
        return f"angle uniform in ±{p['degrees']:.1f}°"
    if component == "color":
        return (
            f"p = {p['p']:.1f}; brightness, contrast, saturation x[{p['factor_min']:.2f}, "
            f"{p['factor_max']:.2f}], hue ±{p['hue']:.2f} turn"
        )
    if component == "blur":
        return (
            f"p = {p['p']:.1f}, Gaussian sigma up to {p['sigma_per_32px']:.2f} px per 32 px of side"
        )
    if component == "noise":
        return f"additive Gaussian, std {p['std']:.3g} on [0, 1] pixels (images)"
    return (
        f"p = {p['p']:.1f}, one box of {p['area_min']:.2f}-{p['area_max']:.2f} of the area, "
        "filled with the dataset mean"
    )


_WORDS = {
    "crop": (
        "local shape and texture inside the kept box; identity when the box covers the object",
        "absolute position and scale, and everything outside the box (global layout)",
    ),
    "flip": (
        "shape up to mirroring, texture, colour, scale",
        "left-right orientation (handedness, reading direction)",
    ),
    "rotate": (
        "shape up to a small rotation, texture, colour, scale",
        "absolute orientation and slant within the angle range",
    ),
    "color": (
        "spatial structure: shape, edges, layout",
        "absolute brightness and contrast, and (RGB only) hue and saturation statistics",
    ),
    "grayscale": (
        "luminance, shape, texture",
        "chroma: hue and saturation (identity on 1-channel images)",
    ),
    "blur": (
        "low spatial frequencies: coarse shape, layout, colour",
        "high spatial frequencies: fine texture, sharp edges, small details",
    ),
    "noise": (
        "shape, layout and mean intensities (vectors: position beyond the noise scale)",
        "exact pixel values and low-amplitude fine detail (vectors: exact position)",
    ),
    "erase": (
        "the rest of the image and its global layout",
        "the content of one occluded rectangle (any single local part)",
    ),
}
AUGMENTATION_INFO: Mapping[str, AugmentationInfo] = MappingProxyType(
    {
        name: AugmentationInfo(keeps, removes, functools.partial(_magnitude_words, name))
        for name, (keeps, removes) in _WORDS.items()
    }
)


# ---------------------------------------------------------------------------- the card itself
@dataclass(frozen=True)
class Table:
    """A small table of formatted cells, with an optional caption printed above it."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", tuple(map(str, self.columns)))
        object.__setattr__(self, "rows", tuple(tuple(map(str, r)) for r in self.rows))

    def to_markdown(self) -> str:
        if not self.rows:
            return self.caption or "(no rows)"
        lines = [self.caption, ""] if self.caption else []
        lines.append("| " + " | ".join(map(_cell, self.columns)) + " |")
        lines.append("|" + "---|" * len(self.columns))
        lines += ["| " + " | ".join(map(_cell, row)) + " |" for row in self.rows]
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {
            "caption": self.caption,
            "columns": list(self.columns),
            "rows": list(map(list, self.rows)),
        }


Section = str | Table


@dataclass(frozen=True)
class GateItem:
    number: int
    text: str
    status: GateStatus
    evidence: str

    def __post_init__(self) -> None:
        if self.status not in GATE_STATUSES:
            raise ValueError(f"status must be one of {GATE_STATUSES}, got {self.status!r}")


@dataclass(frozen=True)
class EvidenceCard:
    """Sections in :data:`SECTION_TITLES` order (title -> markdown text or a :class:`Table`)
    and the release gate."""

    study: str
    n_trials: int
    sections: Mapping[str, Section]
    gate: tuple[GateItem, ...]
    summary: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "sections", MappingProxyType(dict(self.sections)))
        object.__setattr__(self, "gate", tuple(self.gate))

    def to_markdown(self) -> str:
        parts = [f"# Evidence card: {self.study or '(unnamed study)'}", self.summary]
        for title, body in self.sections.items():
            parts.append(
                f"## {title}\n\n" + (body if isinstance(body, str) else body.to_markdown())
            )
        gate = Table(
            ("#", "item", "status", "evidence"),
            tuple((str(g.number), g.text, g.status, g.evidence) for g in self.gate),
        )
        parts.append("## Release gate\n\n" + gate.to_markdown())
        return "\n\n".join(p for p in parts if p) + "\n"

    def to_json(self) -> dict:
        sections = {t: b if isinstance(b, str) else b.to_json() for t, b in self.sections.items()}
        return {
            "study": self.study,
            "n_trials": self.n_trials,
            "summary": self.summary,
            "sections": sections,
            "gate": [asdict(g) for g in self.gate],
        }


def evidence_card(
    df: pd.DataFrame, source_return: Mapping[str, pd.DataFrame | None] | None = None
) -> EvidenceCard:
    """The evidence card and release gate of one study's results frame (see :mod:`analysis.load`).

    ``source_return`` holds the source-return examples the study has, which the frame cannot
    carry: a label naming the point (e.g. "best point p002 (τ=0.5, B=64)") -> that trial's
    artifact table, with the columns of :data:`SOURCE_RETURN_COLUMNS` (one row per anchor and
    role), or None when only its panel is at hand (the report shows it; the card says so and
    gives no numbers). None or empty: the section says "not measured"."""
    attrs = dict(df.attrs)
    builders = dict(zip(SECTION_TITLES, _SECTION_BUILDERS, strict=True))
    sections = {title: build(df, attrs) for title, build in builders.items()}
    sections["Source return"] = source_return_section(source_return)
    return EvidenceCard(
        study=str(attrs.get("study") or _first(df, "study") or ""),
        n_trials=len(df),
        sections=sections,
        gate=release_gate(df),
        summary=_summary(df, attrs),
    )


def release_gate(df: pd.DataFrame) -> tuple[GateItem, ...]:
    """The twelve release-gate items, each with a status and one line of evidence from the frame."""
    attrs = dict(df.attrs)
    return tuple(
        GateItem(n, text, *rule(df, attrs))
        for n, (text, rule) in enumerate(zip(GATE_ITEMS, _GATE_RULES, strict=True), start=1)
    )


# ------------------------------------------------------------------------------- small helpers
def _cell(x: object) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def _fmt(x: object) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, numbers.Real) and not isinstance(x, bool):
        if not math.isfinite(x):
            return "n/a"
        return str(int(x)) if float(x).is_integer() and abs(x) < 1e12 else f"{x:.4g}"
    return str(x)


def _num(df: pd.DataFrame, col: str) -> pd.Series | None:
    return pd.to_numeric(df[col], errors="coerce") if col in df.columns else None


def _finished(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "finished"] if "status" in df.columns else df


def _first(df: pd.DataFrame, col: str) -> object:
    return df[col].dropna().iloc[0] if col in df.columns and df[col].notna().any() else None


def _distinct(df: pd.DataFrame, col: str) -> list[str]:
    if col not in df.columns:
        return []
    values = df[col].dropna().unique().tolist()
    with contextlib.suppress(TypeError):
        values = sorted(values)
    return [_fmt(v) for v in values]


def _listing(df: pd.DataFrame, col: str) -> str:
    return ", ".join(_distinct(df, col)) or "not recorded"


def _mean_sd(s: pd.Series) -> str:
    s = s.dropna()
    if s.empty:
        return "n/a"
    sd = f" ± {s.std(ddof=1):.3f}" if len(s) > 1 else ""
    return f"{s.mean():.3f}{sd} (n={len(s)})"


def _range(s: pd.Series | None) -> str:
    s = s.dropna() if s is not None else None
    if s is None or s.empty:
        return "n/a"
    return _fmt(s.iloc[0]) if s.min() == s.max() else f"{_fmt(s.min())} to {_fmt(s.max())}"


def _is_infonce(df: pd.DataFrame) -> pd.Series:
    if "objective" not in df.columns:
        return pd.Series(True, index=df.index)
    return df["objective"] == "info_nce"


def _target(attrs: dict) -> str:
    target = attrs.get("target")
    metric = target.get("metric") if isinstance(target, dict) else target
    return metric if isinstance(metric, str) and metric else DEFAULT_TARGET


def _candidates(df: pd.DataFrame) -> pd.Series | None:
    """Negatives per anchor, per trial: ``loss/candidates``, else 2B - 2 as derived."""
    logged, derived = _num(df, "loss/candidates"), _num(df, "derived.negatives_per_anchor")
    if logged is None:
        return derived
    return logged if derived is None else logged.fillna(derived)


def _components(df: pd.DataFrame) -> list[str]:
    names = []
    for spec in df["augmentation"].dropna().unique() if "augmentation" in df.columns else []:
        parts = [] if str(spec).strip() in ("", "none") else str(spec).split("+")
        names += [p.strip() for p in parts if p.strip() not in names]
    return names


def _grouped(df: pd.DataFrame) -> pd.Series:
    """Trials whose training data carries groups (toy items of several photos)."""
    photos = _num(df, "toy_photos_per_item")
    if photos is None:
        return pd.Series(False, index=df.index)
    toy = df["dataset"] == "toy" if "dataset" in df.columns else True
    return (photos > 1) & toy


def _point_label(df: pd.DataFrame, point: object, factors: list[str]) -> str:
    rows = df[df["point_id"] == point] if "point_id" in df.columns else df
    values = [f"{f}={_fmt(_first(rows, f))}" for f in factors if f in rows.columns]
    return f"{point} ({', '.join(values)})" if values else str(point)


def _factors(attrs: dict) -> list[str]:
    return [str(f) for f in attrs.get("factors") or []]


def _summary(df: pd.DataFrame, attrs: dict) -> str:
    counts = df["status"].value_counts().to_dict() if "status" in df.columns else {}
    status = ", ".join(f"{v} {k}" for k, v in counts.items()) or "status not recorded"
    factors = ", ".join(_factors(attrs)) or "none recorded"
    design = attrs.get("design") or "not recorded"
    return (
        f"{len(df)} trials ({status}); factors: {factors}; design: {design}; "
        f"spec_sha: {attrs.get('spec_sha') or 'not recorded'}. Settings and numbers below are "
        "read from the results frame and its attrs (protocol descriptions from the project's "
        "code); metric summaries use finished trials only."
    )


# ------------------------------------------------------------------------------------ sections
def receiver_job(df: pd.DataFrame, attrs: dict) -> str:
    present = [p for p in PROBES if p in df.columns]
    if not present:
        return f"{NOT_MEASURED}: no probe/* columns in the record."
    knn = (
        f"weighted cosine kNN top-1 (k = {_listing(df, 'knn_k')}, "
        f"vote temperature {_listing(df, 'knn_temperature')})"
    )
    linear = (
        f"linear top-1 (standardised features, L2-penalised multinomial logistic regression, "
        f"full-batch L-BFGS, at most {_listing(df, 'linear_probe_iters')} iterations)"
    )
    return (
        f"Class recognition on held-out labels, read by frozen-feature probes: {knn} and {linear}; "
        "each fit on a labelled probe-train split and scored on a disjoint held-out split, "
        f"in both h and z. Recorded: {', '.join(present)}. Target metric: {_target(attrs)}"
        f"{'' if attrs.get('target') else ' (the default; attrs carry no target)'}."
    )


def positive_relation(df: pd.DataFrame, attrs: dict) -> str:
    grouped = _grouped(df)
    if grouped.any():
        groups = (
            f"Groups exist in {int(grouped.sum())} trial(s): toy items of "
            f"{_listing(df[grouped], 'toy_photos_per_item')} photos share one item identity"
        )
    else:
        groups = "No groups: one photo per source (toy_photos_per_item = 1 or non-toy data)"
    if "imagefolder" in _distinct(df, "dataset"):
        groups += (
            "; imagefolder trials take groups from root/groups.csv when present, "
            "which the record does not show"
        )
    return (
        "Two independently augmented views of one training source form the positive pair "
        f"(random parameters drawn per sample). Dataset: {_listing(df, 'dataset')}. {groups}. "
        f"group_policy: {_listing(df, 'group_policy')} (negative: group mates are negatives; "
        "mask: dropped from the denominator; positive: extra positives; moot without groups)."
    )


def negative_relation(df: pd.DataFrame, attrs: dict) -> str:
    done = _finished(df)
    cands = _candidates(df)
    rows = candidate_table(df).rows  # (B, W, negatives, recorded, expected, trials)
    per_batch = "; ".join(f"B = {r[0]}: {r[3]}" for r in rows) or "not recorded"
    fnr = _num(done, "sim/false_negative_rate")
    share = _by(done[_is_infonce(done)], "sim/hardest_neg_share", "temperature", "τ")
    return (
        "Every other view in the anchor's training batch is a negative (the other 2B - 2 views; "
        "no mining or reweighting is recorded). Candidates per anchor"
        f"{'' if cands is not None else ' (not recorded)'}: {per_batch}. "
        f"group_policy: {_listing(df, 'group_policy')}. False-negative rate (share of held-out "
        "anchors whose hardest negative in z has the anchor's class label, with the whole "
        f"held-out set as one batch), over finished trials: {_range(fnr)}; a high rate means "
        "an anchor's most strongly repelled negative is usually a same-class view. Hardest "
        "negative's "
        f"share of the anchor's repulsion (InfoNCE, held-out): {share}. Labels are diagnostic "
        "only; the loss never sees them."
    )


def _by(df: pd.DataFrame, col: str, key: str, name: str) -> str:
    """``col``'s range per value of ``key``, e.g. "τ = 0.1: 0.15 to 0.16; τ = 0.5: 0.007"."""
    value = _num(df, col)
    if value is None or value.dropna().empty:
        return "n/a"
    if key not in df.columns:
        return _range(value)
    return "; ".join(f"{name} = {_fmt(k)}: {_range(v)}" for k, v in value.groupby(df[key]))


def augmentations(df: pd.DataFrame, attrs: dict) -> str | Table:
    if "augmentation" not in df.columns:
        return f"{NOT_MEASURED}: no augmentation column in the record."
    strength = "aug_strength" if "aug_strength" in df.columns else None
    keys = ["augmentation"] + ([strength] if strength else [])
    used = df.groupby(keys, dropna=False).size()
    rows = tuple(
        (_fmt(k[0]), _fmt(k[1]) if strength else "not recorded", str(n))
        for k, n in ((k if isinstance(k, tuple) else (k,), n) for k, n in used.items())
    )
    lines = []
    for name in _components(df):
        info = AUGMENTATION_INFO.get(name)
        if info is None:
            lines.append(f"- {name}: UNCLASSIFIED (no AUGMENTATION_INFO entry)")
            continue
        mags = "; ".join(f"s = {_fmt(s)}: {_magnitude(df, name, s)}" for s in _strengths(df))
        lines.append(f"- {name}: destroys {info.destroys}; preserves {info.preserves}. {mags}")
    per = "\n".join(lines) or "- none: the two views are identical"
    head = "Per component used: what it destroys and preserves, and its magnitude at strength s."
    caption = "Compositions used (each view drawn independently, parameters per sample):"
    return Table(("composition", "strength s", "trials"), rows, f"{head}\n\n{per}\n\n{caption}")


def _magnitude(df: pd.DataFrame, name: str, s: float) -> str:
    noise = _num(df, "toy_noise")
    if name == "noise" and "toy" in _distinct(df, "dataset") and noise is not None:
        return f"additive Gaussian on toy vectors, std toy_noise x s = {_range(noise * s)}"
    return AUGMENTATION_INFO[name].magnitude(s)


def _strengths(df: pd.DataFrame) -> list[float]:
    s = _num(df, "aug_strength")
    return sorted(s.dropna().unique().tolist()) if s is not None else []


def similarity(df: pd.DataFrame, attrs: dict) -> str:
    objectives = _distinct(df, "objective")
    text = [f"Objective(s): {', '.join(objectives) or 'not recorded'}."]
    if not objectives or "info_nce" in objectives:
        text.append(
            "InfoNCE: cosine similarity of L2-normalised z, divided by the temperature τ "
            "(logits = cos / τ)."
        )
    au = df[df["objective"] == "align_uniform"] if "objective" in df.columns else df.iloc[:0]
    if len(au):
        text.append(
            "align_uniform: squared Euclidean distance of L2-normalised z (= 2 - 2 cos); "
            f"alignment exponent α = {_listing(au, 'align_alpha')}; uniformity Gaussian kernel "
            f"exp(-t ||u - v||²) with t = uniform_t = {_listing(au, 'uniform_t')}, "
            f"λ·t = lam_t = {_listing(au, 'lam_t')} (λ = {_listing(au, 'derived.lam')})."
        )
    return " ".join(text)


def temperature(df: pd.DataFrame, attrs: dict) -> str | Table:
    nce = df[_is_infonce(df)]
    if "temperature" not in df.columns or nce.empty:
        return f"{NOT_MEASURED}: no InfoNCE trial records a temperature."
    caption = (
        f"τ used: {_listing(nce, 'temperature')}; constant through training (the record has no "
        "temperature schedule, and τ is not learned). Mean target probe "
        f"({_target(attrs)}, finished InfoNCE trials) by τ and candidates per anchor C:"
    )
    table = temperature_table(df, _target(attrs))
    return Table(table.columns, table.rows, caption + ("" if table.rows else " not measured."))


def temperature_table(df: pd.DataFrame, target: str = DEFAULT_TARGET) -> Table:
    """Mean ``target`` of finished InfoNCE trials by temperature (rows) and candidates (columns)."""
    done = _finished(df)
    done = done[_is_infonce(done)]
    value, cands = _num(done, target), _candidates(done)
    if value is None or cands is None or "temperature" not in done.columns:
        return Table(("τ",), ())
    frame = pd.DataFrame({"t": _num(done, "temperature"), "c": cands, "v": value}).dropna()
    cols = sorted(frame["c"].unique())
    rows = []
    for t, at_t in frame.groupby("t"):
        cells = [at_t.loc[at_t["c"] == c, "v"] for c in cols]
        rows.append((_fmt(t), *(f"{v.mean():.3f} (n={len(v)})" if len(v) else "-" for v in cells)))
    return Table(("τ", *(f"C = {_fmt(c)}" for c in cols)), tuple(rows))


def _pools(df: pd.DataFrame) -> pd.DataFrame:
    """Per trial: batch size B, workers W (1 when not recorded), negatives (all | local), the
    candidates per anchor recorded, and those expected: 2B - 2 with every worker's views
    gathered (or one worker), 2(B / W) - 2 with each worker's own batch only."""
    if "batch_size" not in df.columns:
        return pd.DataFrame(columns=["b", "w", "neg", "c", "expected"])
    workers = _num(df, "workers")
    frame = pd.DataFrame({
        "b": _num(df, "batch_size"),
        "w": workers.fillna(1) if workers is not None else 1.0,
        "neg": df["negatives"].fillna("all") if "negatives" in df.columns else "all",
        "c": _candidates(df),
        # mask and positive take same-group candidates out of the pool: then the pool is a bound
        "masked": (df["group_policy"].fillna("negative") != "negative")
                  if "group_policy" in df.columns else False,
    }).dropna(subset=["b"])  # fmt: skip
    pooled = (frame["neg"] == "all") | (frame["w"] == 1)
    frame["expected"] = 2 * frame["b"].where(pooled, frame["b"] // frame["w"]) - 2
    return frame


def _off_pool(frame: pd.DataFrame) -> pd.DataFrame:
    """Trials whose recorded candidates disagree with their pool: other than 2B - 2 (or
    2(B / W) - 2) without a group policy; above it, or none at all, with one (mask, positive)."""
    recorded = frame["c"].notna()
    exact = ~frame["masked"] & (frame["c"] != frame["expected"])
    bounded = frame["masked"] & ((frame["c"] > frame["expected"]) | (frame["c"] <= 0))
    return frame[recorded & (exact | bounded)]


def candidate_table(df: pd.DataFrame) -> Table:
    """(batch size B, workers W, negatives) -> candidates per anchor as recorded
    (``loss/candidates``, else derived) and as expected, with trial counts."""
    columns = ("batch size B", "workers W", "negatives",
               "candidates per anchor (loss/candidates)", "expected", "trials")  # fmt: skip
    frame = _pools(df)
    if _candidates(df) is None or frame.empty:
        return Table(columns, ())
    rows = tuple(
        (
            _fmt(b),
            _fmt(w),
            str(neg),
            _range(g["c"]),
            ("≤ " if g["masked"].any() else "") + _fmt(g["expected"].iloc[0]),
            str(len(g)),
        )
        for (b, w, neg), g in frame.groupby(["b", "w", "neg"])
    )
    return Table(columns, rows)


def _pool_scope(df: pd.DataFrame) -> str:
    """Where each anchor's candidates come from, in words."""
    frame = _pools(df)
    several = frame[frame["w"] > 1] if not frame.empty else frame
    if several.empty:
        return ("One worker per trial: each anchor's candidates are the other 2B - 2 views of "
                "its own batch (no cross-device gather).")  # fmt: skip
    parts = []
    for (w, neg), _ in several.groupby(["w", "neg"]):
        parts.append(
            f"W = {_fmt(w)} workers, negatives {neg}: "
            + ("every worker's views gathered with their gradients, so the other 2B - 2 views "
               "of the global batch B" if neg == "all" else
               "each worker's own B / W sources only, so the other 2(B / W) - 2 views")
        )  # fmt: skip
    return "Measured across devices. " + "; ".join(parts) + "."


def effective_candidates(df: pd.DataFrame, attrs: dict) -> str | Table:
    table = candidate_table(df)
    pools = [c for c in POOL_COLUMNS if c in df.columns]
    scope = _pool_scope(df) + (
        " Candidate pool as recorded: " + "; ".join(f"{c} = {_listing(df, c)}" for c in pools)
        if pools
        else " No queue or memory bank is recorded."
    )
    if "objective" in df.columns and (df["objective"] == "align_uniform").any():
        scope += (
            " align_uniform trials: the uniformity term pairs each view with the other B - 1 "
            "views of its own side (uniform(z1), uniform(z2) averaged), not the 2B - 2 shown."
        )
    if not table.rows:
        return f"{scope} Candidates per anchor: {NOT_MEASURED}."
    return Table(table.columns, table.rows, scope)


def representation_layer(df: pd.DataFrame, attrs: dict) -> str | Table:
    done = _finished(df)
    present = [p for p in PROBES if p in done.columns]
    arch = (
        f"h: {_listing(df, 'encoder')} encoder output, dim {_listing(df, 'feature_dim')}; "
        f"z: {_listing(df, 'projection')} projection head output, "
        f"dim {_listing(df, 'projection_dim')}. "
        "Mean probe top-1 over finished replicates, per point:"
    )
    if not present or done.empty:
        return f"{arch} {NOT_MEASURED}."
    key = "point_id" if "point_id" in done.columns else None
    groups = done.groupby(key, sort=True) if key else [("all", done)]
    rows = tuple(
        (
            _point_label(done, p, _factors(attrs)) if key else "all trials",
            str(len(g)),
            *(_fmt(round(float(_num(g, c).mean()), 4)) for c in present),
        )
        for p, g in groups
    )
    return Table(("point", "n", *present), rows, arch)


def geometry(df: pd.DataFrame, attrs: dict) -> str | Table:
    done = _finished(df)
    rows = []
    for m in (*GEOMETRY, *CLASS_GEOMETRY):
        h, z = _num(done, f"h/{m}"), _num(done, f"z/{m}")
        if h is not None or z is not None:
            rows.append((m, *_mean_and_range(h), *_mean_and_range(z)))
    for m in ("sim/pos_mean", "sim/neg_mean", "sim/neg_q99"):
        if m in done.columns:
            rows.append((m, "-", "-", *_mean_and_range(_num(done, m))))
    if not rows or done.empty:
        return f"{NOT_MEASURED}: no finished trial records geometry metrics."
    caption = (
        f"Held-out positive pairs, {len(done)} finished trials; alignment and uniformity use one "
        "fixed protocol (α = 2, t = 2) whatever the training t; sim/* are cosines in z. "
        "Neighbourhood and class structure: see the kNN probes (Transfer)"
    )
    if _class_geometry(done):
        caption += (
            " and the per-class rows: *_worst_class is the held-out class with the highest "
            "(worst) value among the classes measured"
            + _classes_measured(done)
            + ", *_class_spread the highest minus the lowest class (not measured with fewer than "
            "two), so a global "
            "average can hide a class the spread exposes. Alignment compares only across "
            "trials that share an augmentation pipeline: it measures the positives that "
            "pipeline makes (Wang & Isola 2020)" + _no_information_flag(done)
        )
    else:
        caption += f"; per-class alignment and uniformity: {NOT_MEASURED}"
    return Table(("metric", "h mean", "h range", "z mean", "z range"), tuple(rows), caption + ".")


def _classes_measured(done: pd.DataFrame) -> str:
    """' (on k classes: ...)': how many classes the per-class geometry covered, when recorded
    (a class needs one held-out row for alignment and two for uniformity)."""
    parts = []
    for space in SPACES:
        for m in ("align", "uniform"):
            count = _num(done, f"{space}/{m}_classes")
            if count is not None and count.notna().any():
                parts.append(f"{space} {m} {_range(count)}")
    if not parts:
        return ""
    return f" (classes measured per trial: {'; '.join(parts)})"


def _class_geometry(done: pd.DataFrame) -> dict[str, pd.Series]:
    """The per-class geometry columns ({h,z}/CLASS_GEOMETRY) with a value in some trial."""
    found = {}
    for name in (f"{space}/{m}" for space in SPACES for m in CLASS_GEOMETRY):
        value = _num(done, name)
        if value is not None and value.notna().any():
            found[name] = value
    return found


def _no_information_flag(done: pd.DataFrame) -> str:
    """'. FLAG: ...' naming the trials whose worst class aligns no better than unrelated points."""
    flags = []
    for space in SPACES:
        worst = _num(done, f"{space}/align_worst_class")
        n = 0 if worst is None else int((worst >= NO_INFORMATION_ALIGNMENT).sum())
        if n:
            flags.append(f"{space} in {n} trial(s)")
    if not flags:
        return ""
    return (
        f". FLAG: worst-class alignment at or above {_fmt(NO_INFORMATION_ALIGNMENT)}, the value "
        f"of two independent uniform points on the sphere, {'; '.join(flags)}: that class's "
        "positives are no closer than chance"
    )


def _mean_and_range(s: pd.Series | None) -> tuple[str, str]:
    if s is None or s.dropna().empty:
        return "n/a", "n/a"
    return f"{s.mean():.4g}", _range(s)


def transfer(df: pd.DataFrame, attrs: dict) -> str | Table:
    done = _finished(df)
    rows = [_transfer_row(done, p, attrs) for p in PROBES if p in done.columns]
    rows = [r for r in rows if r]
    if not rows:
        return f"{NOT_MEASURED}: no finished trial records a probe."
    caption = (
        "Linear and kNN probes on held-out labels (few-shot and fine-tuned transfer: "
        f"{NOT_MEASURED}). Best point by mean over its replicates, beside the study's "
        "baselines scored by the same probes on the same split (the raw input answers a z "
        "probe with its h score):"
    )
    kinds = tuple(baselines_of(df))
    cols = ("probe", "best point", "mean ± sd over replicates", "all finished trials",
            *(BASELINE_NAMES.get(k, k) for k in kinds))  # fmt: skip
    if not kinds:
        caption += f" baselines {NOT_MEASURED} (baselines: [] or a study recorded before them)."
    rows = [(*row, *_baseline_cells(df, row[0], kinds)) for row in rows]
    return Table(cols, tuple(rows), caption)


def _baseline_cells(df: pd.DataFrame, probe: str, kinds: tuple[str, ...]) -> tuple[str, ...]:
    """Each baseline's score on ``probe`` (as recorded, a fraction), or not measured."""
    found = baselines_of(df)
    cells = []
    for kind in kinds:
        metrics = found[kind].get("metrics") or {}
        name = counterpart(kind, probe, metrics)
        cells.append(NOT_MEASURED if name is None else f"{float(metrics[name]):.3f}")
    return tuple(cells)


def _transfer_row(done: pd.DataFrame, probe: str, attrs: dict) -> tuple[str, ...] | None:
    value = _num(done, probe)
    if value is None or value.dropna().empty:
        return None
    key = done["point_id"] if "point_id" in done.columns else pd.Series("all", index=done.index)
    means = value.groupby(key).mean().dropna()
    if means.empty:
        return None
    best = means.idxmax()
    label = _point_label(done, best, _factors(attrs)) if "point_id" in done.columns else "all"
    return (probe, label, _mean_sd(value[key == best]), _mean_sd(value))


# ------------------------------------------------------------------------------- shift tests
_SHIFT_COLUMN = re.compile(
    r"shift/(?P<family>[^/]+)/(?:s(?P<severity>\d+)/)?(?P<leaf>(?:knn|linear)_top1_[hz])"
)
_PROBE_COLUMN = re.compile(r"probe/(?:knn|linear)_top1_[hz]")


@dataclass(frozen=True)
class FamilyShift:
    """One corruption family of the shift tests, over the finished trials trained with one
    augmentation: the probe's top-1 drop (its clean value in the frame minus its value under
    the corruption) per severity and averaged over severities, as means over the trials, and
    at the design point where it is largest (mean over the point's replicates).

    ``covered_by``: the augmentation components whose training covers the family
    (``trainables.corruption_families.COVERED_BY``; None for a family it does not name);
    ``covered``: whether this augmentation has one (None when the family or the augmentation
    is unknown);
    ``measured`` of ``trials``: the finished trials with both a clean and a corrupted top-1."""

    augmentation: str
    family: str
    covered_by: tuple[str, ...] | None
    covered: bool | None
    measured: int
    trials: int
    drop_by_severity: tuple[tuple[int, float], ...]
    drop: float
    worst_point: str | None
    worst_point_drop: float

    @property
    def verdict(self) -> str:
        """ "held up" (the worst point's mean drop is at most :data:`HOLD_UP_DROP`), "breaks",
        or "not tested" (no trial measured)."""
        if not self.measured:
            return "not tested"
        return "held up" if self.worst_point_drop <= HOLD_UP_DROP else "breaks"


def shift_probe(df: pd.DataFrame) -> str:
    """The probe the shift tests are judged by: the study's target when it is a probe top-1 with
    shift columns, else ``probe/knn_top1_h``."""
    target = _target(dict(df.attrs))
    if _PROBE_COLUMN.fullmatch(target) and _shift_columns(df, target):
        return target
    return DEFAULT_TARGET


def _shift_columns(df: pd.DataFrame, probe: str) -> dict[str, tuple[str | None, dict[int, str]]]:
    """family -> (its mean-over-severities column or None, severity -> column) for ``probe``."""
    leaf = probe.removeprefix("probe/")
    found: dict[str, tuple[str | None, dict[int, str]]] = {}
    for col in df.columns:
        match = _SHIFT_COLUMN.fullmatch(str(col))
        if match is None or match["leaf"] != leaf:
            continue
        mean, severities = found.get(match["family"], (None, {}))
        if match["severity"] is None:
            mean = str(col)
        else:
            severities = {**severities, int(match["severity"]): str(col)}
        found[match["family"]] = (mean, severities)
    return found


def _family_order() -> dict[str, int]:
    return {family: i for i, family in enumerate(COVERED_BY)}


def _coverage(augmentation: str | None, family: str) -> tuple[tuple[str, ...] | None, bool | None]:
    if family not in COVERED_BY:
        return None, None
    by = tuple(COVERED_BY[family])
    return by, None if augmentation is None else bool(covered(augmentation, family))


def shift_drops(df: pd.DataFrame, probe: str = DEFAULT_TARGET) -> tuple[FamilyShift, ...]:
    """Every (training augmentation, corruption family) of the finished trials, in that order
    (families in ``trainables.corruption_families.COVERED_BY`` order): see
    :class:`FamilyShift`. A family counts for an augmentation's trials when some finished
    trial on the same dataset measured it. Empty when the frame has no shift column for
    ``probe`` or no ``probe`` itself."""
    columns = _shift_columns(df, probe)
    done = _finished(df)
    clean = _num(done, probe)
    if not columns or clean is None or done.empty:
        return ()
    drops = {}
    for family, (mean, severities) in columns.items():
        by_severity = {k: clean - _num(done, c) for k, c in sorted(severities.items())}
        if mean is not None:
            overall = clean - _num(done, mean)
        else:
            overall = pd.concat(by_severity.values(), axis=1).mean(axis=1, skipna=False)
        drops[family] = (overall, by_severity)
    augmentation = (
        done["augmentation"].astype("string").fillna("not recorded")
        if "augmentation" in done.columns
        else pd.Series("not recorded", index=done.index)
    )
    dataset = done["dataset"] if "dataset" in done.columns else pd.Series("", index=done.index)
    point = done["point_id"].astype(str) if "point_id" in done.columns else done.index.astype(str)
    order = _family_order()
    families = sorted(drops, key=lambda f: (order.get(f, len(order)), f))
    rows = []
    for aug in sorted(augmentation.unique()):
        mine = augmentation == aug
        same_data = dataset.isin(dataset[mine].unique())
        for family in families:
            overall, by_severity = drops[family]
            if not overall[same_data].notna().any():
                continue  # a family of another dataset (image corruptions vs toy vectors)
            drop = overall[mine].dropna()
            per_point = drop.groupby(point[drop.index]).mean()
            by, covers = _coverage(None if aug == "not recorded" else str(aug), family)
            rows.append(
                FamilyShift(
                    augmentation=str(aug),
                    family=family,
                    covered_by=by,
                    covered=covers,
                    measured=len(drop),
                    trials=int(mine.sum()),
                    drop_by_severity=tuple(
                        (k, float(v[mine].mean())) for k, v in by_severity.items()
                    ),
                    drop=float(drop.mean()) if len(drop) else math.nan,
                    worst_point=str(per_point.idxmax()) if len(per_point) else None,
                    worst_point_drop=float(per_point.max()) if len(per_point) else math.nan,
                )
            )
    return tuple(rows)


def _covered_cell(row: FamilyShift) -> str:
    if row.covered_by is None:
        return "unknown (family not in trainables.corruption_families.COVERED_BY)"
    names = " or ".join(row.covered_by)
    by = f"covered by {names}" if names else "no augmentation covers it"
    if row.covered is None:
        return f"unknown (augmentation not recorded; {by})"
    return f"yes ({names})" if row.covered else f"no ({by})"


def _family_list(rows: list[FamilyShift]) -> str:
    return ", ".join(f"{r.family} {_fmt(round(r.worst_point_drop, 4))}" for r in rows) or "none"


def invariance_claim(rows: tuple[FamilyShift, ...]) -> dict[str, str]:
    """Per training augmentation, the invariance claim the shift tests support, in words: the
    families its training covers that held up (:data:`HOLD_UP_DROP`), then the covered ones that
    broke, the uncovered ones (held up: robustness observed, not claimed) and the untested."""
    claims = {}
    for aug in dict.fromkeys(r.augmentation for r in rows):
        mine = [r for r in rows if r.augmentation == aug]
        tested = [r for r in mine if r.measured]
        claimed = [r.family for r in tested if r.covered and r.verdict == "held up"]
        broke = [r for r in tested if r.covered and r.verdict == "breaks"]
        free = [r for r in tested if not r.covered and r.verdict == "held up"]
        lost = [r for r in tested if not r.covered and r.verdict == "breaks"]
        untested = [r.family for r in mine if r.measured < r.trials]
        claims[aug] = (
            f"{aug}: claimed invariance to {', '.join(claimed) or 'no tested corruption'}"
            f"; covered by training but breaks: {_family_list(broke)}"
            f"; not covered, held up (robustness observed, not claimed): {_family_list(free)}"
            f"; not covered, breaks: {_family_list(lost)}"
            + (f"; missing in some finished trials: {', '.join(untested)}" if untested else "")
        )
    return claims


def shift_tests(df: pd.DataFrame, attrs: dict) -> str | Table:
    probe = shift_probe(df)
    rows = shift_drops(df, probe)
    if not any(r.measured for r in rows):
        return f"{NOT_MEASURED}: the record names no shifted domain or corruption family."
    severities = sorted({k for r in rows for k, _ in r.drop_by_severity})
    done = _finished(df)
    table_rows = []
    for r in rows:
        by = dict(r.drop_by_severity)
        worst = (
            f"{_point_label(done, r.worst_point, _factors(attrs))}: "
            f"{_fmt(round(r.worst_point_drop, 4))}"
            if r.worst_point is not None and "point_id" in done.columns
            else _fmt(round(r.worst_point_drop, 4))
        )
        table_rows.append((
            r.augmentation, r.family, _covered_cell(r),
            *(_fmt(round(by[k], 4)) if k in by else "-" for k in severities),
            _fmt(round(r.drop, 4)), worst, f"{r.measured}/{r.trials}", r.verdict,
        ))  # fmt: skip
    claims = " ".join(f"{c}." for c in invariance_claim(rows).values())
    others = [
        f"{col}: {_range(_num(done, col))} (clean {_range(_num(done, p))})"
        for p in PROBES
        if (col := f"shift/mean_{p.removeprefix('probe/')}") in done.columns
    ]
    caption = (
        f"Corruption families on the held-out split, judged by {probe}: drop = clean top-1 minus "
        "top-1 under the corruption, mean over finished trials at each severity and over the "
        f"severities. A family holds up when its mean drop over severities is at most "
        f"{_fmt(HOLD_UP_DROP)} at every design point (mean over the point's replicates; the "
        "worst point is shown); it is covered when a component of the trials' training "
        "augmentation trains for it (trainables.corruption_families.COVERED_BY). Seen and unseen "
        "corruptions are kept apart: only covered families that held up are claimed as "
        f"learned invariances. {claims}"
        + (f" Mean over families and severities (shift/mean_*): {'; '.join(others)}." if others
           else "")
        + f" Named domain shifts (other datasets, sensors, styles): {NOT_MEASURED}."
    )  # fmt: skip
    columns = ("training augmentation", "family", "covered by training",
               *(f"drop s{k}" for k in severities), "mean drop", "worst point: mean drop",
               "trials", "verdict")  # fmt: skip
    return Table(columns, tuple(table_rows), caption)


# ------------------------------------------------------------------------------- subgroups
def subgroup_table(df: pd.DataFrame) -> Table:
    """Per probe with per-class (or per-group) results: its overall top-1 and each recorded
    ``<probe>_<suffix>`` of :data:`SUBGROUP_SUFFIXES`, as "mean (range)" over finished trials."""
    done = _finished(df)
    suffixes = [x for x in SUBGROUP_SUFFIXES if any(_values(done, f"{p}_{x}") for p in PROBES)]
    rows = []
    for probe in PROBES:
        cells = [_num(done, f"{probe}_{x}") for x in suffixes]
        if any(_values(done, f"{probe}_{x}") for x in suffixes):
            rows.append((probe, _mean_range(_num(done, probe)), *map(_mean_range, cells)))
    return Table(("probe", "overall", *(x.replace("_", " ") for x in suffixes)), tuple(rows))


def _values(df: pd.DataFrame, col: str) -> bool:
    value = _num(df, col)
    return value is not None and value.notna().any()


def _mean_range(s: pd.Series | None) -> str:
    if s is None or s.dropna().empty:
        return "n/a"
    return f"{_fmt(round(float(s.mean()), 4))} ({_range(s)})"


def _largest_gap(done: pd.DataFrame, attrs: dict, kind: str) -> str:
    """The design point with the largest mean ``<probe>_<kind>_gap`` over its replicates."""
    key = done["point_id"] if "point_id" in done.columns else pd.Series("all", index=done.index)
    best: tuple[float, str, object] | None = None
    for probe in PROBES:
        gap = _num(done, f"{probe}_{kind}_gap")
        means = gap.groupby(key).mean().dropna() if gap is not None else pd.Series(dtype=float)
        if len(means) and (best is None or means.max() > best[0]):
            best = (float(means.max()), probe, means.idxmax())
    if best is None:
        return ""
    where = _point_label(done, best[2], _factors(attrs)) if "point_id" in done.columns else "all"
    return f" Largest {kind} gap: {_fmt(round(best[0], 4))} ({best[1]}) at {where}."


def subgroups(df: pd.DataFrame, attrs: dict) -> str | Table:
    done = _finished(df)
    table = subgroup_table(df)
    geometry = (
        "Per-class alignment and uniformity: see Geometry (*_worst_class, *_class_spread)."
        if _class_geometry(done)
        else f"Per-class alignment and uniformity: {NOT_MEASURED}."
    )
    if "group gap" in table.columns or "worst group" in table.columns:
        groups = ""
    elif _grouped(df).any():
        groups = f" Per-group retrieval: {NOT_MEASURED} (grouped data, no *_worst_group column)."
    else:
        groups = " Per-group retrieval: no groups in the data."
    if not table.rows:
        if not _class_geometry(done):
            return (
                f"{NOT_MEASURED}: only global averages are recorded "
                "(no per-class or per-group metrics)."
            )
        return f"Per-class retrieval: {NOT_MEASURED} (no probe/*_worst_class column). {geometry}"
    caption = (
        "Top-1 of each probe on the held-out class (or group, where the data have groups) where "
        "it is lowest, and the gap = overall top-1 minus that worst class (group); mean (range) "
        f"over {len(done)} finished trials.{_largest_gap(done, attrs, 'class')}"
        f"{_largest_gap(done, attrs, 'group')} {geometry}{groups}"
    )
    return Table(table.columns, table.rows, caption)


def cost(df: pd.DataFrame, attrs: dict) -> str:
    wall = _num(df, "wall_s")
    total = f"{wall.sum():.1f} s" if wall is not None and wall.notna().any() else NOT_MEASURED
    mean = f"{wall.mean():.1f} s" if wall is not None and wall.notna().any() else NOT_MEASURED
    timed = 0 if wall is None else int(wall.notna().sum())
    hours = gpu_hours(df)
    gpu = (attrs.get("resources") or {}).get("gpu")
    if hours is None:
        gpu_text = f"GPU hours: {NOT_MEASURED} (attrs carry no per-trial resources)"
    elif not gpu:
        gpu_text = "GPU hours: 0 (CPU-only: resources gpu = 0)"
    else:
        workers = (attrs.get("resources") or {}).get("workers", 1)
        each = f"{_fmt(workers)} workers × {_fmt(gpu)}" if workers != 1 else _fmt(gpu)
        gpu_text = f"GPU hours: {hours:.3g} (Σ wall_s × {each} GPU / 3600)"
    steps = _by(df, "steps" if "steps" in df.columns else "derived.steps", "batch_size", "B")
    resources = attrs.get("resources") or {}
    per_trial = ", ".join(f"{k} {_fmt(v)}" for k, v in resources.items()) or "not recorded"
    if resources.get("workers", 1) != 1:
        per_trial += " (cpu and gpu per worker)"
    return (
        f"{_examples_check(df)} Steps per trial: {steps}. Wall time: total {total}, mean {mean} "
        f"per trial over {timed} trials with wall_s. {gpu_text}. Resources per trial: "
        f"{per_trial}; precision: {_listing(df, 'precision')}. "
        f"Embedding size: h {_listing(df, 'feature_dim')}, z {_listing(df, 'projection_dim')}; "
        f"deployment compression: {NOT_MEASURED}."
    )


def gpu_hours(df: pd.DataFrame) -> float | None:
    """Σ wall_s × workers × gpu / 3600 (``attrs["resources"]``: ``gpu`` per worker, ``workers``
    1 when absent), or None when the GPUs or the wall times are not recorded."""
    resources = df.attrs.get("resources") or {}
    gpu, workers = resources.get("gpu"), resources.get("workers", 1)
    wall = _num(df, "wall_s")
    if gpu is None or wall is None:
        return None
    return float(wall.fillna(0).sum()) * float(workers) * float(gpu) / 3600


def _examples_check(df: pd.DataFrame) -> str:
    seen = _num(df, "examples_seen")
    if seen is None:
        return f"Examples seen per trial: {NOT_MEASURED}."
    done = seen[_finished(df).index].dropna()
    others = len(seen) - len(done)
    rest = (
        f" ({others} unfinished trial(s) stopped at {_range(seen.drop(done.index))})"
        if others
        else ""
    )
    if done.empty:
        return f"Examples seen: no finished trial{rest}."
    if done.nunique() == 1:
        n, value = len(done), _fmt(done.iloc[0])
        return f"Compute-matched: all {n} finished trials saw {value} examples{rest}."
    return f"FLAG: finished trials saw unequal numbers of examples ({_range(done)}){rest}."


def source_return_section(examples: Mapping[str, pd.DataFrame | None] | None) -> str | Table:
    """The Source return section from the examples the study passed (see :func:`evidence_card`):
    per labelled point, its anchors' positive and hardest-negative similarities and how many of
    the hardest negatives are false negatives (the anchor's own class)."""
    if not examples:
        return (
            f"{NOT_MEASURED}: the record holds no example pairs showing why positives and "
            "negatives were judged valid."
        )
    columns = ("point", "anchors", "positive similarity", "hardest negative similarity",
               "anchors with a negative at least as similar as the positive",
               "false negatives among the 3 hardest", "anchors whose hardest negative is a "
               "false negative")  # fmt: skip
    rows = tuple(source_return_row(label, table) for label, table in examples.items())
    caption = (
        "Held-out anchors, each with its positive (the other view of the same source) and its "
        "three most similar negatives; their panels are in report.html (Source return). A false "
        "negative is a negative of the anchor's own class: the loss pushes it away although the "
        "receiver wants it close. Similarities: mean (range) over the "
        "anchors. Labels are diagnostic only; the loss never sees them."
    )
    return Table(columns, rows, caption)


def source_return_row(label: str, table: pd.DataFrame | None) -> tuple[str, ...]:
    """One row of the Source return table: ``label`` and its artifact table's numbers, or why
    there are none (only the panel was passed; the table lacks columns; it has no rows)."""
    blank = ("n/a",) * 5
    if table is None:
        return (label, "panel only (table not passed)", *blank)
    missing = [c for c in ("anchor", "role", "similarity", "false_negative") if c not in table]
    if missing:
        return (label, f"unreadable: no {', '.join(missing)} column", *blank)
    rows = table.assign(
        similarity=pd.to_numeric(table["similarity"], errors="coerce"),
        false_negative=table["false_negative"].map(_truthy),
        negative=table["role"].astype(str).str.startswith("negative"),
    )
    positive = rows[rows["role"].astype(str) == "positive"].groupby("anchor")["similarity"].max()
    negatives = rows[rows["negative"]].dropna(subset=["similarity"])
    if negatives.empty or positive.empty:
        return (label, f"{rows['anchor'].nunique()} (no positive or negative rows)", *blank)
    hardest = negatives.loc[negatives.groupby("anchor")["similarity"].idxmax()].set_index("anchor")
    above = (hardest["similarity"] >= positive.reindex(hardest.index)).sum()
    return (
        label,
        str(rows["anchor"].nunique()),
        _mean_range(positive),
        _mean_range(hardest["similarity"]),
        f"{int(above)}/{len(hardest)}",
        f"{int(negatives['false_negative'].sum())}/{len(negatives)}",
        f"{int(hardest['false_negative'].sum())}/{len(hardest)}",
    )


def _truthy(value: object) -> bool:
    return str(value).strip().lower() in ("true", "1", "1.0", "yes")


_SECTION_BUILDERS = (
    receiver_job, positive_relation, negative_relation, augmentations, similarity, temperature,
    effective_candidates, representation_layer, geometry, transfer, shift_tests, subgroups, cost,
    lambda df, attrs: source_return_section(None),  # filled by evidence_card(source_return=...)
)  # fmt: skip


# -------------------------------------------------------------------------------- gate rules
Verdict = tuple[str, str]


def _gate_worked_example(df: pd.DataFrame, attrs: dict) -> Verdict:
    result = (attrs.get("checks") or {}).get("info_nce_worked_example")
    if result is None:
        return NOT_MEASURED, "attrs['checks'] has no info_nce_worked_example result"
    if str(result) == "pass":
        return "pass", "info_nce_worked_example self-check passed in the study's trials"
    return "fail", f"info_nce_worked_example: {result}"


def _gate_candidates(df: pd.DataFrame, attrs: dict) -> Verdict:
    cands = _candidates(df)
    if cands is None or df.empty:
        return NOT_MEASURED, "neither loss/candidates nor derived.negatives_per_anchor is recorded"
    known = int(cands.notna().sum())
    if known < len(df):
        return "fail", f"candidates per anchor recorded for only {known}/{len(df)} trials"
    frame = _pools(df)
    wrong = _off_pool(frame)
    if not wrong.empty:
        first = wrong.iloc[0]
        return "fail", (
            f"{len(wrong)} trial(s) recorded candidates per anchor other than their pool holds: "
            f"B={_fmt(first['b'])}, W={_fmt(first['w'])}, negatives {first['neg']}: recorded "
            f"{_fmt(first['c'])}, expected {_fmt(first['expected'])}"
        )
    per_pool = "; ".join(
        f"B={r[0]}: {r[3]}" if r[1] == "1" else f"B={r[0]}, W={r[1]}, negatives {r[2]}: {r[3]}"
        for r in candidate_table(df).rows
    )
    several = bool((frame["w"] > 1).any()) if not frame.empty else False
    where = (
        "measured across devices: each matches the pool its workers and negatives give"
        if several
        else "one worker per trial, local batch only, no cross-device gather"
    )
    return (
        "pass",
        f"candidates per anchor recorded for {known}/{len(df)} trials ({per_pool}; {where})",
    )


def _gate_temperature(df: pd.DataFrame, attrs: dict) -> Verdict:
    if "objective" not in df.columns or df.empty:
        return NOT_MEASURED, "objective not recorded"
    nce = _is_infonce(df)
    missing = []
    if nce.any():
        t = _num(df, "temperature")
        missing += [] if t is not None and t[nce].notna().all() else ["temperature"]
    if (~nce).any():
        for col in ("uniform_t", "lam_t"):
            v = _num(df, col)
            missing += [] if v is not None and v[~nce].notna().all() else [col]
    if missing:
        return "fail", f"{', '.join(missing)} missing for some trials"
    scales = [f"τ = {_listing(df[nce], 'temperature')}" if nce.any() else ""]
    if (~nce).any():
        scales.append(
            f"uniform_t = {_listing(df[~nce], 'uniform_t')}, lam_t = {_listing(df[~nce], 'lam_t')}"
        )
    return "pass", "cosine similarity on unit z, with " + "; ".join(s for s in scales if s)


def _gate_classified(df: pd.DataFrame, attrs: dict) -> Verdict:
    if "augmentation" not in df.columns:
        return NOT_MEASURED, "augmentation not recorded"
    used = _components(df)
    unknown = [c for c in used if c not in AUGMENTATION_INFO]
    if unknown:
        return "fail", f"unclassified component(s): {', '.join(unknown)}"
    return (
        "pass",
        f"every component used ({', '.join(used) or 'none'}) has a preserve/destroy entry",
    )


def _gate_false_negatives(df: pd.DataFrame, attrs: dict) -> Verdict:
    done = _finished(df)
    fnr = _num(done, "sim/false_negative_rate")
    if fnr is None or done.empty:
        return NOT_MEASURED, "no finished trial with sim/false_negative_rate"
    if fnr.notna().all():
        return (
            "pass",
            f"held-out false-negative rate in all {len(done)} finished trials: {_range(fnr)}",
        )
    return "fail", f"sim/false_negative_rate missing in {int(fnr.isna().sum())} finished trial(s)"


def _gate_mining(df: pd.DataFrame, attrs: dict) -> Verdict:
    return NOT_MEASURED, "no hard-negative mining in this study"


def _gate_spaces(df: pd.DataFrame, attrs: dict) -> Verdict:
    done = _finished(df)
    have = {}
    for space in ("h", "z"):
        cols = [_num(done, p) for p in PROBES if p.endswith(f"_{space}") and p in done.columns]
        have[space] = bool(cols) and any(c.notna().all() for c in cols) and not done.empty
    if all(have.values()):
        return "pass", f"kNN/linear probes recorded on both h and z for {len(done)} finished trials"
    if not any(c in done.columns for c in PROBES) or done.empty:
        return NOT_MEASURED, "no probe results on finished trials"
    return "fail", f"probes missing for {', '.join(s for s, ok in have.items() if not ok)}"


def _gate_conditional(df: pd.DataFrame, attrs: dict) -> Verdict:
    """Pass: per-class alignment and uniformity (worst class and spread, h and z) recorded for
    every finished trial; fail: recorded for only some of them or some of those columns."""
    done = _finished(df)
    if done.empty or not _class_geometry(done):
        return NOT_MEASURED, "only global averages of alignment and uniformity are recorded"
    names = [f"{space}/{m}" for space in SPACES for m in CLASS_GEOMETRY]
    gaps = {name: int(value.isna().sum()) if (value := _num(done, name)) is not None
            else len(done) for name in names}  # fmt: skip
    if any(gaps.values()):
        missing = ", ".join(f"{name} in {n}" for name, n in gaps.items() if n)
        return "fail", (
            f"per-class geometry recorded for only some of the {len(done)} finished trials; "
            f"missing: {missing}"
        )
    values = []
    for space in SPACES:
        value = {m: _range(_num(done, f"{space}/{m}")) for m in CLASS_GEOMETRY}
        values.append(
            f"{space}: worst-class alignment {value['align_worst_class']} (spread "
            f"{value['align_class_spread']}), worst-class uniformity "
            f"{value['uniform_worst_class']} (spread {value['uniform_class_spread']})"
        )
    return "pass", (
        f"per-class alignment and uniformity recorded in h and z for all {len(done)} finished "
        f"trials ({'; '.join(values)}){_no_information_flag(done)}"
    )


def _gate_multi_positive(df: pd.DataFrame, attrs: dict) -> Verdict:
    grouped = _grouped(df)
    policy = df["group_policy"] if "group_policy" in df.columns else pd.Series(None, index=df.index)
    au = df["objective"] == "align_uniform" if "objective" in df.columns else False
    forced = grouped & ((policy == "negative") | au)
    if forced.any():
        return "fail", (
            f"{int(forced.sum())} trial(s) with grouped data (toy_photos_per_item > 1) treat group "
            "mates as negatives (group_policy negative, or align_uniform, which ignores groups)"
        )
    if "toy_photos_per_item" not in df.columns:
        return NOT_MEASURED, "toy_photos_per_item not recorded"
    if "imagefolder" in _distinct(df, "dataset") and (policy == "negative").any():
        return (
            NOT_MEASURED,
            "imagefolder trials with group_policy negative; groups.csv use not recorded",
        )
    if grouped.any():
        return "pass", f"grouped trials use group_policy {_listing(df[grouped], 'group_policy')}"
    return (
        "pass",
        "no multi-positive data: one photo per source in every trial "
        "(toy_photos_per_item = 1 or non-toy data)",
    )


def _gate_cross_modal(df: pd.DataFrame, attrs: dict) -> Verdict:
    return (
        NOT_MEASURED,
        "no cross-modal or temporal pairs: positives are two augmented views of one source",
    )


def _gate_reproducibility(df: pd.DataFrame, attrs: dict) -> Verdict:
    cols = ("batch_size", "group_policy", "seed", "data_seed")
    absent = [c for c in cols if c not in df.columns]
    if absent or df.empty:
        return NOT_MEASURED, f"not recorded: {', '.join(absent) or 'no trials'}"
    gaps = [c for c in cols if df[c].isna().any()]
    if gaps:
        return "fail", f"missing for some trials: {', '.join(gaps)}"
    return "pass", (
        f"batch_size, group_policy, seed and data_seed recorded for {len(df)}/{len(df)} trials; "
        "negatives from the local batch only (no distributed gather recorded)"
    )


def _gate_invariance_claim(df: pd.DataFrame, attrs: dict) -> Verdict:
    validated = (
        ", ".join(
            f"{a} at s = {_listing(g, 'aug_strength')}" for a, g in df.groupby("augmentation")
        )
        if "augmentation" in df.columns
        else "not recorded"
    )
    probe = shift_probe(df)
    rows = shift_drops(df, probe)
    if not any(r.measured for r in rows):
        return (
            NOT_MEASURED,
            f"no shift tests on finished trials; trained with: {validated or 'none'}",
        )
    if "augmentation" not in df.columns:
        return NOT_MEASURED, "augmentation not recorded: no training coverage to judge against"
    incomplete = [f"{r.family} ({r.augmentation}: {r.measured}/{r.trials} trials)"
                  for r in rows if r.measured < r.trials]  # fmt: skip
    broke = [f"{r.family} ({r.augmentation}: {_fmt(round(r.worst_point_drop, 4))})"
             for r in rows if r.covered and r.verdict == "breaks"]  # fmt: skip
    rule = (
        f"{probe} drop (clean - corrupted, mean over severities) at the worst design point; "
        f"held up at most {_fmt(HOLD_UP_DROP)}"
    )
    claims = " | ".join(invariance_claim(rows).values())
    reasons = []
    if broke:
        reasons.append(
            "a corruption the training augmentation covers breaks, so the invariance that "
            f"augmentation implies is not validated: {', '.join(broke)}"
        )
    if incomplete:
        reasons.append(f"shift tests missing in some finished trials: {', '.join(incomplete)}")
    if reasons:
        return "fail", f"{'; '.join(reasons)}. {rule}. {claims}"
    return "pass", f"every family measured in every finished trial; {rule}. {claims}"


_GATE_RULES: tuple[Callable[[pd.DataFrame, dict], Verdict], ...] = (
    _gate_worked_example, _gate_candidates, _gate_temperature, _gate_classified,
    _gate_false_negatives, _gate_mining, _gate_spaces, _gate_conditional, _gate_multi_positive,
    _gate_cross_modal, _gate_reproducibility, _gate_invariance_claim,
)  # fmt: skip
