"""``/v2/bitstreams`` (2.7): upload, list, show, download and delete bitstreams.

An upload takes two steps, as with Glance:

* ``POST`` with the metadata creates the bitstream, status ``queued`` (201);
* ``PUT /{uuid}/data`` with the bytes (``application/octet-stream``) stores
  them: the bitstream becomes ``active``, with its size and hash (200). The
  body is read on the event loop into a spool file (no thread waits on a slow
  client; a stalled one is cut after ``[api] client_timeout``), then handed to
  the store, and only once the caller may upload to that bitstream. More than
  ``[bitstreams] max_size_mb`` is refused with 413 (by the middleware, before
  anything reads past it: ``upload_limit``), and a project runs
  ``[bitstreams] max_uploads_per_project`` uploads at once (429).

``GET /{uuid}/data`` streams the bytes with ``X-Bitstream-Hash: <algo>:<hex>``
so that the receiver can verify them. They are checked whole before the answer
starts (``BitstreamStore.open``: the local store hashes its file, a Glance image is
spooled to ``$state_path/download-spool`` while hashed): bytes that no longer match
their hash are answered 409 ``acceleron.bitstream_corrupt`` with both hashes.

A bitstream belongs to the project that created it and is private unless an
admin made it public. Callers see public bitstreams and their own project's;
admins and services (agents program bitstreams) see every one. Only a member
of the owning project, or an admin, uploads to or deletes one.

The store (``[bitstreams] backend``: the local one, or Glance; ``Call.bitstreams``)
reads files or calls Glance, which blocks, so its calls run in the thread pool.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated, Any, BinaryIO, Literal

from fastapi import APIRouter, Body, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse

from acceleron import bitstreams, microversion
from acceleron.api.common import Call, CallDep, json_response, requires, timestamp
from acceleron.api.errors import ERROR_RESPONSES
from acceleron.api.middleware import Limit
from acceleron.api.overrides import PROVIDER
from acceleron.api.versions import Link
from acceleron.bitstreams import Bitstream, NewBitstream
from acceleron.bitstreams.model import PUBLIC
from acceleron.bitstreams.transfer import CHUNK_SIZE, read_chunks
from acceleron.exceptions import Forbidden, InvalidInput, StateUnwritable
from acceleron.failfast import FailFast
from acceleron.uuids import parse

router = APIRouter(
    dependency_overrides_provider=PROVIDER,
    prefix="/v2/bitstreams",
    tags=["bitstreams"],
    responses=ERROR_RESPONSES,
    dependencies=[requires(microversion.V2_7, "The bitstreams API")],
)

HASH_HEADER = "X-Bitstream-Hash"
OCTET_STREAM = "application/octet-stream"
MIB = 1 << 20
_BINARY = {OCTET_STREAM: {"schema": {"type": "string", "format": "binary"}}}


class BitstreamIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=255, description="Names need not be unique.")
    vendor: str | None = Field(
        None, max_length=64, description="The board vendor; the PCI vendor id (8086) is advised."
    )
    function_uuid: str | None = Field(None, description="The function (AFU) id it implements.")
    function_name: str | None = Field(None, max_length=255)
    region_type_uuid: str | None = Field(
        None, description="The region type (interface id) it is built for."
    )
    properties: Annotated[dict[str, str], FailFast] = Field(
        default_factory=dict, description="Further metadata, kept as given."
    )
    visibility: Literal["private", "public"] = Field(
        "private", description="public: every project sees it (bitstream:publicize, admins)."
    )


class BitstreamOut(BaseModel):
    uuid: str
    name: str
    status: str = Field(description="'queued' until its data is uploaded, then 'active'.")
    size: int | None = Field(description="Bytes; None while queued.")
    hash_algo: str | None = Field(description="sha256 (local store), Glance's os_hash_algo.")
    hash_value: str | None = Field(description="Hex digest of the bytes; None while queued.")
    vendor: str | None
    function_uuid: str | None
    function_name: str | None
    region_type_uuid: str | None
    properties: dict[str, str]
    visibility: str = Field(description="'private' (its project only) or 'public'.")
    project_id: str | None = Field(description="The project that owns it.")
    created_at: str | None
    updated_at: str | None
    links: list[Link]


class BitstreamList(BaseModel):
    bitstreams: list[BitstreamOut]


class BitstreamQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    function_uuid: str | None = Field(None, description="Any spelling of the UUID.")
    function_name: str | None = None
    region_type_uuid: str | None = Field(None, description="Any spelling of the UUID.")
    vendor: str | None = None


def view(bitstream: Bitstream, base: str) -> dict[str, Any]:
    return {
        "uuid": bitstream.id,
        "name": bitstream.name,
        "status": bitstream.status,
        "size": bitstream.size,
        "hash_algo": bitstream.hash_algo,
        "hash_value": bitstream.hash_value,
        "vendor": bitstream.vendor,
        "function_uuid": bitstream.function_uuid,
        "function_name": bitstream.function_name,
        "region_type_uuid": bitstream.region_type_uuid,
        "properties": dict(bitstream.properties),
        "visibility": bitstream.visibility,
        "project_id": bitstream.owner,
        "created_at": timestamp(bitstream.created_at),
        "updated_at": timestamp(bitstream.updated_at),
        "links": [{"href": f"{base}/v2/bitstreams/{bitstream.id}", "rel": "self"}],
    }


# --- who sees what ---------------------------------------------------------------------


def _scope(call: Call) -> str | None:
    """The project whose view the caller gets; None: every project's (admins, agents)."""
    try:
        call.authorize("bitstream:get_all_projects")
    except Forbidden:
        return call.context.project_id or ""  # no project: public bitstreams only
    return None


