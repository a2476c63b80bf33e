"""``tbatch``: sbatch's command line and ``#SBATCH`` lines, turned into a TrainJob.

The package re-exports the names other code uses; each concept lives in one module:

* :mod:`~bridge.sbatch.errors`: :class:`SbatchError`, the one error for user input;
* :mod:`~bridge.sbatch.request`: the typed results (:class:`BatchOptions`,
  :class:`BatchRequest`, ...);
* :mod:`~bridge.sbatch.values`: converters from an option's text to its values
  (counts, node ranges, sizes, times, ``--export``);
* :mod:`~bridge.sbatch.options`: the option table (:data:`OPTIONS`) and ``--help``;
* :mod:`~bridge.sbatch.cmdline`: the getopt_long work-alike and :func:`parse_command_line`;
* :mod:`~bridge.sbatch.script`: sbatch's checks on a script, its ``#SBATCH`` lines,
  ``--wrap``;
* :mod:`~bridge.sbatch.parse`: :func:`parse_tbatch`, command line over ``#SBATCH`` lines;
* :mod:`~bridge.sbatch.environment`: the environment ``--export`` gives the job;
* :mod:`~bridge.sbatch.inputenv`: sbatch's input environment variables (``SBATCH_*``);
* :mod:`~bridge.sbatch.scheduling`: the scheduling-options annotation;
* :mod:`~bridge.sbatch.trainjob`: :func:`to_trainjob` and :func:`trainjob_from_file`;
* :mod:`~bridge.sbatch.locate`: what ``tbatch`` itself reads of its command line (the
  script or ``-f`` file to send), standard library only;
* :mod:`~bridge.sbatch.submission`: ``tbatch``'s request as the daemon receives it,
  turned into the TrainJob there.

The names below are imported from their module when first used, so that importing one
light module (:mod:`~bridge.sbatch.locate`) does not load the parser and the model.

Contract:

* :func:`read_directives` checks the script the way sbatch does (``#!`` first line, no
  NUL, no DOS line breaks, not empty) and returns the ``#SBATCH`` lines of the leading
  comment block as ``[(lineno, argv)]``.
* :func:`parse_tbatch` returns a frozen :class:`BatchRequest`; command-line options win
  over sbatch's ``SBATCH_*`` input variables (:mod:`~bridge.sbatch.inputenv`), which win
  over ``#SBATCH`` lines. Long options are matched exactly; unique prefixes are refused
  (with a hint); sbatch options the bridge does not support are refused by name, all of
  them in one error (each with its ``file:line``, or ``command line``). Options only Slurm
  honours (:mod:`bridge.slurm_options`) are read, checked as sbatch checks them, and
  passed on in the scheduling annotation. A script's bytes that are not UTF-8 are kept
  (lone surrogates), except in ``#SBATCH`` lines.
* :func:`to_trainjob` builds the TrainJob; :func:`trainjob_from_file` loads ``-f`` files.
* Every user error is a :class:`SbatchError` whose ``str()`` reads like sbatch
  (``tbatch: error: job.sh:3: unrecognized option '--foo'``); nothing else is raised for
  any input. Strings (quotes, ``$(...)``, backticks, unicode) are data, never interpreted.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs tbatch ~2 ms of start-up (bridge.client_types)

if TYPE_CHECKING:
    from typing import Any

    from bridge.sbatch.cmdline import parse_command_line as parse_command_line
    from bridge.sbatch.environment import NEVER_EXPORTED as NEVER_EXPORTED
    from bridge.sbatch.environment import exported_environment as exported_environment
    from bridge.sbatch.errors import SbatchError as SbatchError
    from bridge.sbatch.locate import MAX_SCRIPT_BYTES as MAX_SCRIPT_BYTES
    from bridge.sbatch.options import OPTIONS as OPTIONS
    from bridge.sbatch.options import OptionSpec as OptionSpec
    from bridge.sbatch.options import help_text as help_text
    from bridge.sbatch.parse import parse_tbatch as parse_tbatch
    from bridge.sbatch.request import DEFAULT_RUNTIME as DEFAULT_RUNTIME
    from bridge.sbatch.request import BatchOptions as BatchOptions
    from bridge.sbatch.request import BatchRequest as BatchRequest
    from bridge.sbatch.request import CommandLine as CommandLine
    from bridge.sbatch.request import ExportSpec as ExportSpec
    from bridge.sbatch.scheduling import default_job_name as default_job_name
    from bridge.sbatch.script import check_script as check_script
    from bridge.sbatch.script import read_directives as read_directives
    from bridge.sbatch.script import wrap_script as wrap_script
    from bridge.sbatch.submission import trainjob_of_submission as trainjob_of_submission
    from bridge.sbatch.trainjob import ANN_GPU_TYPE as ANN_GPU_TYPE
    from bridge.sbatch.trainjob import to_trainjob as to_trainjob
    from bridge.sbatch.trainjob import trainjob_from_file as trainjob_from_file

#: Public name -> the module that defines it (imported when the name is first asked for:
#: ``tbatch`` imports :mod:`bridge.sbatch.locate` without the model and pydantic).
_EXPORTS = {
    "ANN_GPU_TYPE": "trainjob",
    "DEFAULT_RUNTIME": "request",
    "MAX_SCRIPT_BYTES": "locate",
    "NEVER_EXPORTED": "environment",
    "OPTIONS": "options",
    "BatchOptions": "request",
    "BatchRequest": "request",
    "CommandLine": "request",
    "ExportSpec": "request",
    "OptionSpec": "options",
    "SbatchError": "errors",
    "check_script": "script",
    "default_job_name": "scheduling",
    "exported_environment": "environment",
    "help_text": "options",
    "parse_command_line": "cmdline",
    "parse_tbatch": "parse",
    "read_directives": "script",
    "to_trainjob": "trainjob",
    "trainjob_from_file": "trainjob",
    "trainjob_of_submission": "submission",
    "wrap_script": "script",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import a public name's module when the name is first asked for (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # __import__, not importlib.import_module: importing importlib costs tbatch ~0.4 ms.
    value = getattr(__import__(f"{__name__}.{module}", fromlist=[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
