"""sbatch's input environment variables in tbatch (issue 12): command line > environment >
#SBATCH lines; bad values name the variable; refused options' variables are refused."""

from __future__ import annotations

import pytest

from bridge.sbatch import SbatchError, parse_tbatch
from bridge.sbatch.inputenv import INPUT_VARIABLES
from bridge.sbatch.options import BY_LONG

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


@pytest.mark.parametrize(("env", "message"), [
    ({"SBATCH_TIMELIMIT": "abc"}, "invalid --time value 'abc' (from SBATCH_TIMELIMIT): "),
    ({"SBATCH_MEM_PER_NODE": "1X"}, "invalid --mem value '1X' (from SBATCH_MEM_PER_NODE)"),
    ({"SBATCH_OPEN_MODE": "x"}, "(from SBATCH_OPEN_MODE): Invalid --open-mode argument"),
    ({"SBATCH_PARTITION": "a\udcff"}, "SBATCH_PARTITION: the value is not valid UTF-8"),
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
