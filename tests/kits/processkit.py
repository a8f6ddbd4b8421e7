"""Processes a test leaves behind, found by a text in their command line or environment (a
test's own RAY_TMPDIR, store or bucket) and killed by PID."""

from __future__ import annotations


def kill_processes_mentioning(text: str) -> list[int]:
    import os

    import psutil

    killed = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.pid == os.getpid():
            continue
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            environ = proc.environ() if text not in cmdline else {}
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if text in cmdline or any(text in v for v in environ.values()):
            try:
                proc.kill()
                killed.append(proc)
            except psutil.NoSuchProcess:
                pass
    psutil.wait_procs(killed, timeout=10)
    return [p.pid for p in killed]


def prestarted_worker_pids(ray_tmp: str) -> set[int]:
    """PIDs of the worker processes a local Ray under ``ray_tmp`` started before any job asked
    for one (its idle, warm workers): Ray names their logs ``worker-<id>-ffffffff-<pid>.out``,
    the nil job id, where a worker started for a job's task or actor carries that job's id."""
    from pathlib import Path

    logs = Path(ray_tmp).glob("ray/session_*/logs/worker-*-ffffffff-*.out")
    return {int(path.stem.rsplit("-", 1)[1]) for path in logs}
