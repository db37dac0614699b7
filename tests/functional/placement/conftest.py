"""The real Placement, in-process, for the tests in this folder (and flat mode over it)."""

from __future__ import annotations

import pytest
from keystoneauth1 import adapter

from acceleron.placement.client import PlacementClient
from tests.fixtures.flat import flat
from tests.fixtures.placement import CountingAdapter, placement, placement_app

__all__ = ["flat", "placement", "placement_app"]


@pytest.fixture
def counted(placement: adapter.Adapter) -> CountingAdapter:
    """The Placement adapter, counting every call made through it."""
    return CountingAdapter(placement)


@pytest.fixture
def client(counted: CountingAdapter) -> PlacementClient:
    """A Placement client whose calls ``counted`` records."""
    return PlacementClient(counted)
