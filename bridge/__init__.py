"""hpc-bridge daemon core: model, runtimes, store, engine, API, CLI (no back-end SDKs)."""
