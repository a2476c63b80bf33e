"""``tbatch --test-only``: the daemon checks the job as it would admit it and asks the
back end when and where it would start; nothing is stored or submitted."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.backend import BackendRejected, SubmitRequest
from bridge.sbatch import parse_tbatch
from tests.unit.conftest import ApiClient
from tests.unit.fakes import FakeBackend
from tests.unit.test_tbatch import as_alice as as_alice
from tests.unit.test_tbatch import tbatch


def test_the_option_from_either_place() -> None:
    assert parse_tbatch(["--test-only", "j.sh"], "#!/bin/sh\n").options.test_only
    assert parse_tbatch(["j.sh"], "#!/bin/sh\n#SBATCH --test-only\n").options.test_only
    assert parse_tbatch(["--test-only", "-f", "x.yaml"]).options.test_only


async def sbatch(api: ApiClient, *argv: str) -> tuple[int, object]:
    answer = await api.call("POST", "/v1/sbatch",
                            doc={"argv": [*argv, "--wrap", "true"], "cwd": "/tmp",
                                 "environ": {}})
    return answer.status, answer.body


async def test_nothing_is_stored(api_client: ApiClient) -> None:
    status, body = await sbatch(api_client, "--test-only", "-N", "2")
    assert status == 200 and body == {
        "testOnly": True, "backend": "slurm",
        "estimate": "Job would be accepted by back end 'slurm' (2 nodes); it cannot "
                    "estimate a start time"}
    assert api_client.store.list_jobs() == []


@pytest.mark.parametrize(("argv", "words"), [
    (["--backend", "nope"], "unknown back end 'nope'"),
    (["-d", "afterok:77"], "job 77 does not exist"),
    (["--mem=abc"], "invalid --mem value"),
])
async def test_refused_as_a_submission_would_be(api_client: ApiClient, argv: list[str],
                                                words: str) -> None:
    status, body = await sbatch(api_client, "--test-only", *argv)
    assert status == 400 and words in str(body), body
    assert api_client.store.list_jobs() == []


class EstimatingBackend(FakeBackend):
    """A back end that estimates, as Slurm's does with sbatch --test-only."""

    def __init__(self, fake: FakeBackend) -> None:
        super().__init__(fake.inv)
        self.asked: list[SubmitRequest] = []

    async def estimate(self, request: SubmitRequest) -> str:
        self.asked.append(request)
        if request.options.partition == "nope":
            raise BackendRejected("sbatch: invalid partition specified: nope")
        return "Job to start at 2026-12-01T17:00:00 using 1 processors on nodes n1"


async def test_the_back_ends_estimate_and_refusal(api_client: ApiClient) -> None:
    backend = EstimatingBackend(api_client.backend)
    api_client.engine.backends["slurm"] = backend
    status, body = await sbatch(api_client, "--test-only", "-J", "probe")
    assert status == 200 and body["estimate"].startswith("Job to start at"), body  # type: ignore[index]
    assert [r.options.job_name for r in backend.asked] == ["probe"]
    assert backend.submitted == []
    status, body = await sbatch(api_client, "--test-only", "-p", "nope")
    assert status == 400 and "invalid partition specified: nope" in str(body)
    assert api_client.store.list_jobs() == []


async def test_tbatch_prints_the_estimate_on_stderr(as_alice: ApiClient, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]
                                                    ) -> None:
    (tmp_path / "j.sh").write_text("#!/bin/sh\n#SBATCH --test-only\ntrue\n")
    assert await tbatch("j.sh") == 0
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == ("tbatch: Job would be accepted by back end 'slurm' (1 node); it "
                       "cannot estimate a start time\n")
    assert as_alice.store.list_jobs() == []
