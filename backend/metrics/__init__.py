"""Metric families behind one keyword-only contract (see ``base.py``) and a lazy registry."""
