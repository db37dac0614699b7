"""What a server-side claim reads from Acceleron's records before it asks Placement: the
regions holding a wanted function (however its id is spelled, alone or among several),
the hosts holding them, and the hosts with a device of a class asked for."""

from __future__ import annotations

from pathlib import Path

from oslo_config import cfg
from sqlalchemy import text, update

from acceleron.db.session import Database
from acceleron.drivers.fake import FakeDriver
from acceleron.placement import names
from acceleron.report import HostReport
from acceleron.service import inventory
from acceleron.service.claim_allocation import (
    _HELD,
    _PUBLISHED,
    _REGIONS,
    DEPLOYABLES,
    DEVICES,
    HOSTS,
    TREES_TRIED,
    WALKED,
    survey,
)

ONE = "d8424dc4a4a3c413f89e433683f9040b"
TWO = "f7df405cbd7acf7222f144b0b93acd18"
DASHED = "f7df405c-bd7a-cf72-22f1-44b0b93acd18"  # TWO, spelled with dashes
FPGA = "resources:CUSTOM_ACCELERATOR_FPGA"


def fpga(*functions: str) -> str:
    return (
        "devices:\n  - type: FPGA\n    product_id: '09c4'\n    model: PAC_ARRIA10\n"
        "    regions:\n      - {region_type: ce48969398f05f33946d560708be108a, "
        f"accelerators: 1, functions: [{', '.join(functions)}]}}\n"
    )


QAT = "devices:\n  - {type: QAT, product_id: '37c8', model: C62X, vfs: 4}\n"


def report(db: Database, conf: cfg.ConfigOpts, tmp_path: Path, host: str, text: str) -> None:
    path = tmp_path / f"{host}.yaml"
    path.write_text(text)
    conf.set_override("inventory_file", str(path), group="fake")
    conf.set_override("host", host)
    devices = tuple(FakeDriver(conf, Path("/")).discover())
    inventory.reconcile(db, HostReport(host, "1", devices))


def in_placement(db: Database, *hosts: str) -> None:
    with db.writer() as conn:
        for host in hosts:
            conn.execute(update(HOSTS).where(HOSTS.c.hostname == host).values(rp_uuid=host))


def test_holders_of_one_function_or_of_several_and_hosts_with_the_class(
    db: Database, conf: cfg.ConfigOpts, tmp_path: Path
) -> None:
    report(db, conf, tmp_path, "several", fpga(ONE, TWO))
    report(db, conf, tmp_path, "dashed", fpga(DASHED))
    report(db, conf, tmp_path, "qat", QAT)
    report(db, conf, tmp_path, "unpublished", fpga(TWO))
    in_placement(db, "several", "dashed", "qat")
    groups = [{FPGA: "1"}]

    two, one = (set(names.function_traits("FPGA", "Intel", f)) for f in (TWO, ONE))
    found = survey(db, groups, {"device_profile_0": frozenset({TWO})})
    assert found.holder_trees == {"several", "dashed"}
    assert found.held["several"]["device_profile_0"] >= two
    assert found.held["dashed"]["device_profile_0"] >= two
    assert found.everywhere()["device_profile_0"] >= two
    assert found.trees == {"several", "dashed"}  # the hosts with an FPGA, in Placement

    found = survey(db, groups, {"device_profile_0": frozenset({ONE})})
    assert found.holder_trees == {"several"}
    assert found.held["several"]["device_profile_0"] >= one
    assert not found.held["several"]["device_profile_0"] & two
    assert not found.everywhere()["device_profile_0"] & two

    qat = survey(db, [{"resources:CUSTOM_ACCELERATOR_QAT": "1"}], {})
    assert not qat.held and not qat.holder_trees and qat.trees == {"qat"}
    memory = survey(db, [{"resources:CUSTOM_ACCELERATOR_MEMORY_HBM": "1024"}], {})
    assert len(memory.trees) == TREES_TRIED  # no type publishes it: any host
    assert memory.trees < {"several", "dashed", "qat"}

    on_host = survey(db, groups, {"device_profile_0": frozenset({TWO})}, hostname="dashed")
    assert on_host.holder_trees == on_host.trees == {"dashed"} and on_host.only == "dashed"
    on_qat = survey(db, groups, {"device_profile_0": frozenset({TWO})}, hostname="qat")
    assert (on_qat.holder_trees, on_qat.trees) == (frozenset(), frozenset())


