"""Scoring runner, score cache and worker process."""
