"""Hostfiles for each MPI (pure functions returning text) and the variables that name them.

==============  ==========================  ============================================
flavour         line per host               variables pointing at the file
==============  ==========================  ============================================
``openmpi``     ``host slots=N``            ``OMPI_MCA_orte_default_hostfile`` (Open MPI
                                            4, ORTE) and ``PRTE_MCA_prte_default_hostfile``
                                            (Open MPI 5, PRRTE)
``mpich``       ``host:N``                  ``HYDRA_HOST_FILE``
``intel``       ``host`` (+ ``-ppn N``)     ``I_MPI_HYDRA_HOST_FILE`` and ``I_MPI_PERHOST``;
                ``host:N`` when counts      none (passed as ``-machinefile``)
                differ
``deepspeed``   ``host slots=N``            none (``deepspeed --hostfile``)
==============  ==========================  ============================================

Open MPI drops the domain of host names unless told to keep it, so for names with a dot
(JobSet pod DNS names) ``OMPI_MCA_orte_keep_fqdn_hostnames`` and
``PRTE_MCA_prte_keep_fqdn_hostnames`` are set too, as Kubeflow Trainer does.
"""

from __future__ import annotations

from collections.abc import Sequence

from mpi_launch.allocation import Host

__all__ = [
    "FLAVOURS",
    "deepspeed_hostfile",
    "hostfile_env",
    "intel_hostfile",
    "mpich_hostfile",
    "openmpi_hostfile",
    "render_hostfile",
    "uniform_slots",
]

FLAVOURS = ("openmpi", "mpich", "intel", "deepspeed")


def uniform_slots(hosts: Sequence[Host]) -> int | None:
    """The slot count every host shares, or None."""
    counts = {h.slots for h in hosts}
    return counts.pop() if len(counts) == 1 else None


def openmpi_hostfile(hosts: Sequence[Host]) -> str:
    """Open MPI: ``host slots=N`` per line."""
    return "".join(f"{h.name} slots={h.slots}\n" for h in hosts)


def mpich_hostfile(hosts: Sequence[Host]) -> str:
    """MPICH Hydra (``mpiexec -f``): ``host:N`` per line."""
    return "".join(f"{h.name}:{h.slots}\n" for h in hosts)


def intel_hostfile(hosts: Sequence[Host]) -> str:
    """Intel MPI: one host per line when all hosts take the same count (given with
    ``-ppn``/``I_MPI_PERHOST``), else a ``host:N`` machine file (``-machinefile``)."""
    if uniform_slots(hosts) is None:
        return mpich_hostfile(hosts)
    return "".join(f"{h.name}\n" for h in hosts)


def deepspeed_hostfile(hosts: Sequence[Host]) -> str:
    """DeepSpeed (``deepspeed --hostfile``): ``host slots=N`` per line."""
    return openmpi_hostfile(hosts)


def render_hostfile(flavour: str, hosts: Sequence[Host]) -> str:
    """The hostfile text of ``flavour`` (one of :data:`FLAVOURS`)."""
    renderers = {"openmpi": openmpi_hostfile, "mpich": mpich_hostfile,
                 "intel": intel_hostfile, "deepspeed": deepspeed_hostfile}
    if flavour not in renderers:
        raise ValueError(f"unknown hostfile flavour {flavour!r}; one of {', '.join(FLAVOURS)}")
    return renderers[flavour](hosts)


def hostfile_env(flavour: str, path: str, hosts: Sequence[Host]) -> dict[str, str]:
    """The variables through which ``flavour``'s launcher finds the hostfile at ``path``."""
    if flavour == "openmpi":
        env = {"OMPI_MCA_orte_default_hostfile": path, "PRTE_MCA_prte_default_hostfile": path}
        if any("." in h.name for h in hosts):
            env["OMPI_MCA_orte_keep_fqdn_hostnames"] = "true"
            env["PRTE_MCA_prte_keep_fqdn_hostnames"] = "true"
        return env
    if flavour == "mpich":
        return {"HYDRA_HOST_FILE": path}
    if flavour == "intel":
        per_host = uniform_slots(hosts)
        if per_host is None:
            return {}
        return {"I_MPI_HYDRA_HOST_FILE": path, "I_MPI_PERHOST": str(per_host)}
    if flavour == "deepspeed":
        return {}
    raise ValueError(f"unknown hostfile flavour {flavour!r}; one of {', '.join(FLAVOURS)}")
