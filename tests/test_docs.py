"""The README's protocol and settings tables are generated from the code, and stay equal to it."""

from __future__ import annotations

from pathlib import Path

from gridcrawl.protocol import message_table
from gridcrawl.settings import Settings

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_readme_protocol_table_matches_the_protocol_module():
    assert message_table() in README


def test_readme_lists_every_setting_with_its_default():
    for name, default, doc in Settings.documented():
        assert f"| `{name}` | `{default!r}` | {doc} |" in README, name
