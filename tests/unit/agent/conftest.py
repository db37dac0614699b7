"""Fixtures of the agent tests: fake sysfs trees, a configuration."""

from __future__ import annotations

import pytest
from oslo_config import cfg

from tests.fixtures.sysfs import sysfs_tree  # noqa: F401 (a fixture)


@pytest.fixture
def agent_conf(conf: cfg.ConfigOpts) -> cfg.ConfigOpts:
    """The test configuration with a fixed host name and NVML off (no GPU here)."""
    conf.set_override("host", "fakehost")
    conf.set_override("use_nvml", False, group="nvidia_gpu")
    return conf
