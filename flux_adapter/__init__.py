"""Flux as a bridge back end, through flux-python (imported lazily).

Modules: :mod:`flux_adapter.jobspec` (jobspec V1 from a submit request, pure),
:mod:`flux_adapter.resources` (RFC 20 R to hosts and inventory, pure),
:mod:`flux_adapter.events` (RFC 21 events and job-list records to states, pure),
:mod:`flux_adapter.client` (the only code that touches flux-python or runs ``flux``),
:mod:`flux_adapter.backend` (:class:`FluxBackend`, entry point ``create``),
:mod:`flux_adapter.settings` (its settings model).
See docs/flux.md.
"""

from flux_adapter.settings import FluxSettings

__all__ = ["FluxSettings"]
