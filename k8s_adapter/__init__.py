"""Kubernetes back end (JobSet) and TrainJob CR front door. Not built yet: see the Kubernetes issue."""
