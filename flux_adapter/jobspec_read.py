"""Reading back what the Flux back end wrote into a job (its jobspec, its id, its output
paths): pure functions, split from :mod:`flux_adapter.jobspec` (which re-exports them).

Contract: :meth:`JobspecInfo.from_jobspec` never raises (missing or malformed parts
are None); :func:`parse_job_id` raises ValueError for text that is not a Flux id;
:func:`resolve_output` is None when the path cannot be known.
"""

from __future__ import annotations

import os.path
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["UID_ATTRIBUTE", "JobspecInfo", "f58", "parse_job_id", "resolve_output"]

#: ``attributes.user`` key holding the TrainJob uid.
UID_ATTRIBUTE = "hpc_bridge_uid"


@dataclass(frozen=True)
class JobspecInfo:
    """What the back end reads back from a (redacted) jobspec of one of its jobs."""

    uid: str | None
    name: str | None
    queue: str | None
    cwd: str | None
    stdout: str | None
    stderr: str | None

    @classmethod
    def from_jobspec(cls, jobspec: object) -> JobspecInfo:
        """Never raises: missing or malformed parts are None."""
        spec = jobspec if isinstance(jobspec, Mapping) else {}
        attrs = _mapping(spec.get("attributes"))
        system = _mapping(attrs.get("system"))
        user = _mapping(attrs.get("user"))
        output = _mapping(_mapping(_mapping(system.get("shell")).get("options")).get("output"))

        def path(stream: str) -> str | None:
            value = _mapping(output.get(stream)).get("path")
            return value if isinstance(value, str) else None

        uid = user.get(UID_ATTRIBUTE)
        name = _mapping(system.get("job")).get("name")
        queue = system.get("queue")
        cwd = system.get("cwd")
        return cls(uid=uid if isinstance(uid, str) and uid else None,
                   name=name if isinstance(name, str) else None,
                   queue=queue if isinstance(queue, str) else None,
                   cwd=cwd if isinstance(cwd, str) else None,
                   stdout=path("stdout"), stderr=path("stderr"))


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


_F58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def f58(job_id: int) -> str:
    """Flux's F58 job id encoding (``ƒ`` + base 58), as ``{{id}}`` renders it."""
    if job_id < 0:
        raise ValueError("job ids are not negative")
    digits = ""
    n = job_id
    while True:
        n, r = divmod(n, 58)
        digits = _F58[r] + digits
        if n == 0:
            break
    return "ƒ" + digits


def parse_job_id(text: str) -> int:
    """A job id as Flux prints it: decimal, ``ƒ``/``f`` + F58, or ``0x`` hex."""
    s = text.strip()
    if s.isdigit():
        return int(s)
    if s[:1] in ("ƒ", "f") and len(s) > 1 and all(c in _F58 for c in s[1:]):
        n = 0
        for c in s[1:]:
            n = n * 58 + _F58.index(c)
        return n
    if s.lower().startswith("0x"):
        return int(s, 16)
    raise ValueError(f"not a Flux job id: {text!r}")


def resolve_output(template: str | None, job_id: int, cwd: str | None) -> str | None:
    """The file a job's output goes to: ``{{id}}``/``{{jobid}}`` (F58) and
    ``{{id.dec}}`` filled in, relative paths taken from ``cwd``. None if unknown or if
    the template holds another ``{{...}}`` (the bridge does not write those)."""
    if not template:
        return None
    text = (template.replace("{{id.dec}}", str(job_id)).replace("{{jobid.dec}}", str(job_id))
            .replace("{{id}}", f58(job_id)).replace("{{jobid}}", f58(job_id)))
    if "{{" in text:
        return None
    if not os.path.isabs(text):
        if not cwd:
            return None
        text = os.path.join(cwd, text)
    return os.path.normpath(text)
