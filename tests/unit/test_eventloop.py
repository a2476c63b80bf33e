"""``[daemon] event_loop``: the loop the daemon runs on (bridge/eventloop.py)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
import uvloop

from bridge import eventloop
from bridge.config import ConfigError, load_config
from bridge.daemon import main

ONE = """
[daemon]
state_dir = "{state}"
{line}

[backends.slurm]
kind = "slurm"
rest_socket = "/run/a.sock"
"""


async def _loop_type() -> type:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop())


def test_uvloop_is_the_default_and_asyncio_can_be_chosen(tmp_path: Path) -> None:
    path = tmp_path / "bridge.toml"
    path.write_text(ONE.format(state=tmp_path, line=""))
    config = load_config(path)
    assert config.daemon.event_loop == "uvloop"
    assert eventloop.run(_loop_type(), config.daemon.event_loop) is uvloop.Loop
    path.write_text(ONE.format(state=tmp_path, line='event_loop = "asyncio"'))
    kind = load_config(path).daemon.event_loop
    loop_type = eventloop.run(_loop_type(), kind)
    assert not issubclass(loop_type, uvloop.Loop)
    assert issubclass(loop_type, asyncio.BaseEventLoop)


def test_an_unknown_loop_is_refused_naming_the_setting(tmp_path: Path) -> None:
    path = tmp_path / "bridge.toml"
    path.write_text(ONE.format(state=tmp_path, line='event_loop = "trio"'))
    with pytest.raises(ConfigError, match=r"daemon\.event_loop"):
        load_config(path)


def test_a_missing_uvloop_is_named_by_check_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop: ImportError
    with pytest.raises(ValueError, match=r'daemon\.event_loop = "uvloop", but uvloop cannot '
                                         r'be imported .*event_loop = "asyncio"'):
        eventloop.loop_factory("uvloop")
    assert eventloop.loop_factory("asyncio") is asyncio.new_event_loop
    path = tmp_path / "bridge.toml"
    path.write_text(ONE.format(state=tmp_path, line=""))
    assert main(["check-config", "--config", str(path)]) == 2
    assert 'daemon.event_loop = "uvloop", but uvloop cannot be imported' in (
        capsys.readouterr().err)
