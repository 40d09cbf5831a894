"""RadConcord backend: importable without Streamlit; importing it loads no model."""

from backend.config import APP_VERSION as __version__

__all__ = ["__version__"]
