"""Which backends a test runs on: its marker, ``--gpuperf-backend`` and what is available.

* ``@pytest.mark.gpuperf_backends("cuda", "vulkan")`` declares what a test supports;
  unmarked tests that use ``gpuperf`` support every torch backend (cuda, mps, cpu).
* ``--gpuperf-backend`` narrows the selection; by default every available backend is used.
* A declared-but-absent backend becomes a skipped test instance whose reason says what
  was found; an unmarked test simply has no instance for an absent backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Availability

TORCH_BACKENDS = ("cuda", "mps", "cpu")

_availability: dict[str, Availability] = {}


def availability(name: str) -> Availability:
    """Availability of backend ``name``, checked once per process."""
    if name not in _availability:
        from pytest_gpuperf.backends import get_backend
        from pytest_gpuperf.backends.base import Availability

        try:
            _availability[name] = get_backend(name).availability()
        except Exception as exc:  # noqa: BLE001 - a broken backend must not break collection
            _availability[name] = Availability(False, f"{name} backend failed to load: {type(exc).__name__}: {exc}")
    return _availability[name]


def forget_availability(name: str) -> None:
    """Drop the cached availability of ``name`` (after its device selection changed)."""
    _availability.pop(name, None)


def backend_first_id(node_id: str, backend: str) -> str | None:
    """The id pytest-gpuperf < 0.2 gave a parametrized test (backend first: ``test_x[cpu-64]``), from
    today's (backend last: ``test_x[64-cpu]``); None when the id has no other parameter.

    Baselines recorded before the change are still found under their old keys.
    """
    suffix = f"-{backend}]"
    if not node_id.endswith(suffix) or "[" not in node_id:
        return None
    head, _, params = node_id[: -len(suffix)].partition("[")
    return f"{head}[{backend}-{params}]" if params else None


@dataclass(frozen=True)
class BackendParam:
    """One test instance: the backend name and, when it cannot run, why."""

    name: str
    skip_reason: str | None = None


def plan_backends(declared: tuple[str, ...] | None, selected: list[str]) -> list[BackendParam]:
    """The instances of one test given its declared backends and the command-line selection."""
    explicit = declared is not None
    candidates = list(declared) if explicit else list(TORCH_BACKENDS)
    if selected:
        chosen = [name for name in candidates if name in selected]
        if not chosen:
            wanted = ", ".join(selected)
            return [
                BackendParam(
                    candidates[0], f"test supports {', '.join(candidates)}; --gpuperf-backend selected {wanted}"
                )
            ]
    else:
        chosen = candidates
    params = []
    for name in chosen:
        found = availability(name)
        if found.available:
            params.append(BackendParam(name))
        elif explicit or selected:
            params.append(BackendParam(name, f"{name} backend not available: {found.reason}"))
    if not params:
        reasons = "; ".join(f"{n}: {availability(n).reason}" for n in chosen)
        params.append(BackendParam(chosen[0], f"no backend available for this test ({reasons})"))
    return params
