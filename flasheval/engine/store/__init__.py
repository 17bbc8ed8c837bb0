"""The results store: the crash-safe store and caching wrapper, its shards, its journal, adoption of old keys."""
