from tests.web.dashboard.fixtures import *  # noqa: F403
