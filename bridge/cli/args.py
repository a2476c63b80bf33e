"""The t* commands' argument parser: argparse, with errors as every command reports them.

Apart from :mod:`bridge.cli.common` because ``tbatch`` does not parse its options (the
daemon does) and should not pay for importing argparse at each start.
"""

from __future__ import annotations

import argparse

from bridge.cli.common import UserError

TYPE_CHECKING = False  # typing costs every command ~2 ms of start-up (bridge.client_types)
if TYPE_CHECKING:
    from typing import NoReturn

__all__ = ["ArgumentParser"]


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports errors as ``prog: error: ...`` and exit status 1 (through
    :class:`~bridge.cli.common.UserError` and :func:`~bridge.cli.common.run`)."""

    def error(self, message: str) -> NoReturn:
        raise UserError(message)
