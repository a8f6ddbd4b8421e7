"""Every place the analysis reaches into a dependency's private parts (checked against MLflow
3.17.2 and SciPy 1.17.1 on CPython 3.11.7).

The study's own are in ``study/internals/``; the analysis never imports the study, so its reaches
are here, each a small function with a comment on why it is needed and what its caller does when it
is gone, for :func:`analysis.reading.store.mlflow_schema_head` and :mod:`analysis.stats.t_power`. It
belongs to no room (``docs/architecture.md``): any room may import it, and it imports nothing of the
analysis. Each imports its dependency only when called:
importing this module costs nothing. ``tests/analysis/test_analysis_internals.py`` fails when one
no longer resolves.
"""

from __future__ import annotations

from collections.abc import Callable


def mlflow_schema_revision() -> str:
    """The schema revision the installed MLflow reads and writes, as MLflow itself answers
    (``mlflow.store.db.utils._get_latest_schema_revision``). Why private: MLflow has no public
    call for it. :func:`analysis.reading.store.mlflow_schema_head` reads it from MLflow's migration
    scripts without importing MLflow (seconds), and asks MLflow only when the scripts do not name
    exactly one head."""
    from mlflow.store.db.utils import _get_latest_schema_revision

    return _get_latest_schema_revision()


def nct_survival() -> Callable[[float, float, float], float] | None:
    """SciPy's noncentral t upper tail (Boost's, the ufunc ``scipy.stats.nct.sf`` calls:
    ``scipy.special._ufuncs._nct_sf``), or None in a SciPy that moved it. Why private:
    ``scipy.special`` exports no upper tail of the noncentral t, and ``scipy.stats`` takes a
    second to import, a second of ``study power``, which must answer in one
    (:mod:`analysis.stats.t_power` falls back to ``scipy.stats.nct.sf`` on None)."""
    try:
        from scipy.special._ufuncs import _nct_sf
    except ImportError:
        return None
    return _nct_sf
