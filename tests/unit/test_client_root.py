"""A ``client_root`` chroot whose commands the daemon runs as root: a program or
directory in it that another user owns or may write to is refused, and nothing runs."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from bridge.backend import BackendUnavailable
from bridge.filemodes import untrusted_component
from slurm_adapter.cli import SlurmCli


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "chroot"
    program = root / "usr" / "bin" / "squeue"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\necho ran\n")
    for path in (tmp_path, root, root / "usr", program.parent):
        path.chmod(0o755)
    program.chmod(0o755)
    return root, program


def test_a_root_owned_tree_is_trusted(tmp_path: Path) -> None:
    root, program = _tree(tmp_path)
    assert untrusted_component(root) is None and untrusted_component(program) is None
    assert SlurmCli(root=str(root), pdeathsig=False)._which("squeue") == str(program)


def test_a_program_others_may_write_is_not_run(tmp_path: Path) -> None:
    root, program = _tree(tmp_path)
    program.chmod(0o777)
    assert "writable by group or others" in (untrusted_component(program) or "")
    cli = SlurmCli(root=str(root), pdeathsig=False)
    with pytest.raises(BackendUnavailable, match=f"{program} is writable"):
        asyncio.run(cli.run(["squeue"]))


def test_a_directory_a_user_owns_is_not_trusted(tmp_path: Path) -> None:
    root, program = _tree(tmp_path)
    os.chown(program.parent, 1001, 1001)  # alice could swap squeue for her own (tests run
    # as root, as the daemon does)
    why = untrusted_component(program) or ""
    assert why == f"{program.parent} is owned by uid 1001"
    cli = SlurmCli(root=str(root), pdeathsig=False)
    with pytest.raises(BackendUnavailable, match="owned by uid 1001"):
        asyncio.run(cli.run(["squeue"]))
