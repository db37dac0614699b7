"""The Glance bitstream store against a real Glance (tests/fixtures/glance.py).

Images are uploaded the way an operator does it, with openstacksdk and
``accel:`` properties; each test uses its own function and region UUIDs, so
the tests share one Glance without seeing each other's images.
"""

from __future__ import annotations

import hashlib
import io
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from oslo_config import cfg

from acceleron import conf as confmod
from acceleron.bitstreams import NewBitstream, Query, factory
from acceleron.bitstreams.glance import GlanceStore
from acceleron.exceptions import (
    AmbiguousBitstream,
    BitstreamCorrupt,
    BitstreamNotFound,
    BitstreamStoreError,
    BitstreamUnavailable,
    IncompatibleBitstream,
)

if TYPE_CHECKING:  # imported by pytest_plugins, so that pytest can rewrite its asserts
    from tests.fixtures.glance import GlanceServer

pytest_plugins = ["tests.fixtures.glance"]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sdk(glance_server: GlanceServer) -> Iterator[Any]:
    conn = glance_server.connect()
    yield conn
    conn.close()


@pytest.fixture
def store(conf: cfg.ConfigOpts, glance_server: GlanceServer) -> GlanceStore:
    """The store as ``[bitstreams] backend = glance`` builds it, for a Glance without Keystone."""
    confmod.register_keystoneauth(conf, "glance")
    conf.set_override("backend", "glance", group="bitstreams")
    conf.set_override("auth_type", "none", group="glance")
    conf.set_override("endpoint_override", glance_server.endpoint, group="glance")
    built = factory.from_conf(conf)
    assert isinstance(built, GlanceStore)
    return built


@pytest.fixture
def ids() -> tuple[str, str]:
    """A function UUID and a region type UUID no other test uses."""
    return str(uuid.uuid4()), str(uuid.uuid4())


def operator_upload(sdk: Any, name: str, data: bytes, **properties: str) -> str:
    """Upload an image with openstacksdk, as ``openstack image create --property`` does."""
    image = sdk.image.create_image(
        name,
        data=io.BytesIO(data),
        disk_format="raw",
        container_format="bare",
        allow_duplicates=True,
        **properties,
    )
    return str(image.id)


def image_file(server: GlanceServer, image_id: str) -> Path:
    return server.workdir / "images" / image_id


def test_look_up_by_function_id_with_hash(
    store: GlanceStore, sdk: Any, ids: tuple[str, str]
) -> None:
    function, region = ids
    data = b"\x5a" * 70_000
    image_id = operator_upload(
        sdk,
        "nlb.gbs",
        data,
        **{"accel:function_uuid": function, "accel:region_type_uuid": region},
    )
    found = store.by_function_id(function, region)
    assert (found.id, found.name, found.size) == (image_id, "nlb.gbs", len(data))
    assert (found.hash_algo, found.hash_value) == ("sha512", hashlib.sha512(data).hexdigest())
    assert store.for_request({"accel:function_id": function}, region) == found
    with pytest.raises(BitstreamNotFound):
        store.by_function_id(function, str(uuid.uuid4()))


def test_uuids_match_in_any_spelling(store: GlanceStore, sdk: Any, ids: tuple[str, str]) -> None:
    function, region = ids
    image_id = operator_upload(
        sdk,
        "upper.gbs",
        b"x",
        **{
            "accel:function_uuid": function.replace("-", "").upper(),
            "accel:region_type_uuid": region.upper(),
        },
    )
    assert store.by_function_id(function, region.replace("-", "")).id == image_id
    assert store.by_function_id(function.upper(), region).id == image_id


def test_look_up_by_function_name_name_and_id(
    store: GlanceStore, sdk: Any, ids: tuple[str, str]
) -> None:
    function_name, region = f"fn-{ids[0]}", ids[1]
    name = f"intel:{function_name}.gbs"  # a colon Glance would read as a filter operator
    image_id = operator_upload(
        sdk,
        name,
        b"y",
        **{"accel:function_name": function_name, "accel:region_type_uuid": region},
    )
    assert store.by_function_name(function_name, region).id == image_id
    assert store.by_name(name, region).id == image_id
    assert store.by_id(image_id, region).id == image_id
    assert store.by_id(image_id.replace("-", "").upper()).id == image_id
    with pytest.raises(IncompatibleBitstream, match=image_id):
        store.by_id(image_id, str(uuid.uuid4()))
    with pytest.raises(BitstreamNotFound):
        store.by_id(str(uuid.uuid4()))


