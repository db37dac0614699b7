"""The local bitstream store on every database backend: catalogue, look-ups, bytes, cache."""

from __future__ import annotations

import concurrent.futures
import hashlib
import io
import uuid
from pathlib import Path
from typing import Any

import pytest
from oslo_config import cfg

from acceleron.bitstreams import Bitstream, NewBitstream, Query, factory
from acceleron.bitstreams.local import LocalStore
from acceleron.bitstreams.transfer import CHUNK_SIZE
from acceleron.db.session import Database
from acceleron.exceptions import (
    AmbiguousBitstream,
    BitstreamCorrupt,
    BitstreamNotFound,
    IncompatibleBitstream,
    InvalidInput,
    StateUnwritable,
)

FUNCTION = "5d2e2f3c-8b9a-4c1d-9e0f-1a2b3c4d5e6f"
REGION = "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"
OTHER_REGION = "0a1b2c3d-4e5f-4071-8293-a4b5c6d7e8f9"


class RecordingReader(io.BytesIO):
    """A file object that remembers how much each read asked for."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.asked: list[int | None] = []

    def read(self, size: int | None = -1, /) -> bytes:
        self.asked.append(size)
        return super().read(size)


@pytest.fixture
def store(conf: cfg.ConfigOpts, db: Database) -> LocalStore:
    built = factory.from_conf(conf, db)
    assert isinstance(built, LocalStore)
    return built


@pytest.fixture
def root(conf: cfg.ConfigOpts) -> Path:
    return Path(conf.bitstreams.local_dir)


def upload(store: LocalStore, data: bytes, name: str = "nlb.gbs", **meta: Any) -> Bitstream:
    return store.upload(io.BytesIO(data), NewBitstream(name=name, **meta))


def stored_files(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_file() and not p.name.startswith("."))


def test_upload_get_find_delete(store: LocalStore, root: Path) -> None:
    data = b"\x00bitstream\xff" * 1000
    made = upload(
        store,
        data,
        vendor="8086",
        function_uuid=FUNCTION,
        function_name="nlb0",
        region_type_uuid=REGION,
        properties={"accel:shell": "d5005"},
    )
    assert (made.size, made.hash_algo) == (len(data), "sha256")
    assert made.hash_value == hashlib.sha256(data).hexdigest()
    assert (root / made.hash_value).read_bytes() == data
    assert store.get(made.id) == made
    assert store.find() == [made]
    assert made.properties == {"accel:shell": "d5005"}
    store.delete(made.id)
    assert store.find() == []
    assert stored_files(root) == []
    with pytest.raises(BitstreamNotFound):
        store.get(made.id)
    with pytest.raises(BitstreamNotFound):
        store.delete(made.id)


def test_upload_reads_in_chunks(store: LocalStore) -> None:
    reader = RecordingReader(b"x" * (3 * CHUNK_SIZE + 5))
    made = store.upload(reader, NewBitstream(name="big.gbs"))
    assert made.size == 3 * CHUNK_SIZE + 5
    assert set(reader.asked) == {CHUNK_SIZE}


def test_identical_content_is_stored_once(store: LocalStore, root: Path) -> None:
    first = upload(store, b"same bytes", name="a.gbs")
    second = upload(store, b"same bytes", name="b.gbs")
    assert first.id != second.id
    assert stored_files(root) == [first.hash_value]
    store.delete(first.id)
    assert stored_files(root) == [first.hash_value]
    with store.open(second.id) as stream:
        assert stream.read() == b"same bytes"
    store.delete(second.id)
    assert stored_files(root) == []


def test_uuids_are_stored_canonical_and_compared_folded(store: LocalStore) -> None:
    made = upload(
        store,
        b"x",
        function_uuid=FUNCTION.replace("-", "").upper(),
        region_type_uuid=REGION.upper(),
    )
    assert (made.function_uuid, made.region_type_uuid) == (FUNCTION, REGION)
    assert store.by_function_id(FUNCTION.upper(), REGION.replace("-", "")) == made
    assert store.get(made.id.upper()) == made


def test_look_ups(store: LocalStore) -> None:
    made = upload(
        store,
        b"one",
        name="one.gbs",
        function_uuid=FUNCTION,
        function_name="nlb0",
        region_type_uuid=REGION,
    )
    upload(store, b"two", name="two.gbs", function_uuid=FUNCTION, region_type_uuid=OTHER_REGION)
    assert store.by_id(made.id, REGION) == made
    assert store.by_name("one.gbs", REGION) == made
    assert store.by_function_id(FUNCTION, REGION) == made
    assert store.by_function_name("nlb0", REGION) == made
    assert len(store.find(Query(function_uuid=FUNCTION))) == 2
    assert store.for_request({"accel:function_id": FUNCTION, "resources:FPGA": "1"}, REGION) == made
    assert store.for_request({"resources:FPGA": "1"}, REGION) is None


def test_look_ups_that_find_nothing(store: LocalStore) -> None:
    made = upload(store, b"one", name="one.gbs", function_name="nlb0", region_type_uuid=REGION)
    with pytest.raises(BitstreamNotFound, match="function_name 'nlb0' and region type"):
        store.by_function_name("nlb0", OTHER_REGION)
    with pytest.raises(BitstreamNotFound):
        store.by_function_id(FUNCTION, REGION)
    with pytest.raises(BitstreamNotFound):
        store.by_id(str(uuid.uuid4()))
    with pytest.raises(BitstreamNotFound):
        store.by_id("not-a-uuid")
    with pytest.raises(IncompatibleBitstream, match=made.id):
        store.by_id(made.id, OTHER_REGION)
    with pytest.raises(IncompatibleBitstream, match=made.id):
        store.by_name("one.gbs", OTHER_REGION)


def test_ambiguity_lists_every_match(store: LocalStore) -> None:
    first = upload(store, b"1", name="first.gbs", function_uuid=FUNCTION, region_type_uuid=REGION)
    second = upload(store, b"2", name="second.gbs", function_uuid=FUNCTION, region_type_uuid=REGION)
    with pytest.raises(AmbiguousBitstream) as caught:
        store.by_function_id(FUNCTION, REGION)
    message = caught.value.message
    assert message.startswith("2 bitstreams match function_id")
    for made in (first, second):
        assert f"{made.id} ({made.name!r})" in message
    third = upload(store, b"3", name="first.gbs")
    with pytest.raises(AmbiguousBitstream, match=third.id):
        store.by_name("first.gbs")


def test_same_name_for_two_region_types_picks_by_region(store: LocalStore) -> None:
    upload(store, b"a", name="nlb.gbs", region_type_uuid=REGION)
    other = upload(store, b"b", name="nlb.gbs", region_type_uuid=OTHER_REGION)
    assert store.by_name("nlb.gbs", OTHER_REGION) == other


def test_more_than_one_selector_is_refused(store: LocalStore) -> None:
    with pytest.raises(InvalidInput, match="more than one way"):
        store.for_request({"accel:bitstream_id": FUNCTION, "accel:function_id": FUNCTION}, None)


@pytest.mark.parametrize(
    ("meta", "field"),
    [
        ({"function_uuid": "not-a-uuid"}, "function_uuid"),
        ({"region_type_uuid": "1234"}, "region_type_uuid"),
        ({"properties": {"accel:function_uuid": FUNCTION}}, "reserved"),
        ({"name": ""}, "name"),
    ],
)
def test_bad_metadata_is_refused(
    store: LocalStore, root: Path, meta: dict[str, object], field: str
) -> None:
    fields: dict[str, object] = {"name": "x.gbs", **meta}
    with pytest.raises(InvalidInput, match=field):
        store.upload(io.BytesIO(b"x"), NewBitstream(**fields))  # type: ignore[arg-type]
    assert store.find() == []


def test_download_verifies_and_removes_a_corrupt_copy(
    store: LocalStore, root: Path, tmp_path: Path
) -> None:
    made = upload(store, b"good bytes")
    dest = tmp_path / "out" / "nlb.gbs"
    assert store.download(made.id, dest).read_bytes() == b"good bytes"
    (root / str(made.hash_value)).write_bytes(b"evil bytes")
    dest.unlink()
    with pytest.raises(BitstreamCorrupt, match="sha256"):
        store.download(made, dest)
    assert list(dest.parent.iterdir()) == []
    with pytest.raises(BitstreamCorrupt), store.open(made.id):
        pass


def test_open_yields_verified_bytes(store: LocalStore) -> None:
    made = upload(store, b"payload")
    with store.open(made.id) as stream:
        assert stream.read() == b"payload"


def test_open_checks_the_whole_file_before_a_byte_is_read(store: LocalStore, root: Path) -> None:
    made = upload(store, b"a" * (3 * CHUNK_SIZE))
    damaged = b"a" * (3 * CHUNK_SIZE - 1) + b"b"  # only the last byte differs
    (root / str(made.hash_value)).write_bytes(damaged)
    with pytest.raises(BitstreamCorrupt) as refused, store.open(made.id):
        pytest.fail("a damaged file was handed out")
    actual = hashlib.sha256(damaged).hexdigest()
    assert str(refused.value) == (
        f"Bitstream {made.id} ('nlb.gbs') is corrupt: recorded sha256 {made.hash_value} "
        f"({3 * CHUNK_SIZE} bytes), actual sha256 {actual} ({3 * CHUNK_SIZE} bytes)."
    )


def test_a_store_directory_it_may_not_write_is_named_with_its_option(
    store: LocalStore, root: Path
) -> None:
    root.parent.mkdir(parents=True, exist_ok=True)
    root.write_bytes(b"")  # a file where the directory should be
    with pytest.raises(StateUnwritable, match=r"\[bitstreams\] local_dir") as refused:
        upload(store, b"payload")
    assert f"cannot write to {root} (" in str(refused.value)
    assert store.find() == []


def test_cache_reuses_a_verified_copy(store: LocalStore, root: Path, tmp_path: Path) -> None:
    made = upload(store, b"cached bytes")
    cache = tmp_path / "cache"
    path = store.fetch_to_cache(made, cache)
    assert path == cache / f"sha256-{made.hash_value}"
    assert path.read_bytes() == b"cached bytes"
    (root / str(made.hash_value)).unlink()  # the store cannot serve it any more
    assert store.fetch_to_cache(made, cache) == path
    path.write_bytes(b"rotten bytes")  # a damaged cached copy is fetched again
    (root / str(made.hash_value)).write_bytes(b"cached bytes")
    assert store.fetch_to_cache(made, cache).read_bytes() == b"cached bytes"
    assert sorted(p.name for p in cache.iterdir()) == [path.name]


def test_cache_refuses_corrupt_store_content(store: LocalStore, root: Path, tmp_path: Path) -> None:
    made = upload(store, b"cached bytes")
    (root / str(made.hash_value)).write_bytes(b"other bytes!")
    with pytest.raises(BitstreamCorrupt):
        store.fetch_to_cache(made, tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_concurrent_uploads_and_deletes_of_one_content(store: LocalStore, root: Path) -> None:
    """A row never loses its file to a delete of another row with the same content."""

    def churn(worker: int) -> None:
        for _ in range(10):
            made = upload(store, b"shared content", name=f"w{worker}.gbs")
            with store.open(made.id) as stream:
                assert stream.read() == b"shared content"
            store.delete(made.id)

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(churn, range(4)))
    assert store.find() == []
    assert stored_files(root) == []
