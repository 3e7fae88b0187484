"""Retry budgets shared by a fleet: the local budgets' semantics, with the counts on Redis.

The hot path only bumps local counters (``next()`` on an ``itertools.count``: one C call under
the GIL); the fleet's sync thread sends the counts in batches and brings back the fleet's view.
Retry tokens are taken in leases, so most retry decisions need no round trip, and none needs
more than one.
"""

from seawall.redis._budgets.quota import SharedRetryQuota
from seawall.redis._budgets.retry_budget import SharedRetryBudget
from seawall.redis._budgets.throttle import SharedAdaptiveThrottle
from seawall.redis._budgets.token_bucket import SharedTokenBucket

__all__ = ["SharedAdaptiveThrottle", "SharedRetryBudget", "SharedRetryQuota", "SharedTokenBucket"]
