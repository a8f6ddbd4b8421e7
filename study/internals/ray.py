"""Ray's private parts the study's driver uses (checked against Ray 2.60.0).

Each wrapper but one falls back to Ray's ordinary behaviour on a Ray where the part is gone (the
study then runs as Ray runs it by default, only slower or louder). The exception is
:func:`system_config`: ``ray.init`` refuses a keyword it does not know, so a Ray without
``_system_config`` would not start a local Ray at all (``tests/study/test_internals.py`` checks
that this one takes it and knows both settings).
"""

from __future__ import annotations

import os
from typing import Any

# The logger of Ray's notice "Token authentication is enabled for this Ray cluster" (Ray 2.52
# on), said at every start of a local Ray: :func:`study.local_ray.quiet_token_auth_notice` drops
# that one notice. On a Ray that logs it elsewhere the notice simply shows again.
TOKEN_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


def system_config(**settings: Any) -> dict[str, Any]:
    """``ray.init``'s keyword arguments that set Ray's internal system config (``_system_config``):
    a local Ray's idle workers import the trial's module as they start
    (``preload_python_modules``) and keep as many idle workers as the study has slots
    (``num_workers_soft_limit``). Why private: Ray has no public setting for either."""
    return {"_system_config": settings}


def _class_cache():
    """Ray Tune's module that builds each trial actor's runtime_env, or None on a Ray without
    it."""
    try:
        from ray.tune.execution import class_cache
    except ImportError:
        return None
    return class_cache


def drop_tune_default_env_var(name: str) -> None:
    """Take ``name`` out of the env vars Tune gives every trial actor by default
    (``class_cache.DEFAULT_ENV_VARS``, ``{"PL_DISABLE_FORK": "1"}``): an actor with env vars of
    its own cannot take one of Ray's idle, warm workers. Why internal: Tune has no setting for
    it. On a Ray without it nothing changes (trials start as before)."""
    defaults = getattr(_class_cache(), "DEFAULT_ENV_VARS", None)
    if defaults is not None:
        defaults.pop(name, None)


def tune_propagated_env_vars() -> set[str] | None:
    """The names of the variables Tune copies from the driver into every trial actor's
    runtime_env (``class_cache.ENV_VARS_TO_PROPAGATE``: ``AWS_*``, ``RAY_TRAIN_*`` …); None on a
    Ray without them (Tune then copies as it always does)."""
    return getattr(_class_cache(), "ENV_VARS_TO_PROPAGATE", None)


def set_tune_propagated_env_vars(names: set[str]) -> None:
    """Set which variables Tune copies into the trial actors it creates from now on (see
    :func:`tune_propagated_env_vars`; :func:`study.local_ray.env_vars_to_copy` copies only
    those the actors lack: a local Ray's workers inherited them, a cluster's nodes are asked).
    Why internal: Tune has no setting for it. Nothing is set on a Ray without it."""
    cache = _class_cache()
    if cache is not None and hasattr(cache, "ENV_VARS_TO_PROPAGATE"):
        cache.ENV_VARS_TO_PROPAGATE = names


# ---------------------------------------------------------------------------------------------
# reaching a cluster (study.cluster)
# ---------------------------------------------------------------------------------------------
try:  # Ray's own refusal of a driver's token (Ray 2.52 on); on an older Ray no call raises it
    from ray.exceptions import AuthenticationError
except ImportError:  # pragma: no cover - an older Ray

    class AuthenticationError(Exception):  # type: ignore[no-redef]
        """Never raised: a Ray without token authentication."""


def recorded_cluster_address() -> str | None:
    """The address of the cluster ``ray start`` last recorded on this node
    (``<RAY_TMPDIR or /tmp/ray>/ray_current_cluster``), or None. Why internal: Ray's public
    ``ray.init(address="auto")`` also joins any Ray process it finds on the machine (its legacy
    fallback), which on a laptop is another study's own local Ray; this reads only the record.
    On a Ray without it, None (``--address auto`` then asks for an address).

    ``/tmp/ray`` is shared by every user of the machine: a record another user wrote (or a
    FIFO, or a link) is not this user's cluster, and is not read (:mod:`study.private`)."""
    import stat

    try:
        from ray._common.utils import get_ray_address_file
    except ImportError:
        return None
    from study.private import read_regular

    path = get_ray_address_file(None)
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
        return None
    return (read_regular(path, limit=4096) or b"").decode(errors="replace").strip() or None


def gcs_node_count(address: str) -> int:
    """How many nodes the cluster's GCS at ``address`` knows, asked with this process's token:
    raises :class:`AuthenticationError` at once when the cluster refuses the token. Why
    internal: Ray's public way in, ``ray.init``, retries a refused token for 20 s and then says
    only that it could not connect."""
    from ray._raylet import GcsClient

    return len(GcsClient(address=address, cluster_id=None).get_all_node_info(timeout=10))
