"""What a study found: loading runs, response surfaces, frontiers, plots, reports.

Used from notebooks; never imports Ray, so no cluster is needed.
"""

from analysis.frontier import pareto_frontier
from analysis.load import load_history, load_study, read_results
from analysis.report import analyse, write_report
from analysis.surface import ResponseSurface, UnsupportedDesignError, fit_response_surface

__all__ = [
    "ResponseSurface",
    "UnsupportedDesignError",
    "analyse",
    "fit_response_surface",
    "load_history",
    "load_study",
    "pareto_frontier",
    "read_results",
    "write_report",
]
