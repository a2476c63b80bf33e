"""Kubernetes on Slurm-backed nodes: one Slurm allocation per JobSet (docs/kubernetes.md
"Kubernetes on Slurm-backed nodes").

The back end ``k8s-on-slurm`` composes the two others: a TrainJob's whole shape is
first allocated by Slurm as one *holder* job (the job's owner, its key, its account),
and only once Slurm starts it do the job's JobSet pods run, pinned to exactly the
allocated nodes. ``holder`` (the holder's script and what the two worlds' states mean
together), ``pinning`` (the JobSet's changes: suspended, tolerating the pool, one pod
per node, the allocation's node label), ``nodemap`` (Slurm node names to Kubernetes
node names), ``settings``, ``backend``.
"""
