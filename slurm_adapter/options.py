"""What the Slurm back end does with each scheduling option (:mod:`bridge.option_support`).

Slurm honours every option: each becomes the sbatch option of the same name (or the
field of slurmrestd's job description), except the few the bridge itself applies
(``--dependency``, ``--hold``, ``--export``) so that they mean the same on every back
end (a dependency naming only jobs already in the same Slurm goes to Slurm with Slurm's
ids: bridge/engine_dependency.py). Contract: :data:`SUPPORT` covers every field of
:class:`bridge.scheduling.SchedulingOptions`; published as the ``slurm`` entry point of
``hpc_bridge.option_support``.
"""

from __future__ import annotations

from collections.abc import Mapping

from bridge.option_support import FIELD_FLAGS, Support, honoured

__all__ = ["SUPPORT"]

_BRIDGE = {
    "array": "one bridge job (one Slurm job) per task, throttled by the bridge "
             "(bridge/arrays.py); with native_arrays = true one native Slurm array, "
             "throttled by Slurm, each task still a bridge job "
             "(bridge/engine_native_array.py)",
    "dependency": "--dependency with Slurm's ids when it names only jobs of the same "
                  "cluster already in Slurm; else held by the bridge until met, across back "
                  "ends (bridge/engine_dependency.py)",
    "kill_on_invalid_dep": "--kill-on-invalid-dep with a dependency handed to Slurm; else the "
                           "bridge ends the job when its dependency can never be met",
    "hold": "held by the bridge (spec.suspend) until `tcontrol release`",
    "export": "applied by tbatch to the job's environment",
    "job_name": "--job-name (the bridge's uid goes in --comment, not in the name)",
    "comment": "--comment, after the bridge's key (hpc-bridge:<uid> <yours>)",
    "output": "--output, with %j %J %A as the bridge's job id (the rest as sbatch)",
    "error": "--error, with %j %J %A as the bridge's job id (the rest as sbatch)",
    "chdir": "--chdir (default: the directory tbatch ran in)",
    "max_nodes": "--nodes=MIN-MAX",
    "requeue": "--requeue / --no-requeue",
    "switches_wait_minutes": "--switches=N@TIME (the bridge also waits up to TIME for a "
                             "placement within N switches)",
}

#: Field -> how Slurm honours it.
SUPPORT: Mapping[str, Support] = {
    **{name: honoured(_BRIDGE.get(name) or f"{flag} (as sbatch)")
       for name, flag in FIELD_FLAGS.items()},
    "submit_dir": honoured("the working directory when --chdir is not given, as sbatch"),
    "submit_path": honoured("the job's PATH when its trainer sets none (tbatch -f), as "
                            "sbatch exports it"),
}
