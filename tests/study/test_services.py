"""The commands' services (study/services/): each imports nothing heavy until it runs, says in
its docstring what it defers, and refuses with StudyError, never by exiting."""

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import study.services
from search_spaces.spec import StudyError

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(f"study.services.{m.name}" for m in pkgutil.iter_modules(study.services.__path__))
HEAVY = ("mlflow", "torch", "ray", "pandas", "statsmodels", "pyarrow")


def test_every_service_and_the_cli_import_nothing_heavy():
    code = (f"import sys, importlib; [importlib.import_module(m) for m in {MODULES!r}]; "
            "import study.cli; "
            f"print(*sorted(m for m in {HEAVY!r} if m in sys.modules))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == []


@pytest.mark.parametrize("name", MODULES)
def test_every_service_says_what_it_defers(name):
    import importlib

    doc = importlib.import_module(name).__doc__ or ""
    assert "StudyError" in doc and "Deferred" in doc, name


def test_a_service_refuses_with_study_error_and_creates_nothing(tmp_path):
    from study.services.list_studies import no_store_line
    from study.services.recorded import existing

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(StudyError, match="no-such"):
        existing("no-such", uri)
    assert no_store_line(uri).startswith("no study: there is no MLflow store at")
    with pytest.raises(StudyError):
        no_store_line(f"sqlite:///{tmp_path / 'missing' / 'mlflow.db'}")
    assert list(tmp_path.iterdir()) == []
