"""tbatch's sbatch-compatible parser: options, precedence, #SBATCH lines and errors
(the TrainJob a script becomes: test_sbatch_trainjob.py)."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.sbatch import (
    MAX_SCRIPT_BYTES,
    BatchOptions,
    ExportSpec,
    SbatchError,
    help_text,
    parse_command_line,
    parse_tbatch,
    read_directives,
)
from tests.unit.sbatch_helpers import SH, error_of, opts

# ----------------------------------------------------------------- every option

OPTION_CASES: list[tuple[str, str | None, str, dict[str, Any]]] = [
    # (long, short, value, expected BatchOptions fields)
    ("nodes", "N", "2", {"nodes_min": 2, "nodes_max": 2}),
    ("nodes", "N", "2-4", {"nodes_min": 2, "nodes_max": 4}),
    ("nodes", "N", "2-", {"nodes_min": 2, "nodes_max": None}),
    ("nodes", "N", "0-4", {"nodes_min": 1, "nodes_max": 4}),  # Slurm turns 0 into 1
    ("nodes", "N", "1k", {"nodes_min": 1024, "nodes_max": 1024}),
    ("ntasks", "n", "8", {"ntasks": 8}),
    ("ntasks-per-node", None, "4", {"ntasks_per_node": 4}),
    ("tasks-per-node", None, "4", {"ntasks_per_node": 4}),
    ("cpus-per-task", "c", "16", {"cpus_per_task": 16}),
    ("gpus-per-node", None, "4", {"gpus_per_node": 4, "gpu_type": None}),
    ("gpus-per-node", None, "a100:8", {"gpus_per_node": 8, "gpu_type": "a100"}),
    ("gpus-per-node", None, "0", {"gpus_per_node": 0}),
    ("mem", None, "4000", {"mem_mb": 4000}),
    ("mem", None, "1K", {"mem_mb": 1}),  # kilobytes round up
    ("mem", None, "2048k", {"mem_mb": 2}),
    ("mem", None, "16M", {"mem_mb": 16}),
    ("mem", None, "32G", {"mem_mb": 32768}),
    ("mem", None, "32Gb", {"mem_mb": 32768}),
    ("mem", None, "500gb", {"mem_mb": 512000}),
    ("mem", None, "1T", {"mem_mb": 1048576}),
    ("time", "t", "90", {"time_limit_minutes": 90, "time_unlimited": False}),
    ("time", "t", "1-00:00:00", {"time_limit_minutes": 1440}),
    ("time", "t", "UNLIMITED", {"time_limit_minutes": None, "time_unlimited": True}),
    ("time", "t", "-1", {"time_limit_minutes": None, "time_unlimited": True}),
    ("job-name", "J", "train", {"job_name": "train"}),
    ("output", "o", "out-%j.txt", {"output": "out-%j.txt"}),
    ("error", "e", "/tmp/err-%x.txt", {"error": "/tmp/err-%x.txt"}),
    ("partition", "p", "gpu", {"partition": "gpu"}),
    ("account", "A", "proj1", {"account": "proj1"}),
    ("qos", "q", "high", {"qos": "high"}),
    ("chdir", "D", "/scratch/run", {"chdir": "/scratch/run"}),
    ("workdir", None, "/scratch/run", {"chdir": "/scratch/run"}),
    ("switches", None, "2", {"switches": 2, "switches_wait_minutes": None}),
    ("switches", None, "1@10:00", {"switches": 1, "switches_wait_minutes": 10}),
    ("switches", None, "1@0:30", {"switches": 1, "switches_wait_minutes": 1}),
    ("export", None, "NONE", {"export": ExportSpec(all=False)}),
    ("export", None, "ALL", {"export": ExportSpec(all=True)}),
    ("nodelist", "w", "n[01-04]", {"nodelist": "n[01-04]"}),
    ("exclude", "x", "n05", {"exclude": "n05"}),
    ("constraint", "C", "a100&ib", {"constraint": "a100&ib"}),
    ("runtime", None, "torch-distributed", {"runtime": "torch-distributed"}),
    ("backend", None, "flux", {"backend": "flux"}),
    # sbatch's -M/--clusters picks the back end (one cluster per job).
    ("clusters", "M", "slurm2411", {"backend": "slurm2411"}),
    ("cluster", None, "slurm2411", {"backend": "slurm2411"}),
]


def _forms(long: str, short: str | None, value: str) -> list[list[str]]:
    forms = [[f"--{long}={value}"], [f"--{long}", value]]
    if short:
        forms += [[f"-{short}{value}"], [f"-{short}", value]]
    return forms


@pytest.mark.parametrize(("long", "short", "value", "expected"), OPTION_CASES)
def test_every_option_in_every_form(
    long: str, short: str | None, value: str, expected: dict[str, Any]
) -> None:
    for argv in _forms(long, short, value):
        options = opts(argv)
        for key, want in expected.items():
            assert getattr(options, key) == want, (argv, key)
        # ... and the same on a #SBATCH line
        options = opts([], SH + "#SBATCH " + " ".join(argv) + "\n")
        for key, want in expected.items():
            assert getattr(options, key) == want, ("script", argv, key)


def test_flags() -> None:
    assert opts(["--exclusive"]).exclusive is True
    assert opts([]).exclusive is False
    assert parse_tbatch(["--parsable", "job.sh"], SH).parsable is True
    assert parse_tbatch(["job.sh"], SH + "#SBATCH --parsable\n").parsable is True
    assert parse_tbatch(["job.sh"], SH).parsable is False


def test_defaults_are_unset() -> None:
    assert opts([]) == BatchOptions()


def test_exclusive_does_not_swallow_the_script() -> None:
    request = parse_tbatch(["--exclusive", "job.sh", "x"], SH)
    assert request.script_path == "job.sh"
    assert request.script_args == ("x",)
    assert request.options.exclusive


def test_required_argument_is_the_next_word_whatever_it_looks_like() -> None:
    assert opts(["-J", "-x"]).job_name == "-x"
    assert opts(["--job-name", "--nodes=3"]) == BatchOptions(job_name="--nodes=3")
    assert opts(["-t", "-1"]).time_unlimited


def test_options_stop_at_the_script() -> None:
    request = parse_tbatch(["-N", "2", "job.sh", "-N", "5", "--foo", "--", "x"], SH)
    assert request.options.nodes_min == 2
    assert request.script_path == "job.sh"
    assert request.script_args == ("-N", "5", "--foo", "--", "x")


def test_double_dash_ends_options() -> None:
    request = parse_tbatch(["-N", "2", "--", "-weird-name.sh", "a"], SH)
    assert request.script_path == "-weird-name.sh"
    assert request.script_args == ("a",)


def test_last_occurrence_wins() -> None:
    assert opts(["-N", "2", "--nodes=3"]).nodes_min == 3
    assert opts(["-N", "2-4", "-N", "3"]).nodes_max == 3
    assert opts(["-p", "a", "-p", "b"]).partition == "b"


def test_short_help_cluster() -> None:
    assert parse_command_line(["-h"]).help
    assert parse_command_line(["--usage"]).help
    assert parse_command_line(["-V"]).version
    assert "--nodes=N[-M]" in help_text()


# ------------------------------------------------------------------- precedence


def test_command_line_wins_over_script() -> None:
    script = SH + "#SBATCH -N 4 -p batch -J fromscript -t 10\n#SBATCH --exclusive\n"
    options = opts(["-p", "gpu", "--time=20"], script)
    assert options.partition == "gpu"
    assert options.time_limit_minutes == 20
    assert options.nodes_min == 4  # not on the command line: the script's
    assert options.job_name == "fromscript"
    assert options.exclusive


def test_command_line_replaces_the_whole_option() -> None:
    # -N 3 on the command line replaces the script's range entirely
    options = opts(["-N", "3"], SH + "#SBATCH -N 2-8\n")
    assert (options.nodes_min, options.nodes_max) == (3, 3)
    options = opts(["--gpus-per-node=2"], SH + "#SBATCH --gpus-per-node=a100:8\n")
    assert (options.gpus_per_node, options.gpu_type) == (2, None)


def test_later_script_line_wins() -> None:
    assert opts([], SH + "#SBATCH -p a\n#SBATCH -p b\n").partition == "b"


# ------------------------------------------------------------- directive block


def test_directives_end_at_the_first_command() -> None:
    script = (
        "#!/bin/bash\n"
        "#SBATCH -N 2\n"
        "\n"
        "   \t\n"
        "# plain comment\n"
        "    # indented comment\n"
        "#SBATCH -p gpu\n"
        "module load cuda\n"
        "#SBATCH -J ignored\n"
        "#SBATCH --foo-ignored-too\n"
    )
    assert read_directives(script, "job.sh") == [(2, ["-N", "2"]), (7, ["-p", "gpu"])]
    options = opts([], script)
    assert options.job_name is None
    assert options.partition == "gpu"


def test_directive_must_start_the_line_exactly() -> None:
    script = SH + "  #SBATCH -N 9\n#sbatch -N 8\n# SBATCH -N 7\n#SBATCH -N 2\n"
    assert read_directives(script) == [(5, ["-N", "2"])]


def test_directive_prefix_glued_to_option() -> None:
    # sbatch reads what follows the 7 characters "#SBATCH"
    assert read_directives(SH + "#SBATCH--nodes=3\n") == [(2, ["--nodes=3"])]


def test_directive_word_splitting() -> None:
    script = (
        SH
        + "#SBATCH --job-name='a b' -o \"x y.txt\"  # trailing comment -N 9\n"
        + "#SBATCH -J a#b\n"
        + "#SBATCH -J 'a#b' -e a\\ b\n"
        + '#SBATCH -J "it\'s" -o \'say "hi"\'\n'
        + '#SBATCH -J "a\\"b"\n'
        + "#SBATCH\n"
        + "#SBATCH -J ''\n"
    )
    assert read_directives(script) == [
        (2, ["--job-name=a b", "-o", "x y.txt"]),
        (3, ["-J", "a"]),
        (4, ["-J", "a#b", "-e", "a", "b"]),  # sbatch: a backslash cannot escape a space
        (5, ["-J", "it's", "-o", 'say "hi"']),
        (6, ["-J", 'a"b']),
        (8, ["-J", ""]),
    ]


def test_unmatched_quote_names_the_line() -> None:
    message = error_of(["job.sh"], SH + "#SBATCH -N 1\n#SBATCH -J 'oops\n")
    assert message == "tbatch: error: job.sh:3: unmatched ' in #SBATCH line"


def test_script_errors_carry_file_and_line() -> None:
    script = SH + "#SBATCH -N 2\n\n#SBATCH --foo\n"
    assert error_of(["job.sh"], script) == "tbatch: error: job.sh:4: unrecognized option '--foo'"
    script = SH + "#SBATCH --nodes=x\n"
    assert error_of(["run/job.sh"], script) == (
        "tbatch: error: run/job.sh:2: invalid --nodes value 'x': expected N or MIN-MAX "
        "(node counts)"
    )
    assert error_of([], SH + "#SBATCH -N\n").startswith("tbatch: error: <stdin>:2: ")


def test_script_source_can_be_named() -> None:
    with pytest.raises(SbatchError) as info:
        parse_tbatch(["job.sh"], SH + "#SBATCH --foo\n", script_source="/abs/job.sh")
    assert (info.value.source, info.value.lineno) == ("/abs/job.sh", 2)
    assert info.value.message == "unrecognized option '--foo'"


def test_operands_on_a_directive_line_are_refused() -> None:
    assert error_of(["j.sh"], SH + "#SBATCH -N 2 oops\n") == (
        "tbatch: error: j.sh:2: invalid directive 'oops': #SBATCH lines hold only options"
    )
    assert "heterogeneous jobs" in error_of(["j.sh"], SH + "#SBATCH -N 1\n#SBATCH hetjob\n")


@pytest.mark.parametrize("option", ["--wrap=x", "-f", "--file=x.yaml", "--help", "-V"])
def test_command_line_only_options_in_a_script(option: str) -> None:
    assert "only allowed on the command line" in error_of(["j.sh"], SH + f"#SBATCH {option} y\n")


# -------------------------------------------------------------- script checks


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("", "tbatch: error: Batch script is empty!"),
        ("  \n\t\n", "tbatch: error: Batch script contains only whitespace!"),
        (
            "echo hi\n",
            "tbatch: error: This does not look like a batch script.  The first\n"
            "tbatch: error: line must start with #! followed by the path to an interpreter.\n"
            "tbatch: error: For instance: #!/bin/sh",
        ),
        (" #!/bin/sh\n", None),
        ("#!/bin/sh\necho \x00\n", "NULL character"),
        ("#!/bin/sh\r\necho\r\n", "DOS line breaks"),
        ("#!/bin/sh\n#SBATCH -J \udcff\n", "job.sh:2: #SBATCH line is not UTF-8 text"),
    ],
)
def test_script_checks(script: str, message: str | None) -> None:
    text = error_of(["job.sh"], script)
    assert text.startswith("tbatch: error: ")
    if message and message.startswith("tbatch:"):
        assert text == message
    elif message:
        assert message in text


def test_script_size_limit() -> None:
    big = SH + "#" * MAX_SCRIPT_BYTES
    assert "too large" in error_of(["job.sh"], big)


# ------------------------------------------------------------ option errors


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--foo"], "unrecognized option '--foo'"),
        (["--foo=1"], "unrecognized option '--foo=1'"),
        (["-z"], "invalid option -- 'z'"),
        (
            ["--part=gpu"],
            "unrecognized option '--part=gpu' (abbreviations are not accepted; "
            "did you mean '--partition'?)",
        ),
        (["--gpus=a:b"], "invalid --gpus value 'a:b': expected N or TYPE:N"),
        (["--mail-type=END,NOPE"], "invalid --mail-type value 'END,NOPE': --mail-type="),
        (["--open-mode=x"], "invalid --open-mode value 'x': Invalid --open-mode argument: x"),
        (["--signal=R:USR1@x"], "invalid --signal value 'R:USR1@x': Invalid --signal"),
        (["--hint=fast"], "invalid --hint value 'fast'"),
        (["--mem-per-cpu=1.5G"], "invalid --mem-per-cpu value '1.5G'"),
        (["--core-spec=1"], "option '--core-spec' is not supported by tbatch"),
        (["-S", "1"], "option '-S' (--core-spec) is not supported by tbatch"),
        (["-N"], "option requires an argument -- 'N'"),
        (["--nodes"], "option '--nodes' requires an argument"),
        (["--parsable=yes"], "option '--parsable' doesn't allow an argument"),
        (["--nodes=0"], "invalid --nodes value '0': the node count must be at least 1"),
        (["--nodes=-1"], "invalid --nodes value '-1': expected N or MIN-MAX (node counts)"),
        (["--nodes=5-2"], "invalid --nodes value '5-2': the maximum 2 is less than the minimum 5"),
        (["--nodes=x"], "invalid --nodes value 'x': expected N or MIN-MAX (node counts)"),
        (["-n", "0"], "invalid --ntasks value '0': must be >= 1"),
        (["-n", "-3"], "invalid --ntasks value '-3': must be an integer >= 1"),
        (["-c", "two"], "invalid --cpus-per-task value 'two': must be an integer >= 1"),
        (["--ntasks-per-node=0"], "invalid --ntasks-per-node value '0': must be >= 1"),
        (["--gpus-per-node=-1"], "invalid --gpus-per-node value '-1': expected N or TYPE:N"),
        (["--gpus-per-node=a:1,b:2"], "invalid --gpus-per-node value 'a:1,b:2'"),
        (["--mem=0"], "--mem=0 (all of each node's memory) is not supported"),
        (["--mem=1.5G"], "invalid --mem value '1.5G'"),
        (["-M", "a,b"], "invalid --clusters value 'a,b'"),
        (["--mem=4X"], "invalid --mem value '4X'"),
        (
            ["-t", "1:2:3:4"],
            "invalid --time value '1:2:3:4': invalid time specification "
            "'1:2:3:4'; expected minutes",
        ),
        (["--switches=0"], "invalid --switches value '0'"),
        (["--switches=1@x"], "invalid --switches value '1@x': bad maximum wait"),
        (["--exclusive=user"], "invalid --exclusive value 'user': only a plain --exclusive"),
        (["--export=NONE,FOO=1"], "invalid --export value 'NONE,FOO=1': NONE cannot be combined"),
        (
            ["--export=1BAD=x"],
            "invalid --export value '1BAD=x': invalid environment variable name '1BAD'",
        ),
        (["--export=A='x"], "invalid --export value 'A='x': unmatched '"),
        (["-J", ""], "invalid --job-name value '': must not be empty"),
        (["-J", "a\nb"], "invalid --job-name value 'a\\nb': contains control characters"),
        (["-p", "x" * 300], "longer than 256 characters"),
        (["--runtime=../x"], "invalid --runtime value '../x': must be a name"),
        (
            ["--wrap", "true", "job.sh"],
            "Script arguments are not permitted with the --wrap option.",
        ),
        (["--wrap=true", "-f", "x.yaml"], "--wrap and -f/--file cannot be used together"),
        (["-f", "x.yaml", "job.sh"], "a batch script cannot be given with -f/--file"),
        (["-f", "x.yaml", "-N", "2"], "option '--nodes' cannot be used with -f/--file"),
        (["-J", "\udcff"], "argument is not valid UTF-8"),
    ],
)
def test_option_errors(argv: list[str], message: str) -> None:
    text = error_of(argv)
    assert text.startswith("tbatch: error: ")
    assert message in text, text


def test_error_message_shape_without_location() -> None:
    assert error_of(["--foo"]) == "tbatch: error: unrecognized option '--foo'"


def test_no_script_at_all() -> None:
    assert "no batch script" in error_of(["-N", "2"], None)
