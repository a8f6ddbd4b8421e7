"""The contrastive representation evidence card and the first technical release gate, one
concept per module: :mod:`analysis.report.evidence.card` assembles the card
(:func:`analysis.report.evidence.card.evidence_card`), :mod:`analysis.report.evidence.gate` judges
the release gate, and the sections, the table they may fill and the helpers they share live in the
modules beside them. Import from those modules; this package re-exports nothing."""
