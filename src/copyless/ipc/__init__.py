"""ipc layer."""