def _owner_target(bitstream: Bitstream) -> dict[str, object]:
    """The policy target: the owning project ("" for none, which no caller matches)."""
    return {"project_id": bitstream.owner or ""}


async def _one(call: Call, ident: str) -> Bitstream:
    """The bitstream, 404 unless the caller sees it."""
    return await call.outbound(call.bitstreams.get, parse(ident, "uuid"), _scope(call))


# --- the upload's body ------------------------------------------------------------------


def upload_limit(conf: Any) -> Limit:
    """The limit of an upload's bytes (``application/octet-stream``): the middleware
    refuses a larger Content-Length before anything runs, and cuts a chunked body past
    it (``app.body_limits``); a body of any other media type has the ordinary limit."""
    size = conf.bitstreams.max_size_mb * MIB
    return Limit(
        size,
        "[bitstreams] max_size_mb",
        f"The bitstream is larger than the {size // MIB} MiB this API takes "
        f"([bitstreams] max_size_mb).",
    )


def _check_upload(request: Request) -> None:
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != OCTET_STREAM:
        raise HTTPException(415, f"Send the bitstream's bytes as {OCTET_STREAM}.")


async def _spool(request: Request, spool: BinaryIO) -> None:
    """Read the body on the event loop into ``spool``: no thread waits on the client
    (a stalled one is cut by the middleware after [api] client_timeout, 408); the
    writes go to a thread a mebibyte at a time. The middleware cuts it past
    ``upload_limit`` (413)."""
    received = bytearray()
    try:
        async for chunk in request.stream():
            received += chunk
            if len(received) >= CHUNK_SIZE:
                await run_in_threadpool(spool.write, bytes(received))
                received.clear()
    except ClientDisconnect as error:
        raise InvalidInput("The upload broke off before the end of its data.") from error
    await run_in_threadpool(spool.write, bytes(received))
    await run_in_threadpool(spool.flush)
    spool.seek(0)


def _spool_dir(conf: Any, name: str) -> Path:
    """``$state_path/<name>``, made if need be; StateUnwritable (503, naming it and
    [DEFAULT] state_path) when this server may not write there."""
    where = Path(conf.state_path) / name
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise StateUnwritable(where, "[DEFAULT] state_path", error) from error
    return where


def _spool_file(conf: Any) -> BinaryIO:
    """An anonymous temporary file under ``$state_path/upload-spool`` (gone on close,
    or with the process)."""
    where = _spool_dir(conf, "upload-spool")
    try:
        return tempfile.TemporaryFile(dir=where)
    except OSError as error:
        raise StateUnwritable(where, "[DEFAULT] state_path", error) from error


# --- handlers ---------------------------------------------------------------------------


