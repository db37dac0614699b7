"""A bind sees public bitstreams and those of the request's own project, nothing else.

Every way a device profile names a bitstream (``accel:bitstream_id``,
``bitstream_name``, ``function_id``, ``function_name``, the last three with the
region's type) is tried on both stores: the local one (on every database) and a
real Glance applying its own multi-tenant RBAC, where an image's owner and
visibility are the truth. Project p2's private bitstreams are never programmed
for p1, never make p1's bind ambiguous, and no error p1 reads names them.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from acceleron.bitstreams import Bitstream, NewBitstream
from acceleron.bitstreams.base import BitstreamStore
from acceleron.bitstreams.glance import GlanceStore
from acceleron.bitstreams.local import LocalStore
from acceleron.bitstreams.model import Query
from acceleron.context import RequestContext
from acceleron.db.models import AcceleratorRequest, Task, table
from acceleron.db.session import Database
from acceleron.exceptions import AcceleronError, BitstreamNotFound
from acceleron.service import arqs as service
from acceleron.service import binding, device_profiles, fitting
from tests.fixtures.arqs import HOST, PATH, bind_body

if TYPE_CHECKING:  # imported by pytest_plugins, so that pytest can rewrite its asserts
    from tests.fixtures.glance import GlanceServer

pytest_plugins = ["tests.fixtures.glance"]

KEYS = ("bitstream_id", "bitstream_name", "function_id", "function_name")
# A member with the compute service's token, as the API hands it to the service
# (arq:get_all_projects lets it).
P1 = RequestContext(
    "req", "u1", "p1", frozenset({"member"}), frozenset({"service"}), all_projects=True
)
TASKS, ARQS = table(Task), table(AcceleratorRequest)


class Catalogue:
    """Bitstreams of one test: each with the test's own function, name and region type."""

    def __init__(self, store: BitstreamStore, region_type: str) -> None:
        self.store = store
        self.region_type = region_type
        self.function = str(uuid.uuid4())
        self.function_name = f"fx-{uuid.uuid4().hex[:8]}"
        self.name = f"{self.function_name}.gbs"

    def add(self, owner: str, visibility: str = "private") -> Bitstream:
        meta = NewBitstream(
            name=self.name,
            function_uuid=self.function,
            function_name=self.function_name,
            region_type_uuid=self.region_type,
            owner=owner,
            visibility=visibility,
        )
        return self.store.upload(io.BytesIO(f"{owner}-{uuid.uuid4()}".encode()), meta)

    def selector(self, key: str, chosen: Bitstream | None = None) -> str:
        """The value of ``accel:<key>`` naming this catalogue's bitstreams (by id: ``chosen``)."""
        values = {
            "bitstream_name": self.name,
            "function_id": self.function,
            "function_name": self.function_name,
        }
        return chosen.id if key == "bitstream_id" and chosen else values[key]


def bind_p1(db: Database, deps: dict[str, Any], store: BitstreamStore, key: str, value: str) -> str:
    """p1 binds a request of a profile naming a bitstream by ``key``; the request."""
    name = f"dp-{uuid.uuid4().hex[:8]}"
    group = {"resources:CUSTOM_ACCELERATOR_FPGA": "1", f"accel:{key}": value}
    device_profiles.create(db, name=name, groups=[group])
    arq = service.create(db, P1, name)[0].uuid
    region = deps["regions"][0]
    request = service.Binding(arq, HOST, region.rp_uuid, str(uuid.uuid4()))
    binding.bind(db, P1, [request], store)
    return str(arq)


def programmed(db: Database, arq: str) -> list[str]:
    """The bitstreams the request's program tasks load."""
    query = (
        select(TASKS.c.params)
        .join(ARQS, ARQS.c.id == TASKS.c.arq_id)
        .where(ARQS.c.uuid == arq, TASKS.c.kind == "program")
    )
    with db.reader() as conn:
        return [row.params["bitstream"]["id"] for row in conn.execute(query)]


def names_none(message: str, hidden: Sequence[Bitstream], given: str) -> None:
    """``message`` names none of the ``hidden`` bitstreams, apart from echoing the
    selector the caller ``given`` itself."""
    rest = message.replace(given, "<given>")
    for bitstream in hidden:
        for word in (bitstream.id, bitstream.id.replace("-", ""), bitstream.name):
            assert word not in rest, message


def refused(call: Callable[[], Any], hidden: Sequence[Bitstream], given: str) -> AcceleronError:
    """The error ``call`` raises; it names none of the ``hidden`` bitstreams."""
    with pytest.raises(AcceleronError) as caught:
        call()
    names_none(caught.value.message, hidden, given)
    return caught.value


def check_scoping(db: Database, deps: dict[str, Any], store: BitstreamStore, key: str) -> None:
    region_type = deps["regions"][0].region_type
    # Only p2's private bitstreams match (two of them): p1 finds none, and is told nothing.
    theirs = Catalogue(store, region_type)
    hidden = [theirs.add("p2"), theirs.add("p2")]
    given = theirs.selector(key, hidden[0])
    error = refused(lambda: bind_p1(db, deps, store, key, given), hidden, given)
    assert isinstance(error, BitstreamNotFound), error.message
    with db.reader() as conn:
        assert conn.execute(select(TASKS).where(TASKS.c.kind == "program")).first() is None
    # p1's own private one and p2's: p1's is programmed.
    both = Catalogue(store, region_type)
    mine, other = both.add("p1"), both.add("p2")
    arq = bind_p1(db, deps, store, key, both.selector(key, mine))
    assert programmed(db, arq) == [mine.id]
    service.delete_arqs(db, P1, [arq])
    # A public one and p2's: the public one is programmed.
    shared = Catalogue(store, region_type)
    public, other = shared.add("p3", "public"), shared.add("p2")
    arq = bind_p1(db, deps, store, key, shared.selector(key, public))
    assert programmed(db, arq) == [public.id]
    service.delete_arqs(db, P1, [arq])
    del other


