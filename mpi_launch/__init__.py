"""Hostfiles and rank environments inside an allocation (standard library only).

``mpi_launch`` runs on compute nodes, inside any image: it imports nothing but the
standard library and nothing from the daemon or its adapters (import-linter checks).

- :mod:`mpi_launch.hostlist`: Slurm hostlist expressions, ``expand``/``compress``.
- :mod:`mpi_launch.allocation`: Slurm env, Flux R, JobSet pod, host list → ``Allocation``.
- :mod:`mpi_launch.hostfile`: Open MPI / MPICH / Intel MPI / DeepSpeed hostfiles.
- :mod:`mpi_launch.rankenv`: torch (``PET_*``, ``RANK`` ...), JAX, XGBoost variables and
  the rendezvous port rule.
- :mod:`mpi_launch.plan`: what to exec (``plan_launch``) and how a batch script starts
  ``mpi-launch`` (``launch_invocation``).
- ``python -m mpi_launch`` / ``mpi-launch``: the entry point (:mod:`mpi_launch.__main__`).
- :mod:`mpi_launch.trainer_status`: progress reports to the daemon (Kubeflow Trainer's
  KEP-2779 protocol), from code or ``python -m mpi_launch.trainer_status``;
  :mod:`mpi_launch.trainer_callbacks`: Hugging Face Transformers and PyTorch Lightning
  callbacks built on it (their frameworks imported only when asked for).
"""