@router.get("", responses={200: {"model": BitstreamList}}, summary="List bitstreams (2.7)")
async def list_bitstreams(call: CallDep, query: Annotated[BitstreamQuery, Query()]) -> Response:
    call.authorize("bitstream:get")
    criteria = bitstreams.Query(**query.model_dump(), status=None, project=_scope(call))
    found = await call.outbound(call.bitstreams.find, criteria)
    return json_response({"bitstreams": [view(b, call.base_url) for b in found]})


@router.get("/{uuid}", responses={200: {"model": BitstreamOut}}, summary="Show a bitstream (2.7)")
async def show_bitstream(uuid: str, call: CallDep) -> Response:
    call.authorize("bitstream:get")
    bitstream = await _one(call, uuid)
    return json_response(view(bitstream, call.base_url))


@router.post(
    "",
    status_code=201,
    responses={201: {"model": BitstreamOut}},
    summary="Create a bitstream, status queued; PUT its data next (2.7)",
)
async def create_bitstream(body: Annotated[BitstreamIn, Body()], call: CallDep) -> Response:
    call.authorize("bitstream:create")
    if body.visibility == PUBLIC:
        call.authorize("bitstream:publicize")
    meta = NewBitstream(**body.model_dump(), owner=call.context.project_id)
    bitstream = await call.outbound(call.bitstreams.create, meta)
    base = call.base_url
    return json_response(
        view(bitstream, base),
        status_code=201,
        headers={"Location": f"{base}/v2/bitstreams/{bitstream.id}"},
    )


@router.put(
    "/{uuid}/data",
    responses={200: {"model": BitstreamOut}},
    openapi_extra={"requestBody": {"required": True, "content": _BINARY}},
    summary="Upload a queued bitstream's bytes, sent as application/octet-stream (2.7)",
)
async def upload_bitstream_data(uuid: str, call: CallDep) -> Response:
    bitstream = await _one(call, uuid)
    call.authorize("bitstream:upload", _owner_target(bitstream))
    _check_upload(call.request)  # only now is the body read: the caller may upload to it
    conf = call.services.conf
    with call.services.uploads.taken(call.context.project_id or ""), _spool_file(conf) as spool:
        await _spool(call.request, spool)
        uploaded = await call.outbound(call.bitstreams.upload_data, bitstream.id, spool)
    return json_response(view(uploaded, call.base_url))


@router.get(
    "/{uuid}/data",
    response_class=Response,
    responses={
        200: {
            "content": _BINARY,
            "description": "The bytes.",
            "headers": {
                HASH_HEADER: {
                    "description": "<algo>:<hex digest> of the bytes, to verify them by.",
                    "schema": {"type": "string"},
                }
            },
        }
    },
    summary="Download a bitstream's bytes (2.7)",
)
async def download_bitstream_data(uuid: str, call: CallDep) -> Response:
    call.authorize("bitstream:get")
    bitstream = await _one(call, uuid)
    spool = _spool_dir(call.services.conf, "download-spool")
    stack = contextlib.ExitStack()
    # Checked whole before the answer starts: a corrupt bitstream is a 409 naming both
    # hashes, never a download that breaks off.
    stream = await call.outbound(stack.enter_context, call.bitstreams.open(bitstream, spool))
    headers = {HASH_HEADER: f"{bitstream.hash_algo}:{bitstream.hash_value}"}
    if bitstream.size is not None:
        headers["Content-Length"] = str(bitstream.size)
    return StreamingResponse(
        _outbound_chunks(call, read_chunks(stream), stack),
        media_type=OCTET_STREAM,
        headers=headers,
    )


async def _outbound_chunks(
    call: Call, chunks: Iterator[bytes], stack: contextlib.ExitStack
) -> AsyncIterator[bytes]:
    """The verified copy's chunks, each read on an outbound thread; the copy closed
    however the answer ends (a reader that stalls is cut by the middleware)."""
    try:
        while (chunk := await call.outbound(next, chunks, b"")) != b"":
            yield chunk
    finally:
        await call.outbound(stack.close)


@router.delete("/{uuid}", status_code=204, summary="Delete a bitstream (2.7)")
async def delete_bitstream(uuid: str, call: CallDep) -> Response:
    bitstream = await _one(call, uuid)
    call.authorize("bitstream:delete", _owner_target(bitstream))
    await call.outbound(call.bitstreams.delete, bitstream.id)
    return Response(status_code=204)
