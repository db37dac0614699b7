"""The Glance bitstream store: each bitstream is a Glance v2 image.

Metadata lives in image properties: ``accel:function_uuid``,
``accel:function_name``, ``accel:region_type_uuid`` and ``accel:vendor`` (the
board vendor, free text; the PCI vendor id such as ``8086`` is recommended).
Other properties an uploader gives are kept as they are. An upload creates
the image (status queued) and then sends its bytes, as ``openstack image
create`` does; ``NewBitstream.owner`` and ``visibility`` become the image's
when given (Glance lets only admins create an image another project owns, so
the REST API, which uploads on behalf of its callers, needs an admin in
``[glance]``); otherwise the owner is the project Glance sees the upload come
from. The bytes are verified against the image's ``os_hash_algo`` and
``os_hash_value`` (SHA-512 by default), which Glance computes on upload.

Glance compares property filters exactly and openstacksdk's ``images()`` drops
filters it does not know, so searches are plain ``GET /v2/images`` requests
with the properties as query parameters; a search by a UUID property asks
for each spelling (dashed or not, lower or upper case) and every result is
checked again here with UUIDs folded.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, BinaryIO

import requests
from keystoneauth1 import exceptions as ks_exceptions
from openstack import connection
from openstack import exceptions as sdk_exceptions

from acceleron.bitstreams import transfer
from acceleron.bitstreams.base import BitstreamStore
from acceleron.bitstreams.model import (
    ACCEL_KEYS,
    FUNCTION_NAME_KEY,
    FUNCTION_UUID_KEY,
    REGION_TYPE_KEY,
    RESERVED_KEYS,
    VENDOR_KEY,
    Bitstream,
    NewBitstream,
    Query,
)
from acceleron.exceptions import BitstreamNotFound, BitstreamStoreError
from acceleron.uuids import is_uuid_like, parse

PAGE_SIZE = 200
# Properties openstacksdk adds to the images it creates, for its own bookkeeping.
_SDK_PREFIX = "owner_specified.openstack."
_FAILURES = (sdk_exceptions.SDKException, ks_exceptions.ClientException, requests.RequestException)


class GlanceStore(BitstreamStore):
    backend = "glance"

    def __init__(self, conn: connection.Connection) -> None:
        self._conn = conn

    # --- HTTP ------------------------------------------------------------------------

    def _request(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        """One request to the image API: a 404 is returned, other errors raise."""
        try:
            response = self._conn.image.request(url, method, raise_exc=False, **kwargs)
            if response.status_code != 404:
                sdk_exceptions.raise_from_response(response)
        except _FAILURES as exc:
            raise BitstreamStoreError(f"Glance {method} {url} failed: {exc}") from exc
        return response

    def _images(self, params: Mapping[str, str]) -> Iterator[dict[str, Any]]:
        """Every image the filters select, page after page."""
        query: dict[str, str | int] = {**params, "limit": PAGE_SIZE}
        while True:
            body = self._request("GET", "/images", params=query).json()
            images: list[dict[str, Any]] = body.get("images", [])
            yield from images
            if not images or "next" not in body:
                return
            query["marker"] = images[-1]["id"]

    # --- primitives ------------------------------------------------------------------

    def _add(self, data: BinaryIO, meta: NewBitstream) -> Bitstream:
        created = self._create(meta)
        try:
            return self._put_data(created, data)
        except BaseException:
            with contextlib.suppress(BitstreamStoreError):  # the upload's error says more
                self._remove(created.id)
            raise

    def _create(self, meta: NewBitstream) -> Bitstream:
        return _to_bitstream(self._request("POST", "/images", json=_image(meta)).json())

    def _put_data(self, bitstream: Bitstream, data: BinaryIO) -> Bitstream:
        headers = {"Content-Type": "application/octet-stream"}
        url = f"/images/{bitstream.id}/file"
        if self._request("PUT", url, data=data, headers=headers).status_code == 404:
            raise BitstreamNotFound(f"Bitstream {bitstream.describe()} was deleted meanwhile.")
        # The upload answers with no body; the size and hashes come with a new GET.
        return self.get(bitstream.id)

    def _get(self, bitstream_id: str) -> Bitstream | None:
        if not is_uuid_like(bitstream_id):
            return None
        response = self._request("GET", f"/images/{parse(bitstream_id, 'id')}")
        return None if response.status_code == 404 else _to_bitstream(response.json())

    def _find(self, query: Query) -> list[Bitstream]:
        images: dict[str, dict[str, Any]] = {}
        for params in _server_filters(query):
            for image in self._images(params):
                images.setdefault(image["id"], image)
        found = [_to_bitstream(image) for image in images.values()]
        return sorted(
            (b for b in found if query.matches(b) and (query.has_criteria or _is_bitstream(b))),
            key=lambda b: (images[b.id].get("created_at") or "", b.id),
        )

    def _remove(self, bitstream_id: str) -> bool:
        if not is_uuid_like(bitstream_id):
            return False
        image_url = f"/images/{parse(bitstream_id, 'id')}"
        return self._request("DELETE", image_url).status_code != 404

    @contextlib.contextmanager
    def _chunks(self, bitstream: Bitstream) -> Iterator[Iterable[bytes]]:
        response = self._request("GET", f"/images/{bitstream.id}/file", stream=True)
        with response:
            if response.status_code == 404:
                raise BitstreamStoreError(f"Bitstream {bitstream.describe()} vanished from Glance.")
            yield _body(response)


def _body(response: requests.Response) -> Iterator[bytes]:
    try:
        yield from response.iter_content(transfer.CHUNK_SIZE)
    except requests.RequestException as exc:
        raise BitstreamStoreError(f"Glance download broke off: {exc}") from exc


def _image(meta: NewBitstream) -> dict[str, Any]:
    """The body of the image create request: attributes, then properties."""
    fields = {
        "owner": meta.owner,
        "visibility": meta.visibility,
        FUNCTION_UUID_KEY: meta.function_uuid,
        FUNCTION_NAME_KEY: meta.function_name,
        REGION_TYPE_KEY: meta.region_type_uuid,
        VENDOR_KEY: meta.vendor,
    }
    return {
        "name": meta.name,
        "disk_format": "raw",
        "container_format": "bare",
        **meta.properties,
        **{k: v for k, v in fields.items() if v is not None},
    }


def _spellings(canonical: str) -> list[str]:
    plain = canonical.replace("-", "")
    return list(dict.fromkeys([canonical, plain, canonical.upper(), plain.upper()]))


def _server_filters(query: Query) -> list[dict[str, str]]:
    """Query parameters that select a superset of the matches: one set per spelling."""
    base: dict[str, str] = {}
    if query.status is not None:
        base["status"] = query.status
    if query.name is not None:
        base["name"] = f"eq:{query.name}"  # a bare "a:b" would read as operator "a"
    if query.function_name is not None:
        base[FUNCTION_NAME_KEY] = query.function_name
    if query.vendor is not None:
        base[VENDOR_KEY] = query.vendor
    if query.function_uuid is not None:
        return [{**base, FUNCTION_UUID_KEY: s} for s in _spellings(query.function_uuid)]
    if query.region_type_uuid is not None:
        return [{**base, REGION_TYPE_KEY: s} for s in _spellings(query.region_type_uuid)]
    return [base]


def _is_bitstream(bitstream: Bitstream) -> bool:
    """Whether an image listed without criteria is a bitstream: it carries an accel: key."""
    return any(
        value is not None
        for value in (
            bitstream.function_uuid,
            bitstream.function_name,
            bitstream.region_type_uuid,
            bitstream.vendor,
        )
    )


def _to_bitstream(image: Mapping[str, Any]) -> Bitstream:
    extra = {
        key: str(value)
        for key, value in image.items()
        if key not in RESERVED_KEYS and key not in ACCEL_KEYS and not key.startswith(_SDK_PREFIX)
    }
    return Bitstream(
        id=image["id"],
        name=image.get("name") or "",
        size=image.get("size"),
        hash_algo=image.get("os_hash_algo"),
        hash_value=image.get("os_hash_value"),
        vendor=image.get(VENDOR_KEY),
        function_uuid=image.get(FUNCTION_UUID_KEY),
        function_name=image.get(FUNCTION_NAME_KEY),
        region_type_uuid=image.get(REGION_TYPE_KEY),
        properties=extra,
        status=image.get("status") or "",
        owner=image.get("owner"),
        visibility=image.get("visibility") or "private",
        created_at=_time(image.get("created_at")),
        updated_at=_time(image.get("updated_at")),
    )


def _time(value: Any) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None
