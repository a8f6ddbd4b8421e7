"""What the statistics mean for the study: the direction each fit points to, the one decision of
what to run next (:mod:`analysis.findings.next_step`), the standing against the baselines, a
confirmation's verdict, and the headline that says it all first."""
