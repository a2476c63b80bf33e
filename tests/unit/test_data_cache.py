"""The data cache end to end on this machine: real Arrow Flight servers (in threads, or
the ``data-cache`` command in processes) and the reader training code uses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.feather as feather
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest

from data_cache import DataCacheError, open_dataset
from data_cache.layout import block_count, server_blocks
from data_cache.reader import rank_and_world
from data_cache.server import CacheServer, auth_header
from data_cache.source import SourceError, open_source

TOKEN = "unit-test-token"


def _table(rows: int, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + rows, dtype=np.int64)
    return pa.table({"id": ids, "x": ids.astype(np.float64) / 2})


@pytest.fixture
def parquet_dir(tmp_path: Path) -> Path:
    d = tmp_path / "ds"
    d.mkdir()
    offset = 0
    for i, rows in enumerate((1000, 7, 2345)):
        pq.write_table(_table(rows, offset), d / f"part-{i}.parquet", row_group_size=300)
        offset += rows
    return d


def _serve(uri: str, servers: int, block_rows: int, fmt: str | None = None) -> list[CacheServer]:
    source = open_source(uri, fmt)
    nb = block_count(source.total_rows, block_rows)
    out = []
    for k in range(servers):
        batches = source.load(server_blocks(k, servers, nb), block_rows)
        server = CacheServer("grpc://127.0.0.1:0", token=TOKEN, schema=source.schema,
                             batches=batches, total_rows=source.total_rows,
                             block_rows=block_rows, index=k, servers=servers)
        threading.Thread(target=server.serve, daemon=True).start()
        out.append(server)
    return out


@pytest.fixture
def cache(parquet_dir: Path) -> Iterator[list[str]]:
    servers = _serve(str(parquet_dir), 2, 128)
    yield [f"grpc://127.0.0.1:{s.port}" for s in servers]
    for s in servers:
        s.shutdown()


def _ids(addresses: list[str], world: int, seed: int | None = None,
         epoch: int = 0) -> list[list[int]]:
    out = []
    for rank in range(world):
        with open_dataset(addresses, rank=rank, world_size=world, seed=seed, token=TOKEN) as shard:
            out.append([i for b in shard.numpy(epoch) for i in b["id"].tolist()])
            assert len(out[-1]) == shard.num_rows(epoch)
    return out


def test_ranks_read_the_dataset_exactly_once_in_order(cache: list[str]) -> None:
    shares = _ids(cache, 3)
    assert [i for share in shares for i in share] == list(range(3352))


def test_a_seed_shuffles_per_epoch_and_a_restarted_rank_reads_the_same(cache: list[str]) -> None:
    e0, e1 = _ids(cache, 4, seed=5, epoch=0), _ids(cache, 4, seed=5, epoch=1)
    for shares in (e0, e1):
        assert sorted(i for share in shares for i in share) == list(range(3352))
    assert e0 != e1
    assert _ids(cache, 4, seed=5, epoch=0) == e0


@pytest.mark.parametrize("fmt", ["ipc", "csv"])
def test_arrow_ipc_and_csv_sources(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"data.{'arrow' if fmt == 'ipc' else 'csv'}"
    if fmt == "ipc":
        feather.write_feather(_table(999), path)
    else:
        pacsv.write_csv(_table(999), path)
    servers = _serve(f"file://{path}", 2, 100)
    try:
        shares = _ids([f"grpc://127.0.0.1:{s.port}" for s in servers], 2)
    finally:
        for s in servers:
            s.shutdown()
    assert [i for share in shares for i in share] == list(range(999))


def test_batches_are_the_received_buffers_and_numpy_shares_them(cache: list[str]) -> None:
    with open_dataset(cache, rank=0, world_size=1, token=TOKEN) as shard:
        for batch in shard.batches():
            buffers = [b for col in batch.columns for b in col.buffers() if b is not None]
            # Every column is a view of the one message body Flight received (its
            # parent), not a copy of it...
            parents = {(b.parent.address, b.parent.size) for b in buffers if b.parent}
            assert len(parents) == 1 and all(b.parent is not None for b in buffers)
            (body, size), = parents
            assert all(body <= b.address and b.address + b.size <= body + size
                       for b in buffers)
            assert size <= batch.nbytes + 64 * len(buffers)
            # ...and numpy reads those very bytes.
            ids = batch.column(0).to_numpy(zero_copy_only=True)
            assert ids.ctypes.data == batch.column(0).buffers()[1].address


def test_torch_tensors_share_the_buffers(cache: list[str]) -> None:
    import torch  # the runtimes extra installs it: a missing torch fails, never skips
    with open_dataset(cache, rank=1, world_size=2, token=TOKEN) as shard:
        tensors = next(shard.torch())
        batch = next(shard.batches())
    assert tensors["id"].dtype == torch.int64
    assert tensors["id"].tolist() == batch.column(0).to_pylist()


def test_a_wrong_or_missing_token_reads_nothing(cache: list[str]) -> None:
    with pytest.raises(DataCacheError, match=r"cache server 0 .*token"):
        open_dataset(cache, rank=0, world_size=1, token="guess")
    client = flight.FlightClient(cache[0])
    with pytest.raises(flight.FlightUnauthenticatedError):
        list(client.do_get(flight.Ticket(json.dumps({"blocks": [0]}).encode())))


def test_bad_tickets_are_named(cache: list[str]) -> None:
    client = flight.FlightClient(cache[0])
    options = flight.FlightCallOptions(headers=[auth_header(TOKEN)])
    with pytest.raises(flight.FlightError, match="block 20 is not on cache server 0"):
        client.do_get(flight.Ticket(b'{"blocks": [20]}'), options).read_all()
    with pytest.raises(flight.FlightError, match="not JSON"):
        client.do_get(flight.Ticket(b"\xff"), options).read_all()


def test_trainers_shard_protocol(cache: list[str]) -> None:
    """A Trainer DataCacheDataset asks any server for shard [index, total] and reads the
    endpoints it is given: it works once the wait step told the servers their peers."""
    options = flight.FlightCallOptions(headers=[auth_header(TOKEN)])
    head = flight.FlightClient(cache[1])
    with pytest.raises(flight.FlightUnavailableError, match="peers"):
        head.get_flight_info(flight.FlightDescriptor.for_path("0", "3"), options)
    for address in cache:
        list(flight.FlightClient(address).do_action(
            flight.Action("peers", json.dumps(cache).encode()), options))
    ids: list[int] = []
    for index in range(3):
        info = head.get_flight_info(flight.FlightDescriptor.for_path(str(index), "3"), options)
        for endpoint in info.endpoints:
            client = flight.FlightClient(endpoint.locations[0])
            ids += client.do_get(endpoint.ticket, options).read_all().column("id").to_pylist()
    assert ids == list(range(3352))


def test_missing_unsupported_and_empty_sources_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=f"dataset {tmp_path}/nope: No such file"):
        open_source(str(tmp_path / "nope"))
    with pytest.raises(SourceError, match="unsupported scheme 's3'"):
        open_source("s3://bucket/x")
    with pytest.raises(SourceError, match="must be absolute"):
        open_source("relative/x.parquet")
    with pytest.raises(SourceError, match="no Parquet, Arrow IPC or CSV file"):
        open_source(str(tmp_path))
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(SourceError, match=r"bad\.parquet"):
        open_source(str(tmp_path / "bad.parquet"))


def test_a_partition_over_the_memory_limit_is_refused(parquet_dir: Path) -> None:
    source = open_source(str(parquet_dir))
    with pytest.raises(SourceError, match="memory limit of 10000 bytes"):
        source.load(range(0, 27), 128, memory_limit=10_000)
    assert len(source.load(range(0, 27), 128, memory_limit=1 << 20)) == 27


def test_rank_and_world_from_the_launchers() -> None:
    assert rank_and_world({"RANK": "3", "WORLD_SIZE": "8"}) == (3, 8)
    assert rank_and_world({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}) == (1, 2)
    assert rank_and_world({"FLUX_TASK_RANK": "2", "FLUX_JOB_SIZE": "4"}) == (2, 4)
    assert rank_and_world({}) == (0, 1)
    with pytest.raises(DataCacheError, match="outside"):
        rank_and_world({"RANK": "4", "WORLD_SIZE": "4"})


# --- the data-cache command, in processes ------------------------------------------------

def _command(*args: str, env: dict[str, str] | None = None) -> list[str]:
    return [sys.executable, "-m", "data_cache", *args]


def _env() -> dict[str, str]:
    return {**os.environ, "HPC_BRIDGE_DATA_CACHE_TOKEN": TOKEN,
            "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def test_wait_reports_a_servers_reason_and_a_dead_step(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.mkdir(mode=0o700)
    serve = subprocess.run(
        _command("serve", "--source", str(tmp_path / "missing.parquet"), "--dir", str(status),
                 "--index", "0", "--count", "1"), env=_env(), capture_output=True, text=True,
        timeout=60)
    assert serve.returncode == 1
    assert f"dataset {tmp_path}/missing.parquet: No such file" in serve.stderr
    wait = subprocess.run(_command("wait", "--remove", "--dir", str(status), "--count", "1"),
                          env=_env(), capture_output=True, text=True, timeout=60)
    assert wait.returncode == 1
    assert "data-cache: error: cache server 0: dataset" in wait.stderr
    assert "missing.parquet: No such file" in wait.stderr
    assert not status.exists()  # --remove, whatever the outcome
    dead = subprocess.Popen(["true"])
    dead.wait()
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o700)
    wait = subprocess.run(_command("wait", "--dir", str(empty), "--count", "2", "--pid",
                                   str(dead.pid)), env=_env(), capture_output=True, text=True,
                          timeout=60)
    assert wait.returncode == 1 and "ended before every server was serving" in wait.stderr


def test_a_server_dying_mid_epoch_is_a_clear_error(parquet_dir: Path, tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.mkdir(mode=0o700)
    procs = [subprocess.Popen(_command("serve", "--source", str(parquet_dir), "--dir",
                                       str(status), "--index", str(k), "--count", "2",
                                       "--block-rows", "64", "--advertise", "127.0.0.1"),
                              env=_env())
             for k in range(2)]
    try:
        wait = subprocess.run(_command("wait", "--dir", str(status), "--count", "2",
                                       "--timeout", "60"),
                              env=_env(), capture_output=True, text=True, timeout=90)
        assert wait.returncode == 0, wait.stderr
        addresses = wait.stdout.strip().split(",")
        with open_dataset(addresses, rank=0, world_size=1, token=TOKEN) as shard:
            batches = shard.batches()
            next(batches)  # streaming from server 0
            procs[1].send_signal(signal.SIGKILL)
            procs[1].wait()
            with pytest.raises(DataCacheError, match=f"cache server 1 \\({addresses[1]}\\)"):
                for _ in batches:
                    pass
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_directory_someone_else_planted_is_refused(tmp_path: Path) -> None:
    from data_cache.privatedir import CacheStartError, PrivateDir

    mine = tmp_path / "mine"
    _, made = PrivateDir.open(mine, create=True)
    _, made_again = PrivateDir.open(mine, create=True)
    assert made and not made_again and (mine.stat().st_mode & 0o777) == 0o700
    (tmp_path / "open").mkdir(mode=0o755)
    (tmp_path / "theirs").mkdir(mode=0o700)
    os.chown(tmp_path / "theirs", 65534, 65534)
    (tmp_path / "link").symlink_to(mine)
    for name in ("open", "theirs"):
        with pytest.raises(CacheStartError, match="not a private directory"):
            PrivateDir.open(tmp_path / name)
    with pytest.raises(CacheStartError, match="Not a directory"):  # O_NOFOLLOW
        PrivateDir.open(tmp_path / "link")


def test_the_directory_is_reached_through_its_descriptor_only(tmp_path: Path) -> None:
    """Renamed away and replaced by a link to someone's files (a shared working
    directory without the sticky bit): writing and removing still act on the real
    directory; the files behind the link are untouched."""
    from data_cache.privatedir import PrivateDir

    victim = tmp_path / "home"
    victim.mkdir()
    (victim / "thesis.tex").write_text("years of work")
    cache, _ = PrivateDir.open(tmp_path / ".cache-1", create=True)
    cache.write("server-0.json", b"{}")
    (tmp_path / ".cache-1").rename(tmp_path / ".moved")
    (tmp_path / ".cache-1").symlink_to(victim)
    cache.write("left-0", b"")
    assert not (victim / "left-0").exists() and (tmp_path / ".moved" / "left-0").exists()
    cache.remove()
    assert (victim / "thesis.tex").read_text() == "years of work"
    assert (tmp_path / ".cache-1").is_symlink()
    assert list((tmp_path / ".moved").iterdir()) == []  # emptied, not rmdir'd by name


def test_a_malformed_or_oversized_status_is_an_error_not_a_crash(tmp_path: Path) -> None:
    from data_cache.privatedir import CacheStartError, PrivateDir
    from data_cache.rendezvous import wait_for_servers, write_status

    path = tmp_path / "status"
    directory, _ = PrivateDir.open(path, create=True)
    write_status(directory, 0, {"address": "grpc://h:1"})
    assert wait_for_servers(directory, 1) == ["grpc://h:1"]
    for body in (b"[1]", b'{"address": 3}', b"{}", b"x" * 70000):
        (path / "server-0.json").write_bytes(body)
        with pytest.raises(CacheStartError, match="malformed status"):
            wait_for_servers(directory, 1)
    (path / "server-0.json").unlink()
    (path / "server-0.json").symlink_to("/etc/shadow")
    with pytest.raises(CacheStartError, match="unreadable"):
        wait_for_servers(directory, 1)
    (path / "server-0.json").unlink()
    with pytest.raises(CacheStartError, match=r"not serving after 0\.05 s"):
        wait_for_servers(directory, 1, timeout=0.05)
    # Planted: a file of another user, or one others may write.
    write_status(directory, 0, {"address": "grpc://attacker:1"})
    os.chown(path / "server-0.json", 65534, 65534)
    with pytest.raises(CacheStartError, match="not written by this user"):
        wait_for_servers(directory, 1)
    os.chown(path / "server-0.json", 0, 0)
    (path / "server-0.json").chmod(0o622)
    with pytest.raises(CacheStartError, match="not written by this user"):
        wait_for_servers(directory, 1)


def test_run_outside_flux_says_what_it_needs(tmp_path: Path) -> None:
    env = {k: v for k, v in _env().items() if not k.startswith("FLUX_")}
    res = subprocess.run(_command("run", "--source", "/d", "--", "true"), env=env,
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert res.returncode == 1 and "needs a Flux task's FLUX_TASK_RANK" in res.stderr


def test_run_serves_waits_runs_and_cleans_up_on_one_node(parquet_dir: Path,
                                                         tmp_path: Path) -> None:
    """One task on one node (what Flux runs for a 1-node job): the launch sees the
    cache, its status is the task's, and nothing is left behind."""
    env = {**_env(), "FLUX_TASK_RANK": "0", "FLUX_TASK_LOCAL_ID": "0",
           "FLUX_JOB_NNODES": "1", "FLUX_JOB_ID": "f2xyz"}
    env.pop("HPC_BRIDGE_DATA_CACHE_TOKEN")
    probe = ("import sys; from data_cache import open_dataset\n"
             "s = open_dataset(rank=0, world_size=1)\n"
             "print(sum(b.num_rows for b in s.batches())); sys.exit(7)")
    res = subprocess.run(_command("run", "--source", str(parquet_dir), "--block-rows", "500",
                                  "--", sys.executable, "-c", probe),
                         env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 7, res.stderr
    assert res.stdout.strip() == "3352"
    assert not list(tmp_path.glob(".hpc-bridge-cache-*"))


def test_nested_directories_skip_hidden_parts_and_refuse_differing_schemas(
        tmp_path: Path) -> None:
    d = tmp_path / "ds"
    for sub in ("a", "b/c", "_temporary/0", ".snapshot"):
        (d / sub).mkdir(parents=True)
    pq.write_table(_table(3, 0), d / "a" / "p.parquet")
    pq.write_table(_table(4, 3), d / "b" / "c" / "p.parquet")
    pq.write_table(_table(9, 100), d / "_temporary" / "0" / "p.parquet")
    pq.write_table(_table(9, 200), d / ".snapshot" / "p.parquet")
    source = open_source(str(d))
    ids = [i for b in source.load(range(0, 1), 100) for i in b.column("id").to_pylist()]
    assert ids == list(range(7))
    pq.write_table(pa.table({"id": [1], "other": ["x"]}), d / "b" / "z.parquet")
    with pytest.raises(SourceError, match=r"z\.parquet: its schema differs"):
        open_source(str(d))


def test_a_csv_holding_only_its_header_does_not_decide_the_types(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("id,x\n")
    pacsv.write_csv(_table(5), tmp_path / "b.csv")
    source = open_source(str(tmp_path))
    assert source.fragment_rows == [0, 5]
    assert source.schema.field("id").type == pa.int64()
    (batch,) = source.load(range(0, 1), 10)
    assert batch.column("id").to_pylist() == [0, 1, 2, 3, 4]


def test_a_block_too_big_for_one_flight_message_names_block_rows(
        parquet_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import data_cache.source as source_module

    monkeypatch.setattr(source_module, "MAX_BLOCK_BYTES", 1000)
    with pytest.raises(SourceError, match="make BLOCK_ROWS smaller"):
        open_source(str(parquet_dir)).load(range(0, 1), 128)


def test_an_iceberg_table_from_its_metadata_file_or_a_sqlite_catalog(tmp_path: Path) -> None:
    """Real pyiceberg, a real SQL catalog on SQLite, Parquet files it writes."""
    from pyiceberg.catalog.sql import SqlCatalog

    from data_cache.iceberg import open_iceberg

    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/catalog.db",
                         warehouse=f"file://{tmp_path}/warehouse")
    catalog.create_namespace("ds")
    table = catalog.create_table("ds.tokens", schema=_table(1).schema)
    for start in (0, 500, 1000):
        table.append(_table(500, start))
    for source in (open_iceberg("cache://ds/tokens", metadata_location=table.metadata_location),
                   open_iceberg("cache://ds/tokens",
                                catalog_uri=f"sqlite:///{tmp_path}/catalog.db")):
        assert source.total_rows == 1500 and source.fragment_rows == [500, 500, 500]
        ids = sorted(i for b in source.load(range(0, 12), 128)
                     for i in b.column("id").to_pylist())
        assert ids == list(range(1500))
    with pytest.raises(SourceError, match=r"Iceberg table ds\.nope: NoSuchTableError"):
        open_iceberg("cache://ds/nope", catalog_uri=f"sqlite:///{tmp_path}/catalog.db")
    with pytest.raises(SourceError, match="only local files"):
        open_iceberg("cache://ds/tokens", metadata_location="s3://bucket/m.json")
    with pytest.raises(SourceError, match="METADATA_LOC"):
        open_iceberg("cache://ds/tokens")
    # The current snapshot is what is served (pyiceberg deletes by rewriting files).
    table.delete("id < 10")
    source = open_iceberg("cache://ds/tokens", catalog_uri=f"sqlite:///{tmp_path}/catalog.db")
    ids = sorted(i for b in source.load(range(0, 12), 128) for i in b.column("id").to_pylist())
    assert ids == list(range(10, 1500))


def test_mutual_tls_ends_a_stranger_at_the_handshake(parquet_dir: Path, tmp_path: Path) -> None:
    """With the job's certificate (data-cache credentials), a client without it cannot
    send a request at all — not even a huge one the server would have to read first."""
    from data_cache import credentials
    from data_cache.privatedir import PrivateDir

    private, _ = PrivateDir.open(tmp_path / "private", create=True)
    creds = credentials.make(private)
    assert credentials.read(private) == creds
    assert {p.name: p.stat().st_mode & 0o777 for p in private.path.iterdir()} == {
        "token": 0o600, "cert.pem": 0o600, "key.pem": 0o600}
    # What a Slurm batch script evals: the same three, quoted for the shell.
    exported = subprocess.run(
        ["bash", "-c", 'eval "$1"; printf %s "$HPC_BRIDGE_DATA_CACHE_KEY"', "-",
         credentials.shell_exports(creds)], capture_output=True, check=True).stdout
    assert exported == creds.key
    source = open_source(str(parquet_dir))
    server = CacheServer("grpc+tls://127.0.0.1:0", token=creds.token, schema=source.schema,
                         batches=source.load(range(0, 27), 128), total_rows=3352,
                         block_rows=128, index=0, servers=1, tls=creds.tls)
    threading.Thread(target=server.serve, daemon=True).start()
    address = credentials.location("127.0.0.1", server.port, True)
    try:
        with open_dataset([address], rank=0, world_size=1, credentials=creds) as shard:
            assert sum(b.num_rows for b in shard.batches()) == 3352
        options = flight.FlightCallOptions(headers=[auth_header(creds.token)], timeout=10)
        stranger = flight.FlightClient(address, tls_root_certs=creds.cert,
                                       override_hostname=credentials.SERVER_NAME)
        with pytest.raises(flight.FlightUnavailableError):
            list(stranger.do_action(flight.Action("layout", b"x" * (8 << 20)), options))
        other = credentials.generate()  # another job's certificate
        with pytest.raises(flight.FlightUnavailableError):
            list(credentials.client(address, other).do_action(flight.Action("layout", b""),
                                                              options))
        plain = flight.FlightClient(f"grpc://127.0.0.1:{server.port}")
        with pytest.raises(flight.FlightError):
            list(plain.do_action(flight.Action("layout", b""), options))
    finally:
        server.shutdown()


def _flux_task(node: int, cwd: Path, source: Path, launch: list[str],
               extra: dict[str, str] | None = None) -> subprocess.Popen[str]:
    env = {k: v for k, v in _env().items() if k != "HPC_BRIDGE_DATA_CACHE_TOKEN"}
    env.update({"FLUX_TASK_RANK": str(node), "FLUX_TASK_LOCAL_ID": "0",
                "FLUX_JOB_NNODES": "2", "FLUX_JOB_ID": "f3abc", **(extra or {})})
    return subprocess.Popen(_command("run", "--source", str(source), "--block-rows", "500",
                                     "--", *launch),
                            env=env, cwd=cwd, stderr=subprocess.PIPE, text=True)


def test_flux_a_failed_node_ends_at_once_and_sigterm_reaches_the_command(
        parquet_dir: Path, tmp_path: Path) -> None:
    """Node 0's command fails while node 1's still runs: node 0 does not wait for node 1
    (it would hold a failed job until its time limit), and SIGTERM to node 1's task ends
    its command, so the task ends with 128+15."""
    work = tmp_path / "work"
    work.mkdir()
    slow = _flux_task(1, work, parquet_dir, ["sleep", "120"])
    failing = _flux_task(0, work, parquet_dir, ["sh", "-c", "exit 3"])
    try:
        assert failing.wait(timeout=90) == 3, failing.stderr
        slow.terminate()
        assert slow.wait(timeout=60) == 143
    finally:
        for p in (slow, failing):
            p.kill()
            p.wait()
    assert not list(work.glob(".hpc-bridge-cache-*"))


def test_flux_a_server_that_dies_silently_fails_every_task(parquet_dir: Path,
                                                           tmp_path: Path) -> None:
    """Node 1's server dies before serving without a word (as the OOM killer would end
    it): its task says so in the server's status, so node 0 stops waiting too."""
    work, hook = tmp_path / "work", tmp_path / "hook"
    work.mkdir()
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, sys\n"
        "if os.environ.get('KILL_SERVE') and 'serve' in sys.argv:\n    os._exit(9)\n")
    repo = str(Path(__file__).resolve().parents[2])
    tasks = [_flux_task(0, work, parquet_dir, ["true"]),
             _flux_task(1, work, parquet_dir, ["true"],
                        {"KILL_SERVE": "1", "PYTHONPATH": f"{hook}:{repo}"})]
    try:
        for task in tasks:
            assert task.wait(timeout=90) == 1
        errors = [t.stderr.read() if t.stderr else "" for t in tasks]
        assert "cache server 1: its process ended with status 9 before serving" in errors[0]
    finally:
        for task in tasks:
            task.kill()
            task.wait()
