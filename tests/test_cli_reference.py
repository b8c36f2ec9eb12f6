"""docs/cli.md, the command line reference, lists every command, every option and every example of the real
``--help`` texts (regenerate it with ``python -m hub_export.cli._reference > docs/cli.md``)."""

from __future__ import annotations

import re
from pathlib import Path

from hub_export.cli._reference import commands, reference_markdown
from hub_export.cli.main import build_parser

PAGE = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## `([^`]+)`$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def test_the_reference_lists_every_command_option_and_example():
    sections = _sections(PAGE.read_text(encoding="utf-8"))
    parsers = {name: parser for name, parser in commands(build_parser()) if name != "hub-export"}
    assert list(sections) == list(parsers)  # no command missing, none that no longer exists
    for name, parser in parsers.items():
        section = sections[name]
        for action in parser._actions:
            for option in action.option_strings:
                assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", section), (name, option)
            if not action.option_strings and action.metavar:
                assert action.metavar in section, (name, action.metavar)
        for line in parser.epilog.splitlines()[1:]:
            assert line in section, (name, line)


def test_the_generator_writes_the_same_commands():
    assert list(_sections(reference_markdown())) == list(_sections(PAGE.read_text(encoding="utf-8")))
