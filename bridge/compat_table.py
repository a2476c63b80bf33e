"""The sbatch compatibility table (``docs/sbatch-compat.md``), made from the code's tables.

One row per sbatch option of any release the bridge is tried on
(:mod:`bridge.sbatch.manual`), plus tbatch's own options: in which releases sbatch has
it, whether tbatch takes it (or refuses it by name), and what each installed back end
does with it (its :mod:`bridge.option_support` table, found through the
``hpc_bridge.option_support`` entry points). A test compares the file with
:func:`render`, so the document cannot drift from the code.

Contract: :func:`render` returns the whole Markdown document (deterministic);
``python -m bridge.compat_table`` prints it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bridge.option_support import Support, installed_tables
from bridge.sbatch.manual import RELEASES, all_names
from bridge.sbatch.options import BY_LONG, OPTIONS, OptionSpec, refused_names
from bridge.scheduling import SchedulingOptions

__all__ = ["render"]

#: Options whose meaning is the same on every back end: tbatch or the daemon does it.
_TBATCH: Mapping[str, str] = {
    "test-only": "the daemon checks the job and submits nothing (on Slurm with sbatch "
                 "--test-only's estimate)",
    "parsable": "tbatch prints only the job id",
    "wrap": "tbatch writes the /bin/sh script",
    "runtime": "the TrainJob's runtimeRef (a bridge option)",
    "backend": "the back end to run on (a bridge option)",
    "clusters": "the back end to run on, as sbatch -M names a cluster (one name)",
    "file": "submits a TrainJob document (a bridge option)",
    "help": "tbatch's help",
    "usage": "tbatch's help",
    "version": "tbatch's version",
}
#: Options that set fields whose names differ from the option's destination.
_FIELDS: Mapping[str, tuple[str, ...]] = {
    "nodes": ("max_nodes",),
    "mem": ("mem_per_node_mb",),
    "time": ("time_limit_minutes",),
    "requeue": ("requeue",),
    "no-requeue": ("requeue",),
    "switches": ("switches", "switches_wait_minutes"),
}
#: What an option always does, whatever its fields' support (``-N N`` is numNodes).
_ALWAYS: Mapping[str, str] = {"nodes": "N is spec.trainer.numNodes on every back end"}
#: How the details name the part of an option a field is (``--nodes=N-M``).
_PART: Mapping[str, str] = {"max_nodes": "a range N-M: ", "switches_wait_minutes": "N@TIME: "}
_ORDER = ("slurm", "flux", "kubernetes")


@dataclass(frozen=True)
class _Row:
    name: str
    short: str | None
    spec: OptionSpec | None


def _fields(spec: OptionSpec) -> tuple[str, ...]:
    if spec.long in _FIELDS:
        return _FIELDS[spec.long]
    return (spec.dest,) if spec.dest in SchedulingOptions.model_fields else ()


def _status(spec: OptionSpec, table: Mapping[str, Support]) -> str:
    if spec.long in _TBATCH:
        return "yes"
    supports = [table[f] for f in _fields(spec)]
    if all(not s.is_refused and s.check is None for s in supports):
        return "yes"
    if all(s.is_refused for s in supports) and spec.long not in _ALWAYS:
        return "no"
    return "partly"


def _rows() -> list[_Row]:
    refused = refused_names()
    names = sorted({*all_names(), *(o.long for o in OPTIONS)})
    rows = []
    for name in names:
        spec = BY_LONG.get(name)
        short = spec.short if spec is not None else refused.get(name)
        rows.append(_Row(name, short, spec))
    return rows


def _flag(row: _Row) -> str:
    return f"`-{row.short}, --{row.name}`" if row.short else f"`--{row.name}`"


def _tables() -> list[tuple[str, Mapping[str, Support]]]:
    tables = installed_tables()
    if not set(_ORDER) <= set(tables):
        raise RuntimeError(f"back ends {sorted(set(_ORDER) - set(tables))} publish no "
                           "option table: reinstall the package (pip install -e .)")
    order = [k for k in _ORDER if k in tables] + sorted(set(tables) - set(_ORDER))
    return [(k, tables[k]) for k in order]


def _table(rows: Sequence[_Row], tables: Sequence[tuple[str, Mapping[str, Support]]]) -> list[str]:
    releases = sorted(RELEASES)
    head = ["option", *(f"sbatch {r}" for r in releases), "tbatch", *(k for k, _ in tables)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    refused = refused_names()
    for row in rows:
        cells = [_flag(row), *("✓" if row.name in RELEASES[r] else "" for r in releases)]
        if row.spec is not None:
            cells.append("yes")
            cells += [_status(row.spec, table) for _, table in tables]
        else:
            cells.append("refused" if row.name in refused else "**unknown**")
            cells += ["" for _ in tables]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _details(name: str, table: Mapping[str, Support], rows: Sequence[_Row]) -> list[str]:
    lines = [f"### {name}", ""]
    for row in rows:
        spec = row.spec
        if spec is None:
            continue
        if spec.long in _TBATCH:
            lines.append(f"* {_flag(row)}: {_TBATCH[spec.long]}")
            continue
        parts = [_ALWAYS[spec.long]] if spec.long in _ALWAYS else []
        for field in _fields(spec):
            support = table[field]
            what = support.how if support.how is not None else f"refused: {support.why}"
            parts.append(_PART.get(field, "") + what)
        lines.append(f"* {_flag(row)}: " + "; ".join(dict.fromkeys(parts)))
    submit = table["submit_dir"]
    lines.append("* (no option) the directory tbatch ran in: "
                 + (submit.how if submit.how is not None else f"refused: {submit.why}"))
    return [*lines, ""]


def render() -> str:
    """The whole ``docs/sbatch-compat.md``."""
    rows = _rows()
    tables = _tables()
    lines = [
        "# sbatch compatibility",
        "",
        "<!-- Generated by `python -m bridge.compat_table > docs/sbatch-compat.md` from the",
        "     option tables; tests/unit/test_option_support.py fails when it is stale. -->",
        "",
        "Every option of `sbatch` in the Slurm releases the bridge is tried on (from each",
        "release's sbatch(1) manual page), and tbatch's own. Columns `sbatch R`: the release",
        "has it. `tbatch`: **yes** (taken, on the command line and `#SBATCH` lines), or",
        "**refused** (known by name and refused: `option '--wait' is not supported by",
        "tbatch`; every refused option of a script is reported at once, each with its line).",
        "Back-end columns: **yes** (honoured), **partly** (honoured for some values or",
        "settings; refused otherwise) or **no** (refused at admission, naming the option and",
        "the back end: `--qos is not supported by back end 'flux': ...`). No option is",
        "ignored. The details below say how each back end honours each option, or why not.",
        "",
        *_table(rows, tables),
        "",
        "## Per back end",
        "",
    ]
    for name, table in tables:
        lines += _details(name, table, rows)
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":
    print(render(), end="")
