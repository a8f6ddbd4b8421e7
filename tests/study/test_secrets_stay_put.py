"""No secret leaves its place (issue 57, item 2), with real parts only: the CLI as a user runs it,
a real embedded store or ``mlflow server``, a local Ray and real ``ray start`` nodes with token
authentication.

- ``study report --out FOLDER`` attaches to the parent run only the files the report wrote, never
  what FOLDER held (a planted ``.env``), and refuses an ``--out`` among the product's own files.
- A secret in the driver's environment (``AWS_SECRET_ACCESS_KEY``) is never copied into a trial's
  runtime_env, whose variables Ray's runtime-env agent logs in clear: after a local study and a
  study on a cluster whose nodes hold it, no file under Ray's temp dir, the store or the storage
  holds it; a cluster whose nodes lack a secret is refused, naming it, not its value.
- A tracking URI with credentials (``http://alice:PW@host``) is used as MLflow's client uses it,
  and its password is never printed nor recorded.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from browserkit import free_port, start_mlflow_server, stop_mlflow_server
from mlflow.tracking import MlflowClient
from processkit import kill_processes_mentioning
from raynodes import token_cluster
from recordkit import record_study
from studykit import STUDY, parent_runs, write_spec


def study(*argv: str, cwd: Path, env: dict | None = None, timeout: float = 600):
    return subprocess.run([STUDY, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def files_holding(text: str, *roots: Path) -> list[str]:
    """Every file under ``roots`` whose bytes hold ``text``."""
    needle = text.encode()
    return [str(p) for root in roots for p in root.rglob("*")
            if p.is_file() and not p.is_symlink() and needle in p.read_bytes()]  # fmt: skip


def artifact_files(client: MlflowClient, run_id: str, path: str = "") -> set[str]:
    found = set()
    for item in client.list_artifacts(run_id, path or None):
        found |= artifact_files(client, run_id, item.path) if item.is_dir else {item.path}
    return found


def tiny_study(folder: Path, name: str) -> Path:
    """Two cheap trials, one at a time."""
    return write_spec(folder / f"{name}.yaml", name,
                      factors={"temperature": {"levels": [0.1, 0.5], "scale": "log"}},
                      trial={"budget_examples": 512, "eval_marks": 1})  # fmt: skip


# -- study report --out ----------------------------------------------------------------------
@pytest.mark.slow
def test_a_report_attaches_only_its_own_files_and_stays_out_of_the_products_folders(tmp_path):
    uri = record_study(tmp_path, "leaky")
    planted = f"planted-secret-{secrets.token_hex(8)}"
    out = tmp_path / "shared-folder"
    out.mkdir()
    (out / ".env").write_text(f"AWS_SECRET_ACCESS_KEY={planted}\n")
    (out / "notes.txt").write_text("a user's own file\n")
    done = study("report", "leaky", "--out", str(out), "--no-figures", "--tracking-uri", uri,
                 cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    client = MlflowClient(uri)
    parent = parent_runs(uri, "leaky")[0].info.run_id
    attached = artifact_files(client, parent, "report")  # beside the study file's own three
    wrote = {f"report/{p.relative_to(out)}" for p in out.rglob("*") if p.is_file()}
    assert attached == wrote - {"report/.env", "report/notes.txt"}
    assert "report/report.html" in attached
    assert files_holding(planted, tmp_path / "artifacts") == []
    # --out . in the study's own folder: the store and the artifacts stay where they are
    done = study("report", "leaky", "--out", ".", "--no-figures", "--tracking-uri", uri,
                 cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert artifact_files(client, parent, "report") == attached
    # inside the artifact root, or a study storage (but for a study's own report folder)
    for inside in (tmp_path / "artifacts" / "x", tmp_path / "studies" / "leaky" / "trials"):
        done = study("report", "leaky", "--out", str(inside), "--no-figures",
                     "--tracking-uri", uri, cwd=tmp_path)  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert f"--out '{inside}'" in done.stderr and "Traceback" not in done.stderr
        assert not inside.exists()
    (tmp_path / "studies" / "leaky").mkdir(parents=True)
    done = study("report", "leaky", "--out", "studies/leaky/report", "--no-figures",
                 "--tracking-uri", uri, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr


# -- a secret in the driver's environment ----------------------------------------------------
@pytest.fixture
def ray_dir():
    """A short private folder for Ray's temp dir (Unix socket paths: ~107 bytes); whatever Ray
    left running under it is ended by PID afterwards."""
    root = Path(tempfile.mkdtemp(prefix="sx", dir="/tmp"))
    yield root
    kill_processes_mentioning(str(root))
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
def test_a_local_studys_secret_stays_in_its_environment(tmp_path, ray_dir):
    planted = f"planted-secret-{secrets.token_hex(8)}"
    spec = tiny_study(tmp_path, "local-secret")
    env = dict(__import__("os").environ, AWS_SECRET_ACCESS_KEY=planted, RAY_TMPDIR=str(ray_dir))
    done = study("run", str(spec), "--no-figures", "--tracking-uri",
                 f"sqlite:///{tmp_path / 'mlflow.db'}", "--storage", str(tmp_path / "studies"),
                 cwd=tmp_path, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert planted not in done.stdout + done.stderr
    assert files_holding(planted, ray_dir, tmp_path) == []


@pytest.mark.long
def test_a_clusters_nodes_holding_a_secret_get_no_copy_and_lacking_one_are_refused(
    tmp_path, monkeypatch
):
    """The nodes are started from the job's own environment, the secret in it: the driver's
    value is theirs, so no trial's runtime_env carries it. A second secret only the driver
    holds is refused before any trial starts, named, its value never said."""
    planted = f"planted-secret-{secrets.token_hex(8)}"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", planted)  # what the nodes start with
    cluster = token_cluster(nodes=[{"cpus": 1}, {"cpus": 1}])
    try:
        uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
        spec = tiny_study(tmp_path, "cluster-secret")
        argv = ["run", str(spec), "--address", cluster.address, "--no-figures",
                "--tracking-uri", uri, "--storage", str(tmp_path / "studies")]  # fmt: skip
        done = study(*argv, cwd=tmp_path, env=cluster.env())
        assert done.returncode == 0, done.stderr[-3000:]
        token = f"planted-token-{secrets.token_hex(8)}"
        refused = study(*argv[:1], str(tiny_study(tmp_path, "driver-only")), *argv[2:],
                        cwd=tmp_path, env=cluster.env(AWS_SESSION_TOKEN=token))  # fmt: skip
        assert refused.returncode == 1, refused.stderr[-3000:]
        assert "AWS_SESSION_TOKEN" in refused.stderr and "export it" in refused.stderr
        said = done.stdout + done.stderr + refused.stdout + refused.stderr
        assert planted not in said and token not in said
        assert files_holding(planted, cluster.root, tmp_path) == []
        assert files_holding(token, cluster.root, tmp_path) == []
    finally:
        cluster.stop()
        shutil.rmtree(cluster.root, ignore_errors=True)


# -- credentials in a tracking URI -----------------------------------------------------------
@pytest.mark.slow
def test_a_tracking_uri_with_credentials_is_used_as_mlflow_uses_it_and_never_shown(
    tmp_path, ray_dir
):
    server, url = start_mlflow_server(
        f"sqlite:///{tmp_path / 'server.db'}", cwd=tmp_path,
        artifacts_destination=tmp_path / "server-artifacts", log=tmp_path / "server.log",
    )  # fmt: skip
    try:
        password = f"SECRETPW{secrets.token_hex(6)}"
        uri = url.replace("http://", f"http://alice:{password}@")
        env = dict(__import__("os").environ, RAY_TMPDIR=str(ray_dir))
        spec = tiny_study(tmp_path, "with-credentials")
        run = study("run", str(spec), "--no-figures", "--tracking-uri", uri, "--storage",
                    str(tmp_path / "studies"), cwd=tmp_path, env=env)  # fmt: skip
        assert run.returncode == 0, run.stderr[-3000:]
        assert f"open {url} in a browser" in run.stdout  # a link: no credentials in it
        status = study("status", "with-credentials", "--tracking-uri", uri, cwd=tmp_path)
        assert status.returncode == 0, status.stderr
        dead = f"http://alice:{password}@127.0.0.1:{free_port()}"
        refused = study("list", "--tracking-uri", dead, cwd=tmp_path)
        assert refused.returncode == 2
        assert f"http://alice:***@127.0.0.1:{dead.rsplit(':', 1)[1]}" in refused.stderr
        assert "MLFLOW_TRACKING_USERNAME" in refused.stderr
        for done in (run, status, refused):
            assert password not in done.stdout + done.stderr
        assert files_holding(password, tmp_path, ray_dir) == []  # the store, the storage
    finally:
        stop_mlflow_server(server)
