"""The real Placement, in-process, for the tests in this folder."""

from __future__ import annotations

import pytest
from keystoneauth1 import adapter

from acceleron.placement.client import PlacementClient
from tests.fixtures.placement import CountingAdapter, placement, placement_app

__all__ = ["placement", "placement_app"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here runs the real Placement: marked ``placement`` (``make check``
    leaves them to ``make test``: they take a third of its CPU)."""
    here = __file__.rsplit("/", 1)[0]
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.placement)


@pytest.fixture
def counted(placement: adapter.Adapter) -> CountingAdapter:
    """The Placement adapter, counting every call made through it."""
    return CountingAdapter(placement)


@pytest.fixture
def client(counted: CountingAdapter) -> PlacementClient:
    """A Placement client whose calls ``counted`` records."""
    return PlacementClient(counted)
