"""Files of the Helm chart generated from the code stay in step with it (the chart
itself is tested with helm and kubeconform in tests/integration/test_k8s_chart.py)."""

from __future__ import annotations

from pathlib import Path

import yaml

from bridge.runtimes import builtin_runtimes, runtimes_yaml

CHART = Path(__file__).resolve().parents[2] / "charts" / "hpc-bridge"


def test_the_charts_runtimes_are_the_built_in_ones() -> None:
    shipped = (CHART / "files" / "runtimes.yaml").read_text()
    assert shipped == runtimes_yaml(), (
        "regenerate: .venv/bin/hpc-bridge runtimes --yaml > charts/hpc-bridge/files/runtimes.yaml")
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(shipped) if d]
    assert names == [r.metadata.name for r in builtin_runtimes()]
