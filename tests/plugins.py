"""The test extractor plugin (tests/plugin_pkg) made visible to one process only: an
entry-point metadata directory (``*.dist-info`` with ``entry_points.txt``) put on that process's
``sys.path`` through ``PYTHONPATH``, as an installed package's metadata would be."""

from __future__ import annotations

import os
import sys
from pathlib import Path

PLUGIN_SOURCE = Path(__file__).parent / "plugin_pkg"
PLUGIN_NAME = "testshop"
PLUGIN_VERSION = "1.2"


def write_plugin_metadata(folder: Path) -> Path:
    """Write ``gridcrawl_testplugin-1.2.dist-info`` (METADATA, entry_points.txt registering
    ``testshop = gridcrawl_testplugin:extract`` in ``gridcrawl.extractors``) into ``folder``;
    return ``folder``."""
    info = Path(folder) / f"gridcrawl_testplugin-{PLUGIN_VERSION}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: gridcrawl-testplugin\nVersion: {PLUGIN_VERSION}\n")
    (info / "entry_points.txt").write_text(f"[gridcrawl.extractors]\n{PLUGIN_NAME} = gridcrawl_testplugin:extract\n")
    return Path(folder)


def plugin_env(folder: Path) -> dict:
    """Environment variables giving a child process the plugin (metadata in ``folder``)."""
    paths = [str(write_plugin_metadata(folder)), str(PLUGIN_SOURCE)]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    return {"PYTHONPATH": os.pathsep.join(paths)}


def install_in_this_process(folder: Path) -> None:
    """Put the plugin on this process's ``sys.path`` (the caller removes it again)."""
    sys.path[:0] = [str(write_plugin_metadata(folder)), str(PLUGIN_SOURCE)]
