"""os_acc's pure parts: the instance-operation table, provider mapping, attachments."""

from __future__ import annotations

from pathlib import Path

import pytest

from os_acc import PlugFailed, UnsupportedOperation, operations
from os_acc.connector import _profile_group, attachment, inline_groups, providers_by_group
from os_acc.operations import Action

DOC = Path(__file__).parents[2] / "docs" / "instance-operations.md"


@pytest.mark.parametrize(
    ("operation", "before", "after"),
    [
        ("boot", Action.PLUG, Action.NOTHING),
        ("delete", Action.UNPLUG, Action.NOTHING),
        ("shelve", Action.UNPLUG, Action.NOTHING),
        ("unshelve", Action.PLUG, Action.NOTHING),
        ("pause", Action.NOTHING, Action.NOTHING),
        ("reboot", Action.NOTHING, Action.NOTHING),
        ("rebuild", Action.NOTHING, Action.NOTHING),
        ("resize", Action.UNPLUG, Action.PLUG),
        ("cold_migrate", Action.UNPLUG, Action.PLUG),
        ("migrate", Action.UNPLUG, Action.PLUG),
        ("confirm_resize", Action.NOTHING, Action.NOTHING),
        ("revert_resize", Action.UNPLUG, Action.PLUG),
        ("rescue", Action.NOTHING, Action.NOTHING),
        ("unrescue", Action.NOTHING, Action.NOTHING),
        ("create_image", Action.NOTHING, Action.NOTHING),
        ("backup", Action.NOTHING, Action.NOTHING),
        ("shelve_offload", Action.UNPLUG, Action.NOTHING),
        ("soft_delete", Action.UNPLUG, Action.NOTHING),
        ("force_delete", Action.UNPLUG, Action.NOTHING),
        ("restore", Action.PLUG, Action.NOTHING),
        ("set_admin_password", Action.CHECK, Action.NOTHING),
        ("trigger_crash_dump", Action.RECORD, Action.NOTHING),
    ],
)
def test_spec_000_operations(operation: str, before: Action, after: Action) -> None:
    rule = operations.rule_for(operation)
    assert (rule.before, rule.after) == (before, after)


@pytest.mark.parametrize("operation", ["live_migrate", "boot_from_snapshot"])
def test_unsupported_operations_are_refused_with_the_reason(operation: str) -> None:
    with pytest.raises(UnsupportedOperation, match=r"not supported .* with accelerators: "):
        operations.rule_for(operation)


def test_where_nova_refuses_an_operation_the_table_says_so() -> None:
    """Nova 34 answers 400 to these for servers with accelerators (docs/design/nova-contract.md)."""
    refused = {name for name, rule in operations.OPERATIONS.items() if rule.nova}
    assert refused == {
        "resize",
        "confirm_resize",
        "revert_resize",
        "cold_migrate",
        "migrate",
        "suspend",
        "resume",
        "live_migrate",
    }
    assert "| `migrate` | unplug | plug | refused by Nova |" in operations.markdown()


def test_unknown_operations_are_refused() -> None:
    with pytest.raises(UnsupportedOperation, match="Unknown instance operation 'teleport'"):
        operations.rule_for("teleport")


def test_the_docs_show_the_table_of_the_code() -> None:
    assert operations.markdown() in DOC.read_text()


def test_providers_by_group_reads_the_three_forms() -> None:
    assert providers_by_group({"uuid": "rp"}, {0, 1}) == {0: "rp", 1: "rp"}
    nova = {"device_profile_0": ["a"], "device_profile_1": ["b"], "other": ["x"]}
    assert providers_by_group(nova, {0, 1}) == {0: "a", 1: "b"}
    assert providers_by_group({"0": "a", "1": "b"}, {1}) == {0: "a", 1: "b"}
    with pytest.raises(PlugFailed, match=r"group\(s\) \[1\]"):
        providers_by_group({"device_profile_0": ["a"]}, {0, 1})


def test_providers_by_group_reads_nova_suffixes_of_inline_groups() -> None:
    """Nova maps a flavor's inline groups by their suffixes (``resources1:`` is "1");
    group ``i`` of the profile os_acc made is the flavor's ``suffixes[i]``."""
    nova = {"1": ["region"], "2": ["pool"]}
    assert providers_by_group(nova, {0, 1}, ("1", "2")) == {0: "region", 1: "pool"}
    unsuffixed = {"": ["gpu"], "3": ["pool"], "_net": "nic"}
    assert providers_by_group(unsuffixed, {0, 1, 2}, ("", "3", "_net")) == {
        0: "gpu",
        1: "pool",
        2: "nic",
    }
    # 0-based indexes still work beside suffixes that do not name every group.
    assert providers_by_group({"0": "a", "1": "b"}, {0, 1}, ("1", "2")) == {0: "a", 1: "b"}
    with pytest.raises(PlugFailed, match=r"\[0, 1\] \(flavor suffix\(es\) '1', '2'\)"):
        providers_by_group({"2": ["pool"]}, {0, 1}, ("1", "2"))


def test_an_attachment_carries_the_pci_id() -> None:
    arq = {
        "uuid": "u",
        "device_profile_group_id": 0,
        "attach_handle_type": "PCI",
        "attach_handle_uuid": "h",
        "attach_handle_info": {"domain": "0000", "bus": "5e", "device": "00", "function": "1"},
    }
    assert attachment(arq)["pci_id"] == "0000:5e:00.1"
    assert attachment({**arq, "attach_handle_info": {"mig_uuid": "MIG-1"}})["pci_id"] is None
    assert attachment(arq)["attach_target"] == "VM"  # as before 2.11
    for target in ("host", "none"):  # not the VM's: nothing for Nova to attach
        found = attachment({**arq, "attach_target": target})
        assert (found["pci_id"], found["attach_target"]) == (None, target)
        assert found["attach_handle_info"]["bus"] == "5e"


def test_inline_groups_keep_what_a_profile_takes() -> None:
    group = {
        "resources:CUSTOM_ACCELERATOR_FPGA": "1",
        "accel:function_trait": "CUSTOM_X",
        "accel:function_id": "abc",
    }
    assert _profile_group(group) == {
        "resources:CUSTOM_ACCELERATOR_FPGA": "1",
        "accel:function_id": "abc",
    }


def test_an_inline_group_of_n_regions_is_n_groups_each_with_its_flavor_suffix() -> None:
    """As a profile stores it: each of the N groups maps to the provider Nova chose for
    the flavor's group (a region with N accelerators)."""
    regions = {"resources:CUSTOM_ACCELERATOR_FPGA": "2", "trait:CUSTOM_FPGA_INTEL": "required"}
    qat = {"resources:CUSTOM_ACCELERATOR_QAT": "1"}
    groups, suffixes = inline_groups([regions, qat], ("1", "2"))
    one = {**regions, "resources:CUSTOM_ACCELERATOR_FPGA": "1"}
    assert (groups, suffixes) == ([one, one, qat], ("1", "1", "2"))
    chosen = providers_by_group({"1": ["rp-region"], "2": ["rp-qat"]}, {0, 1, 2}, suffixes)
    assert chosen == {0: "rp-region", 1: "rp-region", 2: "rp-qat"}
