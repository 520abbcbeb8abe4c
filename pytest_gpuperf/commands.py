"""The commands that messages recommend, spelled in one place.

Every message that tells the user what to run (record a new test, accept an intended slowdown, replace a baseline
that cannot decide) builds its command here, so each names flags that exist and do what the message says;
``tests/test_suggested_commands.py`` runs them.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable

#: ``--gpuperf-update`` writes a slower time/throughput entry only with this flag (or ``gpuperf_update_all``).
ACCEPT_SLOWER = "--gpuperf-accept-slower"


def update_command(node_ids: Iterable[str], *, accept_slower: bool = False, processes: int | None = None) -> str:
    """``pytest --gpuperf --gpuperf-update [--gpuperf-accept-slower] [-o gpuperf_processes=N] 'id' ...``."""
    parts = ["pytest", "--gpuperf", "--gpuperf-update"]
    if accept_slower:
        parts.append(ACCEPT_SLOWER)
    if processes:
        parts += ["-o", f"gpuperf_processes={processes}"]
    return " ".join([*parts, *(shlex.quote(node_id) for node_id in dict.fromkeys(node_ids))])
