"""tbatch (issue 12): every refused option in one error, and scripts that are not UTF-8."""

from __future__ import annotations

import json

import pytest

from bridge.model import ANN_BATCH_SCRIPT, load_trainjob
from bridge.sbatch import SbatchError, parse_command_line, parse_tbatch, to_trainjob

SH = "#!/bin/sh\n"


def error_of(argv: list[str], script: str | None = SH) -> str:
    with pytest.raises(SbatchError) as info:
        parse_tbatch(argv, script)
    return str(info.value)


# ------------------------------------------------------------ every refusal at once


def test_every_refused_option_in_one_error() -> None:
    """Every sbatch option tbatch refuses, on the command line and on every #SBATCH line,
    is reported in one error, each with where it was found (issue 12)."""
    script = (
        SH
        + "#SBATCH --core-spec=1 -N 2\n"
        + "#SBATCH -I --wait -N1\n"
        + "#SBATCH --reboot -S 3\n"
    )
    text = error_of(["--contiguous", "-S", "1", "--uid=5", "job.sh"], script)
    assert text.split("\n") == [
        "tbatch: error: command line: option '--contiguous' is not supported by tbatch",
        "tbatch: error: command line: option '-S' (--core-spec) is not supported by tbatch",
        "tbatch: error: command line: option '--uid' is not supported by tbatch",
        "tbatch: error: job.sh:2: option '--core-spec' is not supported by tbatch",
        "tbatch: error: job.sh:3: option '-I' (--immediate) is not supported by tbatch",
        "tbatch: error: job.sh:3: option '--wait' is not supported by tbatch",
        "tbatch: error: job.sh:4: option '--reboot' is not supported by tbatch",
        "tbatch: error: job.sh:4: option '-S' (--core-spec) is not supported by tbatch",
    ]


def test_refusals_come_with_the_first_other_error() -> None:
    script = SH + "#SBATCH --core-spec=1\n#SBATCH --foo\n#SBATCH --bar\n"
    assert error_of(["job.sh"], script).split("\n") == [
        "tbatch: error: job.sh:2: option '--core-spec' is not supported by tbatch",
        "tbatch: error: job.sh:3: unrecognized option '--foo'",
    ]


def test_one_refusal_reads_as_before() -> None:
    assert error_of(["--core-spec=1", "job.sh"]) == (
        "tbatch: error: option '--core-spec' is not supported by tbatch"
    )
    cmd = parse_command_line(["--contiguous", "-f", "x.yaml"])
    assert [e.message for e in cmd.refusals] == [
        "option '--contiguous' is not supported by tbatch"]
    assert "--contiguous" in error_of(["--contiguous", "-f", "x.yaml"], None)


def test_a_latin1_script_is_carried_as_its_bytes() -> None:
    """Issue 12: a script with a Latin-1 comment runs unchanged (base64 in the annotation,
    the bytes back from it); only #SBATCH lines must be text."""
    from bridge.batchscript import ANN_BATCH_SCRIPT_ENCODING, script_bytes, script_of

    raw = b"#!/bin/sh\n#SBATCH -J latin\n# caf\xe9 \xff\necho caf\xe9\n"
    request = parse_tbatch(["job.sh"], raw.decode("utf-8", "surrogateescape"))
    assert request.options.job_name == "latin"
    job = to_trainjob(request, cwd="/home/alice", environ={})
    assert job.metadata.annotations[ANN_BATCH_SCRIPT_ENCODING] == "base64"
    again = load_trainjob(json.loads(json.dumps(job.to_dict())))  # as the API gets it
    assert script_bytes(script_of(again) or "") == raw
    plain = to_trainjob(parse_tbatch(["job.sh"], SH + "echo café\n"), cwd="/", environ={})
    assert plain.metadata.annotations[ANN_BATCH_SCRIPT] == SH + "echo café\n"
    assert ANN_BATCH_SCRIPT_ENCODING not in plain.metadata.annotations
