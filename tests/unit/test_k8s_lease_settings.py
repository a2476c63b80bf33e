"""Settings of the Lease elector (k8s_adapter/lease.py): bad ones are refused by name
before the daemon starts (check-config); the election itself runs against the real
apiserver in tests/integration/test_k8s_leader.py."""

from __future__ import annotations

import os

import pytest

from k8s_adapter.lease import create


def test_defaults_and_identity() -> None:
    elector = create("leader_election", {"namespace": "hpc"})
    assert (elector.lease, elector.namespace) == ("hpc-bridge", "hpc")
    assert (elector.lease_duration, elector.renew_deadline, elector.retry_period) == (15, 10, 2)
    assert elector.identity.endswith(f"_{os.getpid()}")
    assert elector.valid_until() == 0.0  # not held


@pytest.mark.parametrize(("settings", "message"), [
    ({"namespace": "n", "lease_duration": 10, "renew_deadline": 10}, "lease_duration >"),
    ({"namespace": "n", "renew_deadline": 2, "retry_period": 2}, "renew_deadline >"),
    ({"namespace": "n", "lease_duration": 7.5}, "whole seconds"),
    ({"namespace": "n", "retry_period": 0}, "retry_period must be a number >= 1"),
    ({"namespace": "n", "leaseName": "x"}, "unknown setting"),
    ({"namespace": "n", "lease_duration": True}, "lease_duration must be a number"),
])
def test_bad_settings_are_refused_by_name(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        create("leader_election", settings)


def test_outside_a_pod_the_namespace_is_needed() -> None:
    with pytest.raises(ValueError, match="namespace is needed"):
        create("leader_election", {})
