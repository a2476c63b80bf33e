"""Private state files, token files refused like ssh keys, the Bearer scheme, uids."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.api_submit import idempotency_key
from bridge.callers import bearer_token, load_tokens
from bridge.filemodes import InsecureFile, check_secret_file, secure_state_dir
from bridge.model import ValidationError, ensure_identity, is_job_uid, load_trainjob
from tests.requirements import require

ME = pwd.getpwuid(os.geteuid())


def test_state_dir_and_database_files_are_made_private_and_each_fix_is_said(
        tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    state.chmod(0o755)
    for suffix in ("", "-wal", "-shm"):
        (state / f"bridge.sqlite{suffix}").write_bytes(b"")
        (state / f"bridge.sqlite{suffix}").chmod(0o644)
    (state / "other").write_bytes(b"")
    (state / "other").chmod(0o644)
    fixes = secure_state_dir(state)
    assert fixes[0] == f"{state}: 0755 -> 0700" and len(fixes) == 4
    assert oct(state.stat().st_mode & 0o777) == "0o700"
    assert all((state / f"bridge.sqlite{s}").stat().st_mode & 0o777 == 0o600
               for s in ("", "-wal", "-shm"))
    assert secure_state_dir(state) == []  # nothing left to fix
    fresh = tmp_path / "new" / "state"
    assert secure_state_dir(fresh) == [] and fresh.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o602])
def test_a_secret_others_may_access_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "tokens.csv"
    path.write_text(f"t,{ME.pw_name},{ME.pw_uid}\n")
    path.chmod(mode)
    with pytest.raises(InsecureFile, match=f"mode {mode:04o}.*chmod 600"):
        check_secret_file(path)
    with pytest.raises(ValueError, match="group/others"):
        load_tokens(path)
    path.chmod(0o600)
    assert load_tokens(path)["t"].uid == ME.pw_uid


def test_the_uid_column_must_be_the_users(tmp_path: Path) -> None:
    path = tmp_path / "tokens.csv"
    path.write_text(f"# token,user,uid\nt,{ME.pw_name},{ME.pw_uid + 1}\n")
    path.chmod(0o600)
    with pytest.raises(ValueError, match=f"{path}:2: uid '{ME.pw_uid + 1}' is not the uid"):
        load_tokens(path)
    path.write_text(f"t,{ME.pw_name},\n")  # an empty uid takes the passwd one
    assert load_tokens(path)["t"].uid == ME.pw_uid


@pytest.mark.parametrize(("header", "token"), [
    ("Bearer abc", "abc"), ("bearer abc", "abc"), ("BEARER  abc ", "abc"),
    ("Basic abc", ""), ("Bearer", ""), ("", ""), ("Bearerabc", ""),
])
def test_the_bearer_scheme_is_case_insensitive(header: str, token: str) -> None:
    assert bearer_token(header) == token


@given(st.uuids())
def test_every_canonical_rfc4122_uid_is_a_job_uid(value: object) -> None:
    text = str(value)
    assert is_job_uid(text) == (value.variant == "specified in RFC 4122")  # type: ignore[attr-defined]


@pytest.mark.parametrize("uid", [
    "0b6f1c1e-3f0c-4b8e-9a55-3d8f2f0c9a11\x00", "0B6F1C1E-3F0C-4B8E-9A55-3D8F2F0C9A11",
    "{0b6f1c1e-3f0c-4b8e-9a55-3d8f2f0c9a11}", "0b6f1c1e3f0c4b8e9a553d8f2f0c9a11",
    "train", "", "0b6f1c1e-3f0c-4b8e-9a55-3d8f2f0c9a11\n",
])
def test_anything_else_is_not(uid: str) -> None:
    assert not is_job_uid(uid)


def test_idempotency_keys_are_bounded_printable_ascii() -> None:
    assert idempotency_key(None) is None
    assert idempotency_key("a1-B2_c3") == "a1-B2_c3"
    for bad in ("", "x" * 201, "with space", "caf\u00e9", "nul\x00"):
        with pytest.raises(ValidationError, match="Idempotency-Key header"):
            idempotency_key(bad)


def test_admission_refuses_a_job_uid_naming_the_field() -> None:
    job = load_trainjob({"kind": "TrainJob", "apiVersion": "trainer.kubeflow.org/v1alpha1",
                         "metadata": {"uid": "victim\x00"},
                         "spec": {"runtimeRef": {"name": "plain"}}})
    with pytest.raises(ValidationError) as info:
        ensure_identity(job)
    assert info.value.errors[0][0] == "metadata.uid"


def test_a_state_dir_or_database_of_another_user_is_refused(tmp_path: Path) -> None:
    """alice made the directory first (state_dir in a shared place): she could read the
    database, or swap in her own with jobs "of root"; the daemon refuses to start."""
    require(os.geteuid() == 0, "root: needs to make files of another uid")
    alice = pwd.getpwnam("alice").pw_uid
    state = tmp_path / "state"
    state.mkdir()
    os.chown(state, alice, alice)
    with pytest.raises(InsecureFile, match=f"state_dir {state} is owned by uid {alice}"):
        secure_state_dir(state)
    os.chown(state, 0, 0)
    db = state / "bridge.sqlite"
    db.write_bytes(b"")
    os.chown(db, alice, alice)
    with pytest.raises(InsecureFile, match=f"database file {db} .* uid {alice}"):
        secure_state_dir(state)
    db.unlink()
    (state / "bridge.sqlite-wal").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(InsecureFile, match="symbolic link"):
        secure_state_dir(state)
    (state / "bridge.sqlite-wal").unlink()
    link = tmp_path / "link"
    link.symlink_to(state)  # an admin's link to the real directory is fine
    secure_state_dir(link)
    assert state.stat().st_mode & 0o777 == 0o700
