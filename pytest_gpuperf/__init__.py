"""pytest-gpuperf: hardware-aware performance regression testing for PyTorch code.

This module holds the version and the public, import-light types only; the plugin
itself lives in :mod:`pytest_gpuperf.plugin` and imports torch lazily. The types are
loaded on first access, so importing the package for its plugin costs nothing extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_gpuperf.results import Metric, Verdict

__version__ = "0.1.0"

__all__ = ["Metric", "Verdict", "__version__"]


def __getattr__(name: str) -> Any:
    """Load the public types (``Metric``, ``Verdict``) on first use."""
    if name in ("Metric", "Verdict"):
        from pytest_gpuperf import results

        return getattr(results, name)
    raise AttributeError(f"module 'pytest_gpuperf' has no attribute {name!r}")