def test_the_hosts_tried_are_a_few_chosen_at_random(
    db: Database, conf: cfg.ConfigOpts, tmp_path: Path
) -> None:
    """A claim reads TREES_TRIED hosts of each kind, not every host, and not always the
    same ones (so that concurrent claims spread); only hosts in Placement."""
    hosts = [f"host-{n}" for n in range(6)]
    for host in [*hosts, "not-yet-1", "not-yet-2", "not-yet-3"]:
        report(db, conf, tmp_path, host, fpga(ONE))
    in_placement(db, *hosts)  # the other three are not in Placement yet: never tried
    seen: set[frozenset[str]] = set()
    for _ in range(30):
        found = survey(db, [{FPGA: "1"}], {"device_profile_0": frozenset({ONE})})
        assert len(found.holder_trees) == len(found.trees) == TREES_TRIED
        assert found.holder_trees | found.trees <= set(hosts)
        seen.add(found.holder_trees)
    assert len(seen) > 1


def test_a_region_found_by_the_function_it_holds_now(
    db: Database, conf: cfg.ConfigOpts, tmp_path: Path
) -> None:
    """The agent reports another function in the region: claims find it by that one."""
    report(db, conf, tmp_path, "fpga-host", fpga(ONE))
    in_placement(db, "fpga-host")
    report(db, conf, tmp_path, "fpga-host", fpga(DASHED))
    wanted = {"device_profile_0": frozenset({TWO})}  # DASHED, spelled without dashes
    assert survey(db, [{FPGA: "1"}], wanted).holder_trees == {"fpga-host"}
    was = {"device_profile_0": frozenset({ONE})}
    assert survey(db, [{FPGA: "1"}], was).holder_trees == frozenset()


def test_the_walks_read_through_the_indexes(db: Database) -> None:
    """The hosts are picked by walking an index from a random point, never by reading
    (and sorting) every holder: what keeps a claim's survey at a few rows whatever the
    number of hosts (bench/survey.py: 24.5 ms -> 3.2 ms at 1,000 hosts). SQLite's plan
    says so; the other backends' planners choose by their statistics."""
    if db.engine.dialect.name != "sqlite":
        return
    holders = _PUBLISHED.select_from(_HELD).where(DEPLOYABLES.c.function_key == "K")
    with_type = _PUBLISHED.select_from(DEVICES.join(HOSTS, HOSTS.c.hostname == DEVICES.c.hostname))
    walks = {
        "ix_deployables_function_key_uuid": (holders, DEPLOYABLES.c.uuid),
        "ix_devices_type_uuid": (with_type.where(DEVICES.c.type == "FPGA"), DEVICES.c.uuid),
    }
    with db.reader() as conn:
        for index, (rows, order) in walks.items():
            walk = rows.where(order >= "8").order_by(order).limit(WALKED)
            sql = str(walk.compile(db.engine, compile_kwargs={"literal_binds": True}))
            plan = " | ".join(row[-1] for row in conn.execute(text(f"EXPLAIN QUERY PLAN {sql}")))
            assert f"USING INDEX {index}" in plan and "TEMP B-TREE" not in plan, plan
        regions = str(
            _REGIONS.where(HOSTS.c.rp_uuid.in_(["a", "b"])).compile(
                db.engine, compile_kwargs={"literal_binds": True}
            )
        )
        plan = " | ".join(row[-1] for row in conn.execute(text(f"EXPLAIN QUERY PLAN {regions}")))
        assert "USING INDEX ix_hosts_rp_uuid" in plan and "SCAN" not in plan, plan
