"""What a study found: loading runs, response surfaces, frontiers, plots, reports.

Used from notebooks; never imports Ray, so no cluster is needed. One analysis, whoever asks:
``analyse(load_study(name)).fits[metric].summary()`` is what the report, the notebook and the
README say of that metric (:mod:`analysis.study_analysis`).
"""

import importlib

# name -> the module that defines it; each is imported when first asked for (PEP 562), so a command
# that reads one table (``analysis.reading.load``) does not load statsmodels and matplotlib with it
_HOMES = {
    "StudyAnalysis": "analysis.study_analysis", "analyse": "analysis.study_analysis",
    "pareto_frontier": "analysis.stats.frontier",
    "default_store": "analysis.reading.load", "load_history": "analysis.reading.load",
    "load_outcomes": "analysis.reading.load", "load_study": "analysis.reading.load",
    "read_results": "analysis.reading.load",
    "recorded_studies": "analysis.reading.load",
    "write_report": "analysis.report.page",
    "ResponseSurface": "analysis.stats.surface", "UnsupportedDesignError": "analysis.stats.surface",
    "fit_response_surface": "analysis.stats.surface",
}  # fmt: skip


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'analysis' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "ResponseSurface",
    "StudyAnalysis",
    "UnsupportedDesignError",
    "analyse",
    "default_store",
    "fit_response_surface",
    "load_history",
    "load_outcomes",
    "load_study",
    "pareto_frontier",
    "read_results",
    "recorded_studies",
    "write_report",
]
