"""The report: ``report.html`` and ``report.json`` (:mod:`analysis.report.page`), the evidence
card (:mod:`analysis.report.evidence`) and the figures (:mod:`analysis.report.plots`), written
from the one analysis (:mod:`analysis.study_analysis`)."""
