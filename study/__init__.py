"""Running a study: the ``study`` CLI, Ray Tune, MLflow logging, resume, Parquet export."""

# A trial's evidence beyond its metrics (``trainables.run_trial(...)["evidence"]``) travels from
# the Ray worker to the driver, which alone writes to MLflow, as JSON text under this key of its
# final result (Tune flattens nested results). Here, so that neither side imports the other.
EVIDENCE_KEY = "evidence_json"
