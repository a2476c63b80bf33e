"""sbatch's input environment variables in tbatch (issue 12): command line > environment >
#SBATCH lines; bad values name the variable; refused options' variables are refused."""

from __future__ import annotations

import pytest

from bridge.sbatch import SbatchError, parse_tbatch
from bridge.sbatch.inputenv import CLIENT_VARIABLES, INPUT_VARIABLES, REFUSED_VARIABLES
from bridge.sbatch.manual import VARIABLES
from bridge.sbatch.options import BY_LONG, refused_long

SCRIPT = "#!/bin/sh\n#SBATCH -p script -A scr -t 5 --requeue\n"


def test_precedence_command_line_environment_script() -> None:
    env = {"SBATCH_PARTITION": "env", "SBATCH_ACCOUNT": "envacct", "SBATCH_NO_REQUEUE": "",
           "SBATCH_QOS": "", "SBATCH_MEM_PER_NODE": "2G", "SBATCH_MAIL_TYPE": "BOGUS"}
    o = parse_tbatch(["-p", "cli", "job.sh"], SCRIPT, environ=env).options
    assert (o.partition, o.account, o.time_limit_minutes) == ("cli", "envacct", 5)
    assert (o.requeue, o.qos, o.mem_mb, o.mail_type) == (False, None, 2048, None)
    assert parse_tbatch(["job.sh"], SCRIPT).options.partition == "script"  # no environ


def test_every_variable_names_a_known_option() -> None:
    assert all(option in BY_LONG for option in INPUT_VARIABLES.values())
    assert all(refused_long(option) for option in REFUSED_VARIABLES.values())


def test_every_variable_of_every_release_is_read_refused_or_documented() -> None:
    """None is ignored without a word: each is in exactly one table."""
    tables = [set(INPUT_VARIABLES), set(REFUSED_VARIABLES), set(CLIENT_VARIABLES)]
    every = set().union(*VARIABLES.values())
    assert sorted(every - set().union(*tables)) == []
    assert sorted(set().union(*tables) - every) == []
    assert sum(map(len, tables)) == len(every)


@pytest.mark.parametrize(("env", "want"), [
    ({"SBATCH_OUTPUT": "o-%j.out", "SBATCH_ERROR": "e.err"},
     {"output": "o-%j.out", "error": "e.err"}),
    ({"SBATCH_EXCLUSIVE": ""}, {"exclusive": True}),
    ({"SBATCH_REQ_SWITCH": "1", "SBATCH_WAIT4SWITCH": "10"},
     {"switches": 1, "switches_wait_minutes": 10}),
    ({"SBATCH_REQ_SWITCH": "2@5", "SBATCH_WAIT4SWITCH": "1:00:00"},
     {"switches": 2, "switches_wait_minutes": 60}),
    ({"SBATCH_WAIT4SWITCH": "10"}, {"switches": None}),  # alone: nothing, as in sbatch
    # Not an sbatch variable (22.05 and 24.11 submit such a job not held: checked).
    ({"SBATCH_HOLD": "1"}, {"hold": False}),
])
def test_variables_read_as_their_options(env: dict[str, str], want: dict[str, object]
                                         ) -> None:
    o = parse_tbatch(["job.sh"], "#!/bin/sh\n", environ=env).options
    assert {k: getattr(o, k) for k in want} == want


def test_a_refused_flags_variable_is_refused_set_empty() -> None:
    with pytest.raises(SbatchError, match=r"SBATCH_IGNORE_PBS \(--ignore-pbs\) is not"):
        parse_tbatch(["job.sh"], SCRIPT, environ={"SBATCH_IGNORE_PBS": ""})
    parse_tbatch(["job.sh"], SCRIPT, environ={"SBATCH_INPUT": ""})  # empty: not set


@pytest.mark.parametrize(("env", "message"), [
    ({"SBATCH_TIMELIMIT": "abc"}, "invalid --time value 'abc' (from SBATCH_TIMELIMIT): "),
    ({"SBATCH_MEM_PER_NODE": "1X"}, "invalid --mem value '1X' (from SBATCH_MEM_PER_NODE)"),
    ({"SBATCH_OPEN_MODE": "x"}, "(from SBATCH_OPEN_MODE): Invalid --open-mode argument"),
    ({"SBATCH_PARTITION": "a\udcff"}, "SBATCH_PARTITION: the value is not valid UTF-8"),
    ({"SBATCH_EXCLUSIVE": "user"}, "(from SBATCH_EXCLUSIVE): only a plain --exclusive"),
    ({"SBATCH_REQ_SWITCH": "1", "SBATCH_WAIT4SWITCH": "x"},
     "(from SBATCH_REQ_SWITCH and SBATCH_WAIT4SWITCH): bad maximum wait"),
])
def test_bad_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SbatchError) as err:
        parse_tbatch(["job.sh"], SCRIPT, environ=env)
    assert str(err.value).startswith("tbatch: error: ")
    assert message in str(err.value)


def test_refused_variables_join_the_other_refusals() -> None:
    with pytest.raises(SbatchError) as err:
        parse_tbatch(["-I", "job.sh"], SCRIPT + "#SBATCH --wait\n",
                     environ={"SBATCH_CORE_SPEC": "1"})
    assert str(err.value).split("\n") == [
        "tbatch: error: command line: option '-I' (--immediate) is not supported by tbatch",
        "tbatch: error: SBATCH_CORE_SPEC (--core-spec) is not supported by tbatch",
        "tbatch: error: job.sh:3: option '--wait' is not supported by tbatch",
    ]
