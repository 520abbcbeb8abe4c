"""pytest-gpuperf: hardware-aware performance regression testing for PyTorch code.

This module holds the version and the public, import-light types only; the plugin
itself lives in :mod:`pytest_gpuperf.plugin` and imports torch lazily.
"""

from __future__ import annotations

from pytest_gpuperf.results import Metric, Verdict

__version__ = "0.1.0"

__all__ = ["Metric", "Verdict", "__version__"]
