"""The Hugging Face backend: loading, forward passes, device maps, numerics and model identity (torch imported lazily)."""
