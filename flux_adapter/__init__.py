"""Flux back end (flux-python). Not built yet: see the Flux issue."""
