"""The Slurm back end's settings (``[backends.NAME] kind = "slurm"``), validated by
:func:`slurm_adapter.backend.create`; docs/slurm.md describes each."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from bridge.plugin_settings import PluginSettings, PositiveFloat
from slurm_adapter.dialects import dialect_for

__all__ = ["SlurmSettings"]


class SlurmSettings(PluginSettings):
    """slurmrestd (``rest_socket`` or ``rest_url``, not both) or the CLI (``use_cli``,
    the default when neither is given). Empty strings mean "not set"."""

    rest_socket: str | None = None
    rest_url: str | None = None
    #: ``auto`` (read the server's OpenAPI document) or a dialect such as ``v0.0.41``.
    rest_version: str | None = None
    #: slurmrestd's JWT key file; without it tokens come from ``scontrol token``.
    jwt_key: str | None = None
    token_lifespan: int = Field(default=3600, gt=0)
    #: Talk to Slurm through its commands; default: when no slurmrestd is configured.
    use_cli: bool | None = None
    default_partition: str | None = None
    request_timeout: PositiveFloat = 10.0
    rest_user: str | None = None
    mpi_launch: str | None = None
    #: A chroot holding the cluster's Slurm commands and configuration.
    client_root: str | None = None
    #: With slurmrestd: tell from ``squeue``'s text which jobs changed and read only
    #: those (:mod:`slurm_adapter.changes`); false: a whole listing at each poll.
    changes_from_squeue: bool = True
    #: Submit a job array as one native Slurm array (docs/slurm.md): slurmrestd must
    #: then run with ``SLURM_BITSTR_LEN=0`` (else its listing cuts pending tasks).
    native_arrays: bool = False
    #: The command a job's ``spec.trainer.image`` runs through, each rank's command
    #: after it, ``{image}`` replaced by the image (e.g. ``["apptainer", "exec",
    #: "docker://{image}"]``); empty: a job that names an image is refused (docs/slurm.md).
    container_command: list[str] = []

    @field_validator("container_command")
    @classmethod
    def _names_the_image(cls, words: list[str]) -> list[str]:
        if words and not any("{image}" in w for w in words):
            raise ValueError("no word holds {image}: the job's image would not be run")
        return words

    @field_validator("rest_version")
    @classmethod
    def _known_version(cls, version: str | None) -> str | None:
        if version and version != "auto":
            dialect_for(version)  # ValueError naming the known ones
        return version

    @model_validator(mode="after")
    def _one_way_in(self) -> SlurmSettings:
        if self.rest_socket and self.rest_url:
            raise ValueError("give rest_socket or rest_url, not both")
        if self.use_cli is False and not (self.rest_socket or self.rest_url):
            raise ValueError("use_cli is false but neither rest_socket nor rest_url is set")
        return self

    @property
    def cli_only(self) -> bool:
        """Whether the back end talks to Slurm through its commands alone."""
        return self.use_cli if self.use_cli is not None else not (
            self.rest_socket or self.rest_url)
