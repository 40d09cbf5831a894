"""RadConcord backend (``radconcord.backend``): importable without Streamlit; loads no model.

Imported as ``radconcord.backend``. ``python -m backend`` in a checkout runs this folder under
its folder name too; that is why this file imports nothing (a second copy of the modules
would load under ``backend.``), and ``__main__`` goes straight to ``backend.cli``.
"""
