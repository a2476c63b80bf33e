"""tbatch's own light scan (:mod:`bridge.sbatch.locate`) agrees with the parser.

Its tables must say for every option what :data:`bridge.sbatch.OPTIONS` and the refusal
tables say (a new option in one and not the other fails here), and on any command line
the parser accepts, both must find the same script, ``--wrap``, ``-f``, ``--help`` and
``--version``.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bridge.sbatch import SbatchError, parse_command_line
from bridge.sbatch import options as table
from bridge.sbatch.locate import (
    LONG_NO_ARG,
    LONG_OPTIONAL_ARG,
    LONG_REQUIRED_ARG,
    SHORT_NO_ARG,
    SHORT_REQUIRED_ARG,
    Located,
    locate,
)


def _parser_long() -> dict[str, str]:
    kinds = {name: spec.arg for name, spec in table.BY_LONG.items()}
    for name in (*table._REFUSED, *table._SBATCH_ONLY_LONG):
        kind = table.refused_long(name)
        assert kind is not None
        kinds.setdefault(name, kind)
    return kinds


def _parser_short() -> dict[str, str]:
    kinds = {letter: spec.arg for letter, spec in table.BY_SHORT.items()}
    for letter in table._SBATCH_ONLY_SHORT:
        kind = table.refused_short(letter)
        assert kind is not None
        kinds[letter] = kind
    return kinds


def test_the_tables_match_the_option_table() -> None:
    mine = {**dict.fromkeys(LONG_NO_ARG, "none"), **dict.fromkeys(LONG_OPTIONAL_ARG, "optional"),
            **dict.fromkeys(LONG_REQUIRED_ARG, "required")}
    assert len(mine) == len(LONG_NO_ARG) + len(LONG_OPTIONAL_ARG) + len(LONG_REQUIRED_ARG)
    assert mine == _parser_long()
    shorts = {**dict.fromkeys(SHORT_NO_ARG, "none"),
              **dict.fromkeys(SHORT_REQUIRED_ARG, "required")}
    assert len(shorts) == len(SHORT_NO_ARG) + len(SHORT_REQUIRED_ARG)
    assert shorts == _parser_short()


def test_examples() -> None:
    assert locate(["-p", "debug", "job.sh", "-x"]).script_path == "job.sh"
    assert locate(["-pdebug", "-N2", "--exclusive", "job.sh"]).script_path == "job.sh"
    assert locate(["-J", "-x", "--", "job.sh"]).script_path == "job.sh"
    assert locate(["--wrap", "--help"]) == locate(["--wrap=--help"])
    assert locate(["--wrap", "--help"]).help is False
    assert locate(["-vf", "job.yaml"]).trainjob_file == "job.yaml"
    assert locate(["-f", "a.yaml", "--file=b.yaml"]).trainjob_file == "b.yaml"
    assert locate(["--usage"]).help and locate(["-V"]).version
    unknown = locate(["--nope", "job.sh"])
    assert not unknown.complete and unknown.script_path is None
    empty, dash = locate([]), locate(["-"])
    assert (empty.script_path, dash.script_path) == (None, "-")
    assert empty == Located(script_path=None, wrap=dash.wrap,
                            trainjob_file=dash.trainjob_file, help=dash.help,
                            version=dash.version, complete=dash.complete)
    copy = Located(**{name: getattr(empty, name) for name in Located.__slots__})
    assert empty != dash and hash(empty) == hash(copy)


_WORDS = st.sampled_from(
    ["-p", "debug", "-N2", "-N", "2", "--nodes=1-2", "--exclusive", "--exclusive=user",
     "-v", "-vN", "3", "--wrap", "echo hi", "-f", "job.yaml", "--file=t.yaml", "--parsable",
     "--help", "-h", "-V", "--version", "--", "-", "job.sh", "arg", "-J", "-x", "--array",
     "1-3", "-H", "--hold", "--nice", "--nice=5", "--partition", "--time=10", "-t", "5",
     "--backend", "slurm", "--export=NONE", "-o", "out.%j", "--qos", "normal"])


@given(st.lists(_WORDS, max_size=10))
def test_locate_agrees_with_the_parser(argv: list[str]) -> None:
    try:
        cmd = parse_command_line(argv)
    except SbatchError:
        return  # the daemon answers the parser's error; what locate found does not matter
    found = locate(argv)
    assert found.complete
    assert found.script_path == cmd.script_path
    assert found.wrap == cmd.wrap
    assert found.trainjob_file == cmd.trainjob_file
    assert (found.help, found.version) == (cmd.help, cmd.version)
