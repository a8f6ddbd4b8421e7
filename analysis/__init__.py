"""What a study found: loading runs, response surfaces, frontiers, plots, reports.

Used from notebooks; never imports Ray, so no cluster is needed. One analysis, whoever asks:
``analyse(load_study(name)).fits[metric].summary()`` is what the report, the notebook and the
README say of that metric (:mod:`analysis.fits`).
"""

from analysis.fits import StudyAnalysis, analyse
from analysis.frontier import pareto_frontier
from analysis.load import default_store, load_history, load_study, read_results, recorded_studies
from analysis.report import write_report
from analysis.surface import ResponseSurface, UnsupportedDesignError, fit_response_surface

__all__ = [
    "ResponseSurface",
    "StudyAnalysis",
    "UnsupportedDesignError",
    "analyse",
    "default_store",
    "fit_response_surface",
    "load_history",
    "load_study",
    "pareto_frontier",
    "read_results",
    "recorded_studies",
    "write_report",
]
