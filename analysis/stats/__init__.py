"""The statistics: response surfaces and the model ladder (:mod:`analysis.stats.surface`,
:mod:`analysis.stats.fits`), power, canonical and steepest-ascent analysis, desirability, the
frontier, the best point and its measurement. Pure functions of a results frame; they read
nothing and decide no wording beyond the fits' own findings."""
