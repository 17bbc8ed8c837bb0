"""Process coordination: data parallelism over the caller's process group, lockstep for sharded models, the group's settings."""
