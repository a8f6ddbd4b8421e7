"""The private parts of its dependencies that the analysis reaches (``analysis/internals.py``)
still resolve in the installed versions, and still mean what the analysis takes them to mean."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from analysis.internals import mlflow_schema_revision, nct_survival


def test_mlflow_names_the_head_of_its_own_migration_scripts():
    from alembic.script import ScriptDirectory

    mlflow = Path(importlib.util.find_spec("mlflow").origin).parent
    head = ScriptDirectory(str(mlflow / "store" / "db_migrations")).get_current_head()
    assert mlflow_schema_revision() == head


def test_scipy_still_has_the_noncentral_t_upper_tail_that_nct_sf_computes():
    from scipy.stats import nct

    survival = nct_survival()
    assert survival is not None, "scipy.special._ufuncs._nct_sf is gone: t_power falls back"
    for t, df, ncp in ((2.0, 10, 1.5), (-1.0, 3, 0.0), (3.3, 1000, 2.0)):
        assert float(survival(t, df, ncp)) == pytest.approx(float(nct.sf(t, df, ncp)), rel=1e-9)
