"""See PIL/__init__.py: a placeholder module."""
from PIL import __getattr__  # noqa: F401
