"""Kubernetes back end (JobSet) and TrainJob CR front door (the Kubernetes issue)."""
