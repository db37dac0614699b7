"""docs/metrics.md and the Grafana dashboard name only metrics that exist, and the page
lists every metric and every panel."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY

from acceleron import metrics  # noqa: F401  (defines the metrics)

DOCS = Path(__file__).resolve().parents[2] / "docs"
NAME = re.compile(r"\bacceleron_[a-z_]+")
SUFFIXES = ("_total", "_bucket", "_count", "_sum")


def base(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def test_the_dashboard_names_only_defined_metrics() -> None:
    dashboard = json.loads((DOCS / "grafana" / "acceleron.json").read_text())
    families = {f.name for f in REGISTRY.collect() if f.name.startswith("acceleron_")}
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            for name in NAME.findall(target["expr"]):
                assert base(name) in families, (panel["title"], name)


def test_the_page_lists_every_metric_and_panel() -> None:
    page = (DOCS / "metrics.md").read_text()
    families = {f.name for f in REGISTRY.collect() if f.name.startswith("acceleron_")}
    named = {base(n) for n in NAME.findall(page)}
    assert families <= named, families - named
    assert named <= families, named - families
    dashboard = json.loads((DOCS / "grafana" / "acceleron.json").read_text())
    for panel in dashboard["panels"]:
        assert f"| {panel['title']} |" in page, panel["title"]
