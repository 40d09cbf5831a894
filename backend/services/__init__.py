"""Use-case services: each owns its transaction and returns plain dataclasses.

One module per use case, grouped by the room it belongs to: ``accounts``, ``study_admin``,
``annotation`` (the rater's side), ``quality``, ``transfer`` (import and export), ``scores``
and ``evaluation`` (metrics against radiologists). Shared by all of them, at this level:
``transactions`` (write retries), ``repo`` (lookups on the caller's session), ``jobs`` and
``job_inputs`` (queueing work for the worker).
"""
