"""Fixtures of the agent tests: fake sysfs trees, a configuration, logging kept intact."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from oslo_config import cfg

from tests.fixtures.sysfs import sysfs_tree  # noqa: F401 (a fixture)


@pytest.fixture
def agent_conf(conf: cfg.ConfigOpts) -> cfg.ConfigOpts:
    """The test configuration with a fixed host name and NVML off (no GPU here)."""
    conf.set_override("host", "fakehost")
    conf.set_override("use_nvml", False, group="nvidia_gpu")
    return conf


@pytest.fixture
def keep_logging() -> Iterator[None]:
    """Put the root logger back as it was after a command that sets logging up."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
