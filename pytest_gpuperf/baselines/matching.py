"""Baseline keys against the run's test ids: tests that found no entry, entries no test matched.

A baseline key is a pytest node id, relative to pytest's rootdir. When the
rootdir moves (no config file, and ``--gpuperf-baselines /abs/dir`` in its space
form makes pytest take the folder for a test path), every key changes and each
test silently reads "no baseline". So when a file for this hardware holds
entries but tests of the run found none, the run says so, with the rootdir and
the closest keys, and it lists the stale entries: keys that no collected test
matched, of a module that was collected or that no longer exists.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

#: Most stale entries or suggestions printed per file (the rest is counted).
SHOWN = 20


def module_of(node_id: str) -> str:
    """``perf/test_a.py::test_x[cpu]`` -> ``perf/test_a.py``."""
    return node_id.split("::", 1)[0]


@dataclass
class FileMatch:
    """How one baseline file's keys met the run's tests."""

    file: str
    entries: int
    missing: list[str] = field(default_factory=list)
    ran: int = 0
    stale: list[str] = field(default_factory=list)
    closest: dict[str, str] = field(default_factory=dict)

    @property
    def mismatch(self) -> bool:
        """Tests found no entry while the file holds entries that no collected test matched."""
        return bool(self.missing) and bool(self.closest or self.stale)


def match_file(
    file: str,
    keys: Iterable[str],
    ran: Iterable[str],
    missing: Iterable[str],
    collected: set[str],
    rootdir: Path,
    partial: Iterable[str] = (),
) -> FileMatch:
    """Compare one file's ``keys`` with the run: ``ran`` used it, ``missing`` found no entry in it.

    ``partial``: modules the command line named by node id (``test_a.py::test_x``): pytest collected only those
    tests of them, so their other keys are not stale.
    """
    keys = sorted(keys)
    unmatched = [k for k in keys if k not in collected]
    modules = {module_of(n) for n in collected} - set(partial)
    stale = [k for k in unmatched if module_of(k) in modules or not (rootdir / module_of(k)).exists()]
    result = FileMatch(file, len(keys), sorted(set(missing)), len(set(ran)), stale)
    gone = {k for k in unmatched if not (rootdir / module_of(k)).exists()}
    for test in result.missing:
        # Only keys the test could have had: the same id under another rootdir, a key of its own module (a
        # renamed test), or one whose module is gone (a moved file). Keys of modules this run did not select
        # are someone else's: a brand-new test run alone is not a mismatch.
        candidates = [
            k
            for k in unmatched
            if k in gone or module_of(k) == module_of(test) or test.endswith("/" + k) or k.endswith("/" + test)
        ]
        close = closest_key(test, candidates)
        if close:
            result.closest[test] = close
    return result


def closest_key(test: str, keys: list[str]) -> str | None:
    """The key ``test`` most likely had: the same id under another rootdir (one is a path suffix of the
    other), else the most similar id (``difflib``), else the most similar after the last ``/``."""
    suffix = [k for k in keys if test.endswith("/" + k) or k.endswith("/" + test)]
    if suffix:
        return min(suffix, key=lambda k: abs(len(k) - len(test)))
    close = difflib.get_close_matches(test, keys, n=1, cutoff=0.6)
    if close:
        return close[0]
    tails = {k.rsplit("/", 1)[-1]: k for k in keys}
    close = difflib.get_close_matches(test.rsplit("/", 1)[-1], list(tails), n=1, cutoff=0.6)
    return tails[close[0]] if close else None


def partial_modules(args: Iterable[str], invocation_dir: Path, rootdir: Path) -> set[str]:
    """Modules named by node id on the command line (``a/test_x.py::test_y``), as rootdir-relative paths."""
    found = set()
    for arg in args:
        path, sep, _ = str(arg).partition("::")
        if not sep:
            continue
        try:
            found.add((invocation_dir / path).resolve().relative_to(rootdir.resolve()).as_posix())
        except ValueError:
            found.add(Path(path).as_posix())
    return found


def rootdir_hint(args: Iterable[str], has_inifile: bool, rootdir: Path) -> str:
    """Why the rootdir may have moved: ``--gpuperf-baselines DIR`` in its space form with no config file."""
    args = list(args)
    if has_inifile:
        return ""
    for index, arg in enumerate(args[:-1]):
        if arg == "--gpuperf-baselines" and not args[index + 1].startswith("-"):
            return (
                f"pytest found no config file and took the value of `--gpuperf-baselines {args[index + 1]}` for a "
                f"test path, so its rootdir is {rootdir} and every test id changed: write "
                f"`--gpuperf-baselines={args[index + 1]}`, pass --rootdir, or add a pytest.ini"
            )
    return ""


def mismatch_lines(match: FileMatch, rootdir: Path, hint: str) -> list[str]:
    """The loud warning for one file whose entries the run's tests did not find."""
    none = len(match.missing) >= match.ran
    head = (
        f"none of the {match.ran} perf test(s) that used {match.file} matched any of its {match.entries} entries"
        if none
        else f"{len(match.missing)} of {match.ran} perf test(s) found no entry in {match.file} "
        f"({match.entries} entries)"
    )
    lines = [head, f"rootdir (test ids are relative to it): {rootdir}"]
    if hint:
        lines.append(hint)
    if match.closest:
        lines.append("closest keys in the file:")
        for test, key in list(match.closest.items())[:SHOWN]:
            lines.append(f"  {test}  <-  {key}")
        if len(match.closest) > SHOWN:
            lines.append(f"  ... and {len(match.closest) - SHOWN} more")
    return lines


def stale_lines(match: FileMatch) -> list[str]:
    """The stale entries of one file (shown up to :data:`SHOWN`)."""
    lines = [f"{match.file}: {len(match.stale)} entr{'y' if len(match.stale) == 1 else 'ies'} no test matched:"]
    lines += [f"  {key}" for key in match.stale[:SHOWN]]
    if len(match.stale) > SHOWN:
        lines.append(f"  ... and {len(match.stale) - SHOWN} more")
    return lines
