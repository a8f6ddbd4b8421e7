"""PyTorch's private parts the study names (checked against PyTorch 2.14.1).

Nothing here imports torch: the driver never does (seconds of CPU), only the trials' workers.
"""

from __future__ import annotations

# The module the first optimizer of every trial imports (torch.optim imports torch._dynamo
# there, pytorch #162595): a local Ray's idle workers import it as they start
# (study.local_ray.TRIAL_MODULES), so that the first trial does not pay for it. Should a torch
# no longer have it, the worker's preload fails that one import and the trial imports what it
# needs itself, as without the preload.
DYNAMO_MODULE = "torch._dynamo"
