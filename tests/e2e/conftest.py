from tests.dashboard.fixtures import *  # noqa: F403
