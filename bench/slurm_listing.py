"""Slurm's job listing: what each changed listing costs the daemon, the plain way and the
bridge's way, in one run (slurm_adapter/listing.py).

Reads ``GET /jobs`` from the bed's slurmrestd as root (one real listing: every field
22.05 sends). When Slurm holds fewer than ``--jobs`` jobs, its records are repeated,
each copy with its own id and bridge key, to ``--jobs`` (at least one real record is
needed: the bench submits nothing). Then, medians of ``--repeat`` runs each:

* the baseline: ``json.loads`` of the whole answer, then
  :func:`slurm_adapter.records.convert_listing` of every job (what each changed listing
  cost before);
* :func:`slurm_adapter.listing.decode_listing`, then
  :meth:`~slurm_adapter.listing.ListingConverter.convert` of the same listing unchanged
  (a converter that has seen it once), and with a tenth of the jobs changed.

    .venv/bin/python bench/slurm_listing.py [--jobs 6000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# This file is in bench/, whose hostlist.py must not shadow the python-hostlist library.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from slurm_adapter import records  # noqa: E402
from slurm_adapter.dialects import dialect_for  # noqa: E402
from slurm_adapter.listing import ListingConverter, decode_listing  # noqa: E402
from slurm_adapter.rest import JwtSigner, SlurmRestClient  # noqa: E402
from tests.integration.bed import read_testbed_env  # noqa: E402


async def _listing(env: dict[str, str]) -> tuple[bytes, Any]:
    dialect = dialect_for(env.get("SLURM_REST_VERSION", "v0.0.38"))
    rest = SlurmRestClient(dialect, JwtSigner(env["SLURM_JWT_KEY"]),
                           socket_path=env["SLURMRESTD_SOCKET"])
    try:
        http = rest._http()
        token = await rest.tokens.token("root")
        answer = await http.get(f"http://localhost{dialect.prefix}/jobs",
                                headers={"X-SLURM-USER-NAME": "root",
                                         "X-SLURM-USER-TOKEN": token})
        answer.raise_for_status()
        return answer.content, dialect
    finally:
        await rest.close()


def _grown(content: bytes, jobs: int) -> bytes:
    """The listing with its records repeated (new ids and keys) to ``jobs`` records."""
    data = json.loads(content)
    real = data["jobs"]
    if not real:
        raise SystemExit("slurmctld holds no job: submit one (any) and run again")
    out = []
    for n in range(jobs):
        job = copy.deepcopy(real[n % len(real)])
        job["job_id"] = 1_000_000 + n
        job["comment"] = f"hpc-bridge:bench-{n}"
        out.append(job)
    data["jobs"] = out
    return json.dumps(data, indent=3).encode()  # slurmrestd indents by 3


def _median_ms(run: Callable[[], object], repeat: int,
               reset: Callable[[], object] = lambda: None) -> float:
    """The median time of ``run`` in ms, ``reset`` (untimed) before each."""
    times = []
    for _ in range(repeat):
        reset()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=6000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    env = read_testbed_env()
    if env is None:
        print("needs the test bed: bash testbed/slurm.sh up", file=sys.stderr)
        return 2
    content, dialect = asyncio.run(_listing(env))
    content = _grown(content, args.jobs)
    changed = json.loads(content)
    for job in changed["jobs"][::10]:
        job["state_reason"] = "Priority" if job.get("state_reason") != "Priority" else "None"
    changed_content = json.dumps(changed, indent=3).encode()

    def plain(body: bytes) -> Callable[[], object]:
        return lambda: records.convert_listing(json.loads(body)["jobs"], dialect)

    converter = ListingConverter()
    first = decode_listing(content)
    assert first is not None
    converter.convert(first["jobs"], dialect)

    def bridge(body: bytes) -> Callable[[], object]:
        def run() -> object:
            listing = decode_listing(body)
            assert listing is not None
            return converter.convert(listing["jobs"], dialect)
        return run

    def seen_first() -> None:  # the converter has seen the first listing last
        converter.convert(first["jobs"], dialect)

    # The same answers, both ways.
    assert converter.convert(decode_listing(changed_content)["jobs"], dialect) == \
        records.convert_listing(changed["jobs"], dialect)  # type: ignore[index]
    converter.convert(first["jobs"], dialect)
    base = _median_ms(plain(content), args.repeat)
    decode = _median_ms(lambda: decode_listing(content), args.repeat)
    rows = [("json.loads + convert every job (baseline)", base),
            ("decode_listing alone", decode),
            ("decode_listing + convert, unchanged",
             _median_ms(bridge(content), args.repeat, seen_first)),
            ("decode_listing + convert, 10 % changed",
             _median_ms(bridge(changed_content), args.repeat, seen_first))]
    print(f"Slurm job listing: {args.jobs:,} jobs, {len(content) / 1e6:.1f} MB "
          f"({dialect.prefix}); medians of {args.repeat}")
    for name, ms in rows:
        print(f"{name:<45} {ms:8.1f} ms  {ms / base:5.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
