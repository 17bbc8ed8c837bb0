"""Models held by Ray actors on many machines: the parts the Ray executor of sweeps, builds and the watcher share.

:class:`~flasheval.cluster.executor.RayExecutor` is what a caller passes (``executor=RayExecutor(...)`` or
``executor="ray"``): the cluster's address and the resources of one model. :class:`~flasheval.cluster.pool.ModelPool`
connects to the cluster (every check in one line before any work: ``ray`` installed, the address reachable, a node
with the resources one model needs), starts at most ``max_models`` actors, and serves jobs on them: each actor holds
one model at a time, opened from its spec once, and a job runs on the actor that holds its model (or on a free one,
which unloads its model and opens the job's). Results come back to the driver; actors never write a store.
An actor or node that dies has its job served again on another actor (``max_retries``, then one line naming the
model and the cause). ``ray`` is imported here only when a pool is made (the optional ``ray`` extra).
"""
