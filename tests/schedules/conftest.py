from tests.processes.conftest import cluster, db_url, sql  # noqa: F401  (real processes)
from tests.web.conftest import _own_cache  # noqa: F401  (throttle counts of the test's own)
from tests.web.dashboard.fixtures import *  # noqa: F403
