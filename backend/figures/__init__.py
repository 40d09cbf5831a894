"""Figures of the analysis results (plotly), one drawing per picture for every caller.

A layer above :mod:`backend.analysis` (it draws the typed results) and below the services
and the web app (which export or show the figures). :mod:`.correlation` draws the correlate
report: forest plot, paired-test matrix, systems.
"""
