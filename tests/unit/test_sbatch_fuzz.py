"""Property tests: tbatch's parser raises nothing but SbatchError, whatever it is fed,
and an error in a script names its line (part of the hostile-input suite: budget and
seed from tests/hostile.py)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from bridge.sbatch import OPTIONS, SbatchError, parse_tbatch, read_directives, to_trainjob
from tests.hostile import ANY_CHAR, cases, within_case_timeout

ANY_TEXT = st.text(alphabet=ANY_CHAR, max_size=40)

_NAMES = sorted({f"--{o.long}" for o in OPTIONS} | {f"-{o.short}" for o in OPTIONS if o.short})
_VALUES = [
    "0",
    "1",
    "2-4",
    "5-2",
    "-1",
    "1k",
    "a100:4",
    "32G",
    "1:00:00",
    "UNLIMITED",
    "ALL",
    "NONE",
    "ALL,A=1",
    "A='x",
    "x",
    "",
    "job.sh",
    "--",
    "-",
    "'",
    '"',
    "#",
    "\\",
    "\n",
    "\x00",
    "\udcff",
    "1@10",
    "user",
    "torch-distributed",
    "200000",
]
WORDS = st.one_of(
    st.sampled_from(_NAMES),
    st.sampled_from(_VALUES),
    st.builds(lambda n, v: f"{n}={v}", st.sampled_from(_NAMES), st.sampled_from(_VALUES)),
    st.builds(
        lambda n, v: f"{n}{v}",
        st.sampled_from([n for n in _NAMES if len(n) == 2]),
        st.sampled_from(_VALUES),
    ),
    ANY_TEXT,
)
ARGV = st.lists(WORDS, max_size=8)
DIRECTIVE = st.builds(lambda ws: "#SBATCH " + " ".join(ws), st.lists(WORDS, max_size=5))
LINE = st.one_of(DIRECTIVE, st.sampled_from(["", "# c", "  ", "echo hi", "#SBATCH"]), ANY_TEXT)
SCRIPT = st.one_of(
    st.builds(lambda lines: "#!/bin/sh\n" + "\n".join(lines) + "\n", st.lists(LINE, max_size=6)),
    ANY_TEXT,
    st.none(),
)
ENVIRON = st.dictionaries(
    st.one_of(st.sampled_from(["PATH", "SLURM_X", "A"]), ANY_TEXT), ANY_TEXT, max_size=4
)


def _submit(argv: list[str], script: str | None, environ: dict[str, str]) -> None:
    try:
        with within_case_timeout():
            request = parse_tbatch(argv, script)
            if request.script_text is not None:
                to_trainjob(request, cwd="/home/u", environ=environ)
    except SbatchError as exc:
        assert str(exc).startswith("tbatch: error: ")
        assert exc.message


@cases(2)
@given(ARGV, SCRIPT, ENVIRON)
def test_only_sbatch_errors_from_option_soup(
    argv: list[str], script: str | None, environ: dict[str, str]
) -> None:
    _submit(argv, script, environ)


@cases(1)
@given(st.lists(ANY_TEXT, max_size=6), st.one_of(ANY_TEXT, st.none()))
def test_only_sbatch_errors_from_arbitrary_text(argv: list[str], script: str | None) -> None:
    _submit(argv, script, {})


@cases(1)
@given(st.text(alphabet=ANY_CHAR, max_size=200))
def test_read_directives_only_raises_sbatch_error(text: str) -> None:
    try:
        found = read_directives("#!/bin/sh\n" + text)
    except SbatchError:
        return
    for lineno, words in found:
        assert lineno >= 2
        assert words


@cases(2)
@given(st.lists(LINE, max_size=6), st.sampled_from(["", "\x00", "\udcff", "\r\n"]))
def test_script_errors_name_the_line(lines: list[str], poison: str) -> None:
    """A script whose command line is fine: any error names the script and line (a
    directive's), or for a character sbatch refuses anywhere, the line it is on."""
    script = "#!/bin/sh\n" + "\n".join(lines) + "\necho" + poison + "\n"
    try:
        with within_case_timeout():
            request = parse_tbatch(["job.sh"], script)
            to_trainjob(request, cwd="/home/u", environ={})
    except SbatchError as exc:
        text = str(exc)
        assert text.startswith("tbatch: error: "), text
        if exc.lineno is not None:
            assert text.startswith(f"tbatch: error: job.sh:{exc.lineno}: "), text
            assert script.split("\n")[exc.lineno - 1].startswith("#SBATCH"), text
            return
        # A whole-script check, or several errors at once (refused options and the
        # first other error): then each line names its own #SBATCH line.
        places = [int(m.group(1)) for line in text.split("\n")
                  if (m := re.match(r"tbatch: error: job\.sh:(\d+): ", line))]
        if not places:
            assert "(line " in text or "DOS line breaks" in text, text
        for number in places:
            assert script.split("\n")[number - 1].startswith("#SBATCH"), text


_PLAIN = st.text(alphabet=st.sampled_from("abcXYZ019-=_,.:/%@"), min_size=1, max_size=10)


@given(st.lists(_PLAIN, min_size=1, max_size=6))
def test_directive_words_split_like_a_command_line(words: list[str]) -> None:
    script = "#!/bin/sh\n#SBATCH " + " ".join(words) + "\n"
    assert read_directives(script) == [(2, words)]
    quoted = "#!/bin/sh\n#SBATCH " + " ".join(f"'{w} {w}'" for w in words) + "\n"
    assert read_directives(quoted) == [(2, [f"{w} {w}" for w in words])]


@given(st.integers(min_value=1, max_value=500), st.integers(min_value=1, max_value=500))
def test_command_line_always_wins(script_nodes: int, cli_nodes: int) -> None:
    script = f"#!/bin/sh\n#SBATCH -N {script_nodes} -p script\n"
    options = parse_tbatch(["-N", str(cli_nodes), "job.sh"], script).options
    assert options.nodes_min == cli_nodes
    assert options.partition == "script"
