"""Use-case services: each owns its transaction and returns plain dataclasses."""
