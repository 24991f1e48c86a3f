"""The backends a run spreads its load over, and the policies that pick one per request.

`--host` may name several URLs (comma-separated): `backends.Targets` holds them for one load
process, asks the run's `--balance` policy (one module each, registered by name in `registry.py`:
`round_robin.py`, `least_outstanding.py`, `sticky.py`) for a backend once per request, counts each
backend's requests in flight, and takes a backend that refused a connection out of the spread until
a paced probe finds it back (`health.py`). With one URL, or one load balancer's URL and
`--backend-header`, there is nothing to pick: the record's backend is the URL's, or the header's.
`planner.py` turns measured capacities into the replicas a target traffic needs; `diagnosis.py`
diagnoses each replica from its own /metrics.

Importing the package registers every policy.
"""

from targets import least_outstanding, round_robin, sticky  # noqa: F401 - each registers its policy
from targets.registry import POLICIES, Policy, names, policy

NAMES = names()  # --balance's choices, the default first

__all__ = ["NAMES", "POLICIES", "Policy", "policy"]
