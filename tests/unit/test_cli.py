"""The t* commands as programs, without a daemon: what starting one imports, the console
scripts, tbatch's help, version and a daemon that is down.

Split: tqueue in test_cli_tqueue.py; tshow, tcancel and tlog in test_cli_job.py; the fake
daemon (a scripted HTTP server on 127.0.0.1 behind the real client) in cli_helpers.py,
which test_hold.py and test_queue_format.py use too.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from bridge import model
from bridge.cli import tbatch_main
from bridge.cli import tshow as tshow_module
from tests.unit.cli_helpers import COMMAND_MODULES
from tests.unit.cli_helpers import utc as utc

#: Commands whose console scripts start in :mod:`bridge.cli.quick`.
QUICK_COMMANDS = ("tbatch", "tqueue")


# ------------------------------------------------- tbatch (the rest: test_tbatch.py)


def test_tbatch_daemon_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sock = str(tmp_path / "b.sock")
    monkeypatch.setenv("HPC_BRIDGE_SOCKET", sock)
    monkeypatch.delenv("HPC_BRIDGE_URL", raising=False)
    assert tbatch_main(["--wrap", "true"]) == 1
    assert capsys.readouterr().err == (
        f"tbatch: error: cannot reach hpc-bridge at {sock}: is the daemon running? "
        "(set HPC_BRIDGE_SOCKET)\n"
    )


def test_tbatch_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert tbatch_main(["--help"]) == 0
    assert "Usage: tbatch" in capsys.readouterr().out
    assert tbatch_main(["-V"]) == 0
    assert capsys.readouterr().out.startswith("tbatch (hpc-bridge ")


# --------------------------------------------------------------------- start-up


def test_annotation_names_match_the_model() -> None:
    assert tshow_module._ANN_BATCH_SCRIPT == model.ANN_BATCH_SCRIPT
    assert tshow_module._ANN_SCHEDULING == model.ANN_SCHEDULING


def test_importing_the_commands_stays_light() -> None:
    """tqueue/tshow/tcancel/tlog start in tens of ms: no pydantic, PyYAML, httpx ...

    (tshow --yaml imports PyYAML when it runs, --version metadata, tbatch --help the
    option table; test_tbatch.py runs a whole submission.)
    """
    heavy = [
        "bridge.model",
        "bridge.sbatch.cmdline",
        "bridge.sbatch.parse",
        "pydantic",
        "yaml",
        "httpx",
        "hostlist",
        "importlib.metadata",
        "dataclasses",
        "http.client",
        "ssl",
    ]
    commands = ", ".join(f"bridge.cli.{c}" for c in COMMAND_MODULES)
    assert _printed(f"import sys, {commands}; "
                    f"print([m for m in {heavy!r} if m in sys.modules])") == []


def _printed(code: str) -> object:
    """What a fresh interpreter running ``code`` prints (one Python literal)."""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return ast.literal_eval(out.strip())


def test_importing_the_package_loads_no_command() -> None:
    """``bridge.cli`` re-exports the commands' names lazily: ``tqueue`` pays for no other."""
    assert _printed("import sys, bridge.cli, bridge.cli.tqueue; "
                    "print(sorted(m for m in sys.modules if m.startswith('bridge.cli.')))") == [
        "bridge.cli.args", "bridge.cli.common", "bridge.cli.queue_format", "bridge.cli.tqueue"]


def test_tbatch_imports_only_what_a_submission_needs() -> None:
    """``tbatch`` is measured against ``python -c pass`` (docs/operations.md): beyond the
    light list above, it loads neither typing nor argparse nor datetime (each 1-3 ms of
    its start), whatever the interpreter's site loaded already."""
    printed = _printed("import sys; before = set(sys.modules); import bridge.cli.tbatch; "
                       "print(sorted(set(sys.modules) - before))")
    assert isinstance(printed, list)
    loaded = set(printed)
    assert not {"typing", "argparse", "datetime", "bridge.sbatch.script",
                "bridge.cli.args"} & loaded, sorted(loaded)


def test_the_console_scripts_name_the_command_modules() -> None:
    """Each t* console script loads its command's entry point, the one bridge.cli names."""
    import importlib.metadata

    import bridge.cli

    scripts = {
        ep.name: ep for ep in importlib.metadata.entry_points(group="console_scripts")
        if ep.dist is not None and ep.dist.name == "hpc-bridge"
    }
    for command in COMMAND_MODULES:
        entry = scripts[command]
        if command in QUICK_COMMANDS:  # their quick paths hand the rest to the command
            assert entry.module == "bridge.cli.quick"
            assert entry.attr == f"{command}_main"
            continue
        assert entry.module == f"bridge.cli.{command}"
        assert entry.load() is getattr(bridge.cli, f"{command}_main")