@pytest.mark.parametrize("key", KEYS)
def test_a_bind_sees_only_public_and_own_bitstreams_local(
    db: Database, inventory_of_host: dict[str, Any], tmp_path: Path, key: str
) -> None:
    check_scoping(db, inventory_of_host, LocalStore(db, tmp_path / "store"), key)


@pytest.fixture(scope="module")
def tenant_glance(glance_tenants_server: GlanceServer) -> Iterator[GlanceStore]:
    """The store as Acceleron's service user (an admin in Glance) sees the tenants' Glance."""
    conn = glance_tenants_server.connect(project="services", roles="admin")
    yield GlanceStore(conn)
    conn.close()


@pytest.mark.slow
@pytest.mark.parametrize("key", KEYS)
def test_a_bind_sees_only_public_and_own_bitstreams_glance(
    db: Database, inventory_of_host: dict[str, Any], tenant_glance: GlanceStore, key: str
) -> None:
    check_scoping(db, inventory_of_host, tenant_glance, key)


def check_found(store: BitstreamStore) -> None:
    """``fitting.found``, the look-up behind a claim's ranking and the profiles'
    steering: p1 finds its own and public bitstreams by every key, never p2's."""
    catalogue = Catalogue(store, str(uuid.uuid4()))
    hidden = catalogue.add("p2")
    for key in KEYS:
        given = catalogue.selector(key, hidden)
        assert fitting.found(store, f"accel:{key}", given, "p1") == [], key
        assert [b.id for b in fitting.found(store, f"accel:{key}", given, "p2")] == [hidden.id]
    mine, public = catalogue.add("p1"), catalogue.add("p3", "public")
    for key in KEYS:
        for shown in (mine, public):
            found = fitting.found(store, f"accel:{key}", catalogue.selector(key, shown), "p1")
            assert shown.id in {b.id for b in found} and hidden.id not in {b.id for b in found}


def test_the_shared_look_up_sees_only_public_and_own_bitstreams_local(
    db: Database, tmp_path: Path
) -> None:
    check_found(LocalStore(db, tmp_path / "store"))


class CountedStore(LocalStore):
    """The local store, counting its look-ups by name and function."""

    finds = 0

    def find(self, query: Query | None = None) -> list[Bitstream]:
        self.finds += 1
        return super().find(query)


def test_a_claims_ranking_reuses_what_its_fit_found_for_its_project(
    db: Database, tmp_path: Path
) -> None:
    """A claim's fit and its ranking ask the store once for a group's selector, and
    p1's answer holds nothing of p2's private bitstream."""
    store = CountedStore(db, tmp_path / "store")
    catalogue = Catalogue(store, str(uuid.uuid4()))
    hidden = catalogue.add("p2")
    group = {
        "resources:CUSTOM_ACCELERATOR_FPGA": "1",
        "accel:function_name": catalogue.function_name,
    }
    for project, functions in (("p1", []), ("p2", [hidden.function_uuid])):
        _, fits = fitting.with_fit_traits(db, store, [group], project, True)
        asked = store.finds
        look_up = fitting.catalogue(store, project, [group], fits)
        assert list(look_up("accel:function_name", catalogue.function_name)) == functions
        assert store.finds == asked
    # a selector no fit looked up is asked of the store, scoped all the same
    assert list(look_up("accel:bitstream_name", catalogue.name)) == [hidden.function_uuid]
    assert store.finds == asked + 1
    p1 = fitting.catalogue(store, "p1", [group], [None])
    assert list(p1("accel:bitstream_name", catalogue.name)) == []


@pytest.mark.slow
def test_the_shared_look_up_sees_only_public_and_own_bitstreams_glance(
    tenant_glance: GlanceStore,
) -> None:
    check_found(tenant_glance)


@pytest.mark.slow
def test_glance_own_rbac_hides_private_images(
    glance_tenants_server: GlanceServer, tenant_glance: GlanceStore
) -> None:
    """The fixture is Glance's real RBAC: p1 cannot see p2's private image."""
    catalogue = Catalogue(tenant_glance, str(uuid.uuid4()))
    theirs = catalogue.add("p2")
    p1 = glance_tenants_server.connect(project="p1")
    try:
        assert p1.image.get(f"/images/{theirs.id}").status_code == 404
    finally:
        p1.close()


def test_the_bind_error_names_no_other_projects_bitstream(
    api: TestClient, db: Database, inventory_of_host: dict[str, Any], conf: Any
) -> None:
    """Over HTTP: p1's bind of a profile only p2's bitstreams match is a 404 naming none."""
    store = LocalStore(db, Path(conf.bitstreams.local_dir))
    catalogue = Catalogue(store, inventory_of_host["regions"][0].region_type)
    hidden = [catalogue.add("p2"), catalogue.add("p2")]
    name = f"dp-{uuid.uuid4().hex[:8]}"
    group = {
        "resources:CUSTOM_ACCELERATOR_FPGA": "1",
        "accel:function_name": catalogue.function_name,
    }
    device_profiles.create(db, name=name, groups=[group])
    p1 = {"X-Roles": "member", "X-Project-Id": "p1", "X-Service-Roles": "service"}
    arq = api.post(PATH, json={"device_profile_name": name}, headers=p1).json()["arqs"][0]
    region = inventory_of_host["regions"][0]
    response = api.patch(
        PATH, json=bind_body(arq["uuid"], region.rp_uuid, str(uuid.uuid4())), headers=p1
    )
    assert response.status_code == 404, response.text
    names_none(response.text, hidden, catalogue.function_name)
