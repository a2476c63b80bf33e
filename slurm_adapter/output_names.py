"""Output file names as Slurm makes them: :func:`expand_output_pattern` resolves
``slurm-%j.out``-style patterns the way Slurm does, for reporting where a job's output is.
"""

from __future__ import annotations

__all__ = ["NO_VAL", "expand_output_pattern"]

#: Slurm's value for "no array task id" (``NO_VAL``), which ``%a`` prints for plain jobs.
NO_VAL = 0xFFFFFFFE

_WILDCARDS = frozenset("AaJjNnstuxb")


def expand_output_pattern(
    pattern: str,
    job_id: int | str,
    job_name: str,
    user: str,
    chdir: str,
    *,
    array_job_id: int | None = None,
    array_task_id: int | None = None,
    node: str | None = None,
) -> str:
    """The file a stdout/stderr ``pattern`` names for the batch step, as Slurm makes it.

    ``%%`` ``%A`` ``%a`` ``%b`` ``%J`` ``%j`` ``%N`` ``%n`` ``%s`` ``%t`` ``%u``
    ``%x``, with optional zero padding (``%4j``, at most 10). A pattern holding a
    backslash is not expanded (its backslashes are dropped). A relative result is
    joined to ``chdir``. ``%N`` (the batch host) stays as is while ``node`` is unknown.
    """
    if "\\" in pattern:
        out = pattern.replace("\\", "")
    else:
        out = _expand_fields(pattern, int(job_id), job_name, user, array_job_id,
                             array_task_id, node)
    if not out.startswith("/"):
        out = chdir.rstrip("/") + "/" + out
    return out


def _expand_fields(pattern: str, job_id: int, job_name: str, user: str,
                   array_job_id: int | None, array_task_id: int | None,
                   node: str | None) -> str:
    task = NO_VAL if array_task_id is None else array_task_id
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c != "%":
            out.append(c)
            i += 1
            continue
        if i + 1 >= n:  # a lone trailing "%" is dropped, as by Slurm
            break
        j = i + 1
        if pattern[j] == "%":
            out.append("%")
            i = j + 1
            continue
        k = j
        while k < n and pattern[k].isdigit():
            k += 1
        digits = pattern[j:k]
        if digits and (k >= n or pattern[k] not in _WILDCARDS):
            # Slurm's quirk: "%12q" keeps only the last digit ("2q").
            out.append(digits[-1])
            i = k
            continue
        spec = pattern[k]
        width = min(int(digits), 10) if digits else 0
        numbers = {"A": array_job_id or job_id, "J": job_id, "j": job_id, "a": task,
                   "b": task % 10}
        if spec in numbers:
            out.append(f"{numbers[spec]:0{width}d}")
        elif spec == "N":
            out.append(node if node else "%N")
        elif spec in "nt":
            out.append("0")
        elif spec == "s":
            out.append("batch")
        elif spec == "u":
            out.append(user)
        elif spec == "x":
            out.append(job_name)
        else:
            out.append("%" + spec)
        i = k + 1
    return "".join(out)
