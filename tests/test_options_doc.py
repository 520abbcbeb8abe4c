"""``docs/options.md`` is generated from the option tables, so it lists every flag and ini key with its default.

Regenerate it after changing an option: ``GPUPERF_WRITE_OPTIONS_DOC=1 pytest tests/test_options_doc.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.settings import SECTIONS, Option, accepted_range, metavar, registered_options

DOC = Path(__file__).resolve().parent.parent / "docs" / "options.md"
WRITE_ENV = "GPUPERF_WRITE_OPTIONS_DOC"

HEADER = """\
# Options

<!-- Generated from the option tables (pytest_gpuperf/plugin.py and each feature's plugin.py) by
     tests/test_options_doc.py; regenerate: GPUPERF_WRITE_OPTIONS_DOC=1 pytest tests/test_options_doc.py -->

pytest-gpuperf has a few command-line flags, for what you choose per run: measure or record, on which backends,
how strictly, which reports, against which ref, what to profile. Every other setting is an ini key: set it once for
the project, or for one run with `-o`:

```toml
# pyproject.toml
[tool.pytest.ini_options]
gpuperf_max_time = 1.0
gpuperf_cpu_time_tolerance = 0.3
```

```ini
# pytest.ini (or the [pytest] section of tox.ini, [tool:pytest] of setup.cfg)
[pytest]
gpuperf_max_time = 1.0
```

```bash
pytest --gpuperf -o gpuperf_max_time=0.5 -o gpuperf_no_confirm=true
```

A value on the command line (a flag, or `-o key=value`) wins over the ini file. A bad value is a usage error at
start-up that names the key and the accepted values. Numbers are finite and at least 0 unless the table says
otherwise; a boolean key takes `true`/`false` (also `1`/`0`, `yes`/`no`). `pytest --help` lists the flags, and the
ini keys under `[pytest] ini-options`.

Per-test settings (tolerances, budget, expected bound class) go in the `@pytest.mark.gpuperf(...)` marker
instead: see the README.
"""

RETIRED = """\
## Retired flags

Until the next release, every ini key above also parses as the flag it used to be (`gpuperf_max_time` as
`--gpuperf-max-time 0.5`, `gpuperf_no_confirm` as `--gpuperf-no-confirm`), hidden from `--help`; its value still
takes effect, and pytest shows a `PytestDeprecationWarning` naming the ini key to use. `--gpuperf-no-reference`,
which had no effect, is gone.
"""


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|")


def _default(option: Option) -> str:
    if option.kind == "bool":
        return "`true`" if option.default else "`false`"
    return f"`{option.default}`" if option.default not in (None, "") else "(none)"


def _value(option: Option) -> str:
    """The values an option takes, as the docs show them."""
    choices = option.extras.get("choices")
    if choices:
        return " / ".join(f"`{c}`" for c in choices)
    if option.kind == "bool":
        return "boolean"
    if option.kind in ("int", "float"):
        number = "integer" if option.kind == "int" else "number"
        return f"{number} {accepted_range(option.extras)}"
    return _cell(f"`{metavar(option)}`")


def _meaning(option: Option) -> str:
    aliases = [a.lstrip("-").replace("-", "_") for a in option.extras.get("aliases", ())]
    old = f" (old spelling: {', '.join(f'`{a}`' for a in aliases)})" if aliases else ""
    return _cell(option.help + old)


def render(options: list[Option]) -> str:
    """docs/options.md for ``options``: the flags, then the ini keys by section (in ``SECTIONS`` order)."""
    lines = [HEADER, "## Command-line flags", "", "Each flag has an ini twin of the same name with underscores.", ""]
    lines += ["| Flag | Ini key | Default | Value | Meaning |", "| --- | --- | --- | --- | --- |"]
    for o in options:
        if o.flag:
            lines.append(f"| `{o.flag}` | `{o.name}` | {_default(o)} | {_value(o)} | {_meaning(o)} |")
    lines += ["", "## Ini keys", ""]
    for section in SECTIONS:
        keys = [o for o in options if not o.flag and o.section == section]
        if not keys:
            continue
        lines += [f"### {section[0].upper()}{section[1:]}", "", "| Ini key | Default | Value | Meaning |"]
        lines.append("| --- | --- | --- | --- |")
        lines += [f"| `{o.name}` | {_default(o)} | {_value(o)} | {_meaning(o)} |" for o in keys]
        lines.append("")
    lines.append(RETIRED)
    return "\n".join(lines)


@pytest.fixture
def options(pytestconfig: pytest.Config) -> list[Option]:
    """Every option this run registered (the plugin and its feature plugins are loaded in the outer run)."""
    found = registered_options()
    assert any(o.name == "gpuperf_max_time" for o in found), "pytest-gpuperf is not loaded in this run"
    return found


def test_every_ini_key_has_a_known_section(options: list[Option]) -> None:
    unknown = [o.name for o in options if not o.flag and o.section not in SECTIONS]
    assert not unknown, f"give these options a section from settings.SECTIONS: {unknown}"


def test_docs_options_md_lists_every_flag_and_ini_key_as_generated(options: list[Option]) -> None:
    expected = render(options)
    if os.environ.get(WRITE_ENV):
        DOC.write_text(expected)
    text = DOC.read_text()
    missing = [o.name for o in options if f"`{o.name}`" not in text]
    assert not missing, f"docs/options.md lacks {missing}; regenerate it: {WRITE_ENV}=1 pytest {__file__}"
    assert text == expected, f"docs/options.md is out of date; regenerate it: {WRITE_ENV}=1 pytest {__file__}"


def test_at_most_12_flags(options: list[Option]) -> None:
    flags = [o.flag for o in options if o.flag]
    assert len(flags) <= 12, flags
