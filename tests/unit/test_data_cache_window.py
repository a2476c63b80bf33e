"""The reader's receive window (data_cache/credentials.py ``channel_options``): what
every client asks gRPC for, a block larger than it, and a bad setting named. The
memory it bounds is measured by bench/data_cache.py (docs/data-cache.md)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest

from data_cache import open_dataset
from tests.unit.test_data_cache import TOKEN, _command, _env, _ids, _serve, _table


def test_blocks_larger_than_the_receive_window_arrive_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader lets a server send one default block ahead (RECEIVE_WINDOW); a block
    of more than twice that still streams, to every rank exactly once."""
    from data_cache.credentials import RECEIVE_WINDOW, WINDOW_ENV

    monkeypatch.delenv(WINDOW_ENV, raising=False)
    d = tmp_path / "big"
    d.mkdir()
    rows = 3 * RECEIVE_WINDOW // 16 + 5  # 16 bytes a row: three windows and a bit
    pq.write_table(_table(rows), d / "part-0.parquet")
    block_rows = rows // 2 + 1  # two blocks of ~1.5 windows each
    servers = _serve(str(d), 1, block_rows)
    try:
        addresses = [f"grpc://127.0.0.1:{servers[0].port}"]
        with open_dataset(addresses, rank=0, world_size=1, token=TOKEN) as shard:
            sizes = [b.nbytes for b in shard.batches(0)]
        assert len(sizes) == 2 and min(sizes) > RECEIVE_WINDOW, sizes
        assert sorted(i for ids in _ids(addresses, 2) for i in ids) == list(range(rows))
    finally:
        servers[0].shutdown()


def test_every_client_asks_for_the_fixed_receive_window(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """Plain and mutual-TLS clients alike (what readers and the rendezvous use); the
    job's owner may change the window or give gRPC's back, and a bad value is named."""
    from data_cache import credentials

    made: list[dict[str, object]] = []
    monkeypatch.setattr(flight, "FlightClient", lambda address, **kw: made.append(kw))
    monkeypatch.delenv(credentials.WINDOW_ENV, raising=False)
    credentials.client("grpc://127.0.0.1:1", credentials.Credentials(TOKEN))
    credentials.client("grpc+tls://127.0.0.1:1", credentials.generate())
    assert [kw["generic_options"] for kw in made] == [
        [("grpc.http2.bdp_probe", 0),
         ("grpc.http2.lookahead_bytes", credentials.RECEIVE_WINDOW)]] * 2
    env = {credentials.WINDOW_ENV: "8388608"}
    assert credentials.channel_options(env)[1] == ("grpc.http2.lookahead_bytes", 8388608)
    assert credentials.channel_options({credentials.WINDOW_ENV: "0"}) == []
    assert credentials.channel_options({credentials.WINDOW_ENV: str(2**31 - 1)})
    for bad in ("4096", "2MiB", "-1", str(2**31)):
        with pytest.raises(ValueError, match=f"{credentials.WINDOW_ENV}='{bad}'"):
            credentials.channel_options({credentials.WINDOW_ENV: bad})


@pytest.mark.parametrize("command", ["wait", "run"])
def test_a_bad_receive_window_is_named_before_anything_starts(tmp_path: Path,
                                                               command: str) -> None:
    env = {**_env(), "HPC_BRIDGE_DATA_CACHE_WINDOW": "2MiB"}
    args = (["--dir", str(tmp_path), "--count", "1"] if command == "wait"
            else ["--source", "/d", "--", "true"])
    res = subprocess.run(_command(command, *args), env=env, capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert "HPC_BRIDGE_DATA_CACHE_WINDOW='2MiB': give a number of bytes" in res.stderr
