"""Rewriting names in stored device profiles, on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import pytest

from acceleron.db.session import Database
from acceleron.exceptions import InvalidInput
from acceleron.service import device_profiles as dp

OLD = [
    {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "trait:CUSTOM_FPGA_INTEL_ARRIA10": "required"},
    {"resources:PGPU": "1", "accel:function_name": "gzip"},
]
NEW = [
    {"resources:FPGA": "1", "trait:CUSTOM_FPGA_INTEL_PAC_ARRIA10": "required"},
    {"resources:PGPU": "1", "trait:CUSTOM_GZIP": "required"},
]
MAPPING = dp.NameMapping.from_dict(
    {
        "resource_classes": {"CUSTOM_ACCELERATOR_FPGA": "FPGA"},
        "traits": {
            "CUSTOM_FPGA_INTEL_ARRIA10": "CUSTOM_FPGA_INTEL_PAC_ARRIA10",
            "CUSTOM_NOWHERE": "CUSTOM_STILL_NOWHERE",
        },
        "properties": [{"key": "accel:function_name", "value": "gzip", "trait": "CUSTOM_GZIP"}],
    }
)


def groups(db: Database, name: str) -> list[dict[str, str]]:
    return list(dp.get(db, name).groups)


def test_dry_run_reports_and_changes_nothing(db: Database) -> None:
    dp.create(db, name="old", groups=OLD)
    dp.create(db, name="untouched", groups=[{"resources:VGPU": "1"}])
    report = dp.rewrite_profiles(db, MAPPING, apply=False)
    assert report.changes == [dp.Rewrite("old", OLD, NEW)]
    assert report.unmatched == ["traits: CUSTOM_NOWHERE -> CUSTOM_STILL_NOWHERE"]
    assert groups(db, "old") == OLD
    assert dp.get(db, "old").updated_at is None


def test_apply_stores_the_rewrite_in_order(db: Database) -> None:
    dp.create(db, name="old", groups=OLD)
    dp.create(db, name="untouched", groups=[{"resources:VGPU": "1"}])
    report = dp.rewrite_profiles(db, MAPPING, apply=True)
    assert [c.name for c in report.changes] == ["old"]
    stored = dp.get(db, "old")
    assert [list(g.items()) for g in stored.groups] == [list(g.items()) for g in NEW]
    assert stored.updated_at is not None
    assert groups(db, "untouched") == [{"resources:VGPU": "1"}]
    assert dp.rewrite_profiles(db, MAPPING, apply=True).changes == []


@pytest.mark.parametrize(
    ("second", "fragment"),
    [
        (
            [
                {"resources:VGPU": "1"},
                {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "resources:FPGA": "2"},
            ],
            "groups[1]: 'resources:CUSTOM_ACCELERATOR_FPGA' and 'resources:FPGA' would both "
            "become 'resources:FPGA'",
        ),
        (
            [{"resources:CUSTOM_ACCELERATOR_FPGA": "100"}],
            "groups: the profile asks for 100 accelerators, at most 64",
        ),
    ],
)
def test_a_profile_that_would_break_stops_the_whole_rewrite(
    db: Database, second: list[dict[str, str]], fragment: str
) -> None:
    dp.create(db, name="fine", groups=OLD)
    made = dp.Limits(max_accelerators_per_group=100, max_groups=100)  # 100 regions: 100 groups
    dp.create(db, name="broken", groups=second, limits=made)
    stored = groups(db, "broken")
    limits = dp.Limits(max_accelerators=64, max_accelerators_per_group=100, max_groups=100)
    with pytest.raises(InvalidInput) as info:
        dp.rewrite_profiles(db, MAPPING, apply=True, limits=limits)
    assert info.value.message.startswith(
        "Device profile 'broken' would be invalid after the rewrite: "
    )
    assert fragment in info.value.message
    # "fine" was rewritten first in the same transaction: it is rolled back too.
    assert groups(db, "fine") == OLD
    assert groups(db, "broken") == stored
