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
* :mod:`~bridge.sbatch.trainjob`: :func:`to_trainjob` and :func:`trainjob_from_file`.

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

from bridge.sbatch.cmdline import parse_command_line
from bridge.sbatch.environment import NEVER_EXPORTED, exported_environment
from bridge.sbatch.errors import SbatchError
from bridge.sbatch.options import OPTIONS, OptionSpec, help_text
from bridge.sbatch.parse import parse_tbatch
from bridge.sbatch.request import (
    DEFAULT_RUNTIME,
    BatchOptions,
    BatchRequest,
    CommandLine,
    ExportSpec,
)
from bridge.sbatch.scheduling import default_job_name
from bridge.sbatch.script import MAX_SCRIPT_BYTES, check_script, read_directives, wrap_script
from bridge.sbatch.trainjob import ANN_GPU_TYPE, to_trainjob, trainjob_from_file

__all__ = [
    "ANN_GPU_TYPE",
    "DEFAULT_RUNTIME",
    "MAX_SCRIPT_BYTES",
    "NEVER_EXPORTED",
    "OPTIONS",
    "BatchOptions",
    "BatchRequest",
    "CommandLine",
    "ExportSpec",
    "OptionSpec",
    "SbatchError",
    "check_script",
    "default_job_name",
    "exported_environment",
    "help_text",
    "parse_command_line",
    "parse_tbatch",
    "read_directives",
    "to_trainjob",
    "trainjob_from_file",
    "wrap_script",
]
