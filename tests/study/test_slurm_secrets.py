"""A Slurm job's secret stays in its environment (issue 57, item 2): scripts/slurm/study.sbatch
under the stand-ins of tests/kits/slurm_bin (two Ray nodes on 127.0.0.1, token authentication
on), submitted from an environment holding ``AWS_SECRET_ACCESS_KEY``. The nodes' steps are
started from the job's environment, so they hold it: no trial's runtime_env carries a copy, and
after the job no file under the job folder, Ray's temp dir, the store or the storage (nor the
job's output) holds its value."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from slurmkit import fake_slurm, wait_exit
from studykit import child_runs, write_spec

JOB = 5701


@pytest.fixture
def slurm(tmp_path):
    """A fake Slurm's job (slurmkit.fake_slurm): every process it started is ended after."""
    with fake_slurm(tmp_path) as job:
        yield job


@pytest.mark.long
@pytest.mark.slow
def test_a_jobs_secret_reaches_no_file_of_the_job_ray_the_store_or_the_storage(slurm, tmp_path):
    planted = f"planted-secret-{secrets.token_hex(8)}"
    spec = write_spec(slurm.submit / "secret.yaml", "slurm-secret",
                      factors={"temperature": {"levels": [0.1, 0.5], "scale": "log"}},
                      trial={"budget_examples": 512, "eval_marks": 1},
                      max_concurrent=2)  # fmt: skip
    log = tmp_path / f"slurm-{JOB}.out"
    env = slurm.env(JOB) | {"AWS_SECRET_ACCESS_KEY": planted}
    job = slurm.start([str(spec), "--no-figures"], env, log)
    assert wait_exit(job, 600, log) == 0, log.read_text()[-5000:]
    runs = child_runs(f"sqlite:///{slurm.submit / 'mlflow.db'}", "slurm-secret")
    assert len(runs) == 2 and {r.info.status for r in runs} == {"FINISHED"}
    needle = planted.encode()
    holding = [str(p) for root in (tmp_path, Path(slurm.ray_tmp)) for p in root.rglob("*")
               if p.is_file() and not p.is_symlink() and needle in p.read_bytes()]  # fmt: skip
    assert holding == []  # the job folder, its output, the store, the storage, Ray's logs
