"""Everything checkable before Ray starts or anything is written: the data, every trial's fit in
MLflow's limits, the tracking store and this study's state in it, this machine's resources, and
the study's storage (written, read back and deleted).
"""

from __future__ import annotations

from pathlib import Path

from search_spaces.designs import AdaptiveDesign, FixedDesign
from search_spaces.spec import StudyError, StudySpec
from study.capacity import check_resources, local_capacity
from study.cluster import check_token_auth_ray
from study.paths import download_folder, writable_folder
from study.record import StoreState, check_plan_fits, store_state
from study.storage import Storage, check_writable, open_storage
from study.tracking_store import check_tracking_uri
from trainables.machine import cpus_why
from trainables.remote import redacted
from trainables.sources import check_data


def preflight(
    spec: StudySpec, design: FixedDesign | AdaptiveDesign, tracking_uri: str, address: str | None,
    experiment=None,
) -> StoreState:  # fmt: skip
    """Everything checkable before Ray starts or anything is written; raises StudyError naming
    the field and value: the data, every trial's fit in MLflow's limits, the tracking store and
    this study's state in it (deleted, changed study file), and this machine's resources.
    Returns the store's state for the study (its experiment as found; ``recorded``: a resume).
    ``experiment``: the study's experiment, already found in that store (not looked up again)."""
    check_token_auth_ray()  # a token asked of a Ray that has no token authentication
    sample = design.sample_config()
    try:
        check_data(sample)
    except ValueError as err:
        raise StudyError(f"trial.{err}") from None
    download_folder(sample)
    for plan in design.representatives():
        check_plan_fits(plan)
    if address is None:
        check_resources(spec, local_capacity(), "this machine (no --address: the study runs here)",
                        why=cpus_why())  # fmt: skip
    check_tracking_uri(tracking_uri, writing=True)  # the study writes its record there
    return store_state(tracking_uri, spec.study, spec, experiment)


def checked_storage(where: str | Path | None) -> Storage:
    """``--storage`` opened (a URI through pyarrow, a plain path as a local folder, default
    ``studies``) and checked: an object is written, read back and deleted under it.

    Raises:
        StudyError: naming ``--storage`` and the URI, with pyarrow's reason.
    """
    try:
        storage = open_storage(where)
    except ValueError as err:
        raise StudyError(f"--storage {redacted(str(err))}") from None
    if storage.is_local:  # said plainly, before the write below makes the folder or fails
        writable_folder("--storage", storage.root)
    try:
        check_writable(storage)
    except OSError as err:
        raise StudyError(
            f"--storage {redacted(storage.uri)}: cannot write there (a study keeps its "
            f"checkpoints, results and report in it): {redacted(str(err))}"
        ) from None
    return storage
