"""Running a study: the ``study`` CLI, Ray Tune, MLflow logging, resume, Parquet export."""

# A trial's evidence beyond its metrics (``trainables.train.run_trial(...)["evidence"]``)
# travels from the Ray worker to the driver, which alone writes to MLflow, as JSON text under this
# key of its final result (Tune flattens nested results). Here, so that neither side imports the
# other.
EVIDENCE_KEY = "evidence_json"
# The self-checks of the trial code (``trainables.checks.self_checks``), run in the trial's own
# process, travel the same way; the driver records them on the study's parent run.
CHECKS_KEY = "checks_json"