def test_ambiguity_lists_every_match(store: GlanceStore, sdk: Any, ids: tuple[str, str]) -> None:
    function, region = ids
    props = {"accel:function_uuid": function, "accel:region_type_uuid": region}
    first = operator_upload(sdk, "first.gbs", b"1", **props)
    second = operator_upload(sdk, "second.gbs", b"2", **props)
    with pytest.raises(AmbiguousBitstream) as caught:
        store.by_function_id(function, region)
    assert f"{first} ('first.gbs')" in caught.value.message
    assert f"{second} ('second.gbs')" in caught.value.message


def test_images_without_data_are_not_chosen(
    store: GlanceStore, sdk: Any, ids: tuple[str, str]
) -> None:
    function, region = ids
    queued = sdk.image.create_image(
        "queued.gbs",
        disk_format="raw",
        container_format="bare",
        allow_duplicates=True,
        **{"accel:function_uuid": function, "accel:region_type_uuid": region},
    )
    with pytest.raises(BitstreamNotFound):
        store.by_function_id(function, region)
    with pytest.raises(BitstreamUnavailable, match="queued"):
        store.download(queued.id, Path("/nonexistent/never-written"))


def test_store_upload_find_delete(store: GlanceStore, ids: tuple[str, str]) -> None:
    function, region = ids
    meta = NewBitstream(
        name="stored.gbs",
        vendor="8086",
        function_uuid=function.upper(),
        function_name="nlb0",
        region_type_uuid=region,
        properties={"accel:shell": "d5005"},
    )
    made = store.upload(io.BytesIO(b"z" * 3_000_000), meta)
    assert (made.vendor, made.function_uuid, made.size) == ("8086", function, 3_000_000)
    assert made.properties == {"accel:shell": "d5005"}
    assert store.find(Query(function_uuid=function)) == [made]
    assert made in store.find()
    store.delete(made.id)
    assert store.find(Query(function_uuid=function)) == []
    with pytest.raises(BitstreamNotFound):
        store.delete(made.id)


def test_listing_skips_images_that_are_not_bitstreams(store: GlanceStore, sdk: Any) -> None:
    plain = operator_upload(sdk, "cirros.img", b"not a bitstream")
    assert plain not in {b.id for b in store.find()}
    assert store.by_name("cirros.img").id == plain  # still reachable by name or id


def test_download_is_verified_against_os_hash_value(
    store: GlanceStore, sdk: Any, glance_server: GlanceServer, tmp_path: Path
) -> None:
    image_id = operator_upload(sdk, "good.gbs", b"good bytes", **{"accel:vendor": "8086"})
    dest = tmp_path / "out" / "good.gbs"
    assert store.download(image_id, dest).read_bytes() == b"good bytes"
    with store.open(image_id) as stream:
        assert stream.read() == b"good bytes"
    image_file(glance_server, image_id).write_bytes(b"evil bytes")  # same size, other bytes
    dest.unlink()
    with pytest.raises(BitstreamCorrupt, match="sha512"):
        store.download(image_id, dest)
    assert list(dest.parent.iterdir()) == []


def test_cache_reuses_a_verified_copy(
    store: GlanceStore, sdk: Any, glance_server: GlanceServer, tmp_path: Path
) -> None:
    image_id = operator_upload(sdk, "cached.gbs", b"cached bytes", **{"accel:vendor": "8086"})
    bitstream = store.get(image_id)
    cache = tmp_path / "cache"
    path = store.fetch_to_cache(bitstream, cache)
    assert path == cache / f"sha512-{bitstream.hash_value}"
    assert path.read_bytes() == b"cached bytes"
    image_file(glance_server, image_id).write_bytes(b"rotten bytes")
    assert store.fetch_to_cache(bitstream, cache).read_bytes() == b"cached bytes"
    path.write_bytes(b"damaged copy")  # now neither the cache nor Glance has good bytes
    with pytest.raises(BitstreamCorrupt):
        store.fetch_to_cache(bitstream, cache)
    assert list(cache.iterdir()) == []


def test_glance_backend_needs_auth_configured(conf: cfg.ConfigOpts) -> None:
    conf.set_override("backend", "glance", group="bitstreams")
    with pytest.raises(BitstreamStoreError, match="auth_type"):
        factory.from_conf(conf)


def test_unreachable_glance_is_a_store_error(conf: cfg.ConfigOpts) -> None:
    confmod.register_keystoneauth(conf, "glance")
    conf.set_override("backend", "glance", group="bitstreams")
    conf.set_override("auth_type", "none", group="glance")
    conf.set_override("endpoint_override", "http://127.0.0.1:9", group="glance")
    with pytest.raises(BitstreamStoreError, match="Glance GET"):
        factory.from_conf(conf).find()
