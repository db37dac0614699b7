"""``[placement]`` read into sync options: the functionality map, normalised and checked."""

from __future__ import annotations

import pytest
from oslo_config import cfg

from acceleron.exceptions import ConfigError
from acceleron.service.placement import options_from_conf

REGION = "9926ab6d6c925a68aabca7d84c545738"


def options(conf: cfg.ConfigOpts, functionality: dict[str, str]) -> dict[str, str]:
    conf.set_override("functionality", functionality, "placement")
    return dict(options_from_conf(conf).functionality)


def test_keys_are_folded_and_values_upper_cased(conf: cfg.ConfigOpts) -> None:
    got = options(
        conf,
        {
            "pac arria10": "compute",
            "9926AB6D-6C92-5A68-AABC-A7D84C545738": " Network ",
            "ce48969398f05f33946d560708be108a": "STORAGE",
        },
    )
    assert got == {
        "PAC_ARRIA10": "COMPUTE",
        REGION.upper(): "NETWORK",
        "CE48969398F05F33946D560708BE108A": "STORAGE",
    }


def test_the_same_key_twice_agreeing_is_fine(conf: cfg.ConfigOpts) -> None:
    assert options(conf, {"PAC-ARRIA10": "compute", "pac_arria10": "COMPUTE"}) == {
        "PAC_ARRIA10": "COMPUTE"
    }


@pytest.mark.parametrize(
    ("functionality", "why"),
    [
        ({"PAC_ARRIA10": "crypto"}, "must be one of COMPUTE, NETWORK, STORAGE"),
        ({"PAC/ARRIA10": "compute"}, "must be a device model or a region type"),
        ({"PAC-ARRIA10": "compute", "pac arria10": "network"}, "already has functionality"),
    ],
)
def test_a_bad_entry_is_refused_naming_the_option(
    conf: cfg.ConfigOpts, functionality: dict[str, str], why: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        options(conf, functionality)
    assert caught.value.message.startswith("[placement] functionality: in ")
    assert why in caught.value.message
