"""Flux back end through flux-python (the Flux issue)."""
