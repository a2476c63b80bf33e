"""topology/block and a partition's own topology (Slurm 25.05+), on the 26.05 bed.

The bed's partition ``blocks`` uses a block topology that pairs sid1+sid3 and
sid2+sid4 (base blocks b1..b4 = sid1, sid3, sid2, sid4), while the cluster default is
the switch tree sid[1-2] | sid[3-4]. With sid1 taken whole, Slurm puts a 2-node job of
``blocks`` on the free aggregate b[3-4] = sid2+sid4 and a 2-node job of ``debug`` under
leaf2 = sid3+sid4: the bridge must predict each from its partition's topology.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.bed import Daemon, cleanup, fresh_daemon_dir
from tests.integration.conftest_slurm import Cluster, cluster_for

pytestmark = pytest.mark.integration

FINISHED = ["Succeeded", "Failed", "Cancelled"]


@pytest.fixture
def on_2605(testbed: dict[str, str]) -> Iterator[tuple[Daemon, Cluster]]:
    cluster = cluster_for("26.05")
    assert cluster.facts.get("SLURM_BLOCK_PARTITION") == "blocks", cluster.facts
    workdir = fresh_daemon_dir("blocks")
    # Each placement reads the inventory again: the test's busy node is seen at once.
    d = Daemon(workdir, cluster.settings("rest"), engine_settings={"placement_max_age": 0})
    d.start()
    yield d, cluster
    d.stop()
    cleanup(workdir)


def tbatch(d: Daemon, outdir: Path, *args: str) -> int:
    res = d.cli("alice", "tbatch", "--parsable", *args, cwd=outdir)
    assert res.returncode == 0, res.stderr
    return int(res.stdout)


def test_each_partition_is_placed_in_its_own_topology(on_2605: tuple[Daemon, Cluster],
                                                      outdir: Path) -> None:
    d, _ = on_2605
    go = outdir / "go"
    busy = tbatch(d, outdir, "-w", "sid1", "-c", "2", "-t", "5", "--wrap",
                  f"while [ ! -e {go} ]; do sleep 0.2; done")
    ids = [busy]
    try:
        assert d.wait_state(busy, ["Running"])["nodes"] == ["sid1"]
        blocks = tbatch(d, outdir, "-p", "blocks", "-N", "2", "--wrap", "hostname")
        ids.append(blocks)
        done = d.wait_state(blocks, FINISHED)
        assert done["state"] == "Succeeded", done
        assert sorted(done["nodes"]) == ["sid2", "sid4"], done  # Slurm's own choice
        placed = done["placement"]
        assert sorted(placed["hosts"]) == ["sid2", "sid4"], placed  # the bridge's
        assert placed["levels"][0]["domains"] == ["b3", "b4"], placed
        assert placed["levels"][1]["domains"] == ["b[3-4]"], placed

        tree = tbatch(d, outdir, "-N", "2", "--wrap", "hostname")
        ids.append(tree)
        done = d.wait_state(tree, FINISHED)
        assert done["state"] == "Succeeded", done
        assert sorted(done["nodes"]) == ["sid3", "sid4"], done
        assert sorted(done["placement"]["hosts"]) == ["sid3", "sid4"], done["placement"]
        assert done["placement"]["levels"][0]["domains"] == ["leaf2"], done["placement"]
        go.touch()
        assert d.wait_state(busy, FINISHED)["state"] == "Succeeded"
    finally:  # a failed test leaves no job behind to hold the next test's nodes
        go.touch()
        d.cli("alice", "tcancel", *map(str, ids))
