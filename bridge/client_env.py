"""Where a client finds the daemon, and what it says about itself: the names both the
full client (:mod:`bridge.client`) and the commands' quick paths
(:mod:`bridge.cli.quick`) read. No imports: the quick paths start without the client."""

from __future__ import annotations

__all__ = ["DEFAULT_SOCKET", "DEFAULT_TIMEOUT", "ENV_SOCKET", "ENV_TOKEN", "ENV_URL",
           "IDEMPOTENCY_HEADER", "USER_AGENT"]

DEFAULT_SOCKET = "/run/hpc-bridge/bridge.sock"
#: Seconds a command waits to connect and for each answer of the daemon.
DEFAULT_TIMEOUT = 30.0
ENV_SOCKET = "HPC_BRIDGE_SOCKET"
ENV_URL = "HPC_BRIDGE_URL"
ENV_TOKEN = "HPC_BRIDGE_TOKEN"  # noqa: S105 -- the name of a variable, not a secret
USER_AGENT = "hpc-bridge-client/1"
IDEMPOTENCY_HEADER = "Idempotency-Key"
