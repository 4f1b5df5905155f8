"""The README's protocol and settings tables are generated from the code, and stay equal to it;
every option the README and docs/*.md name is one a program has."""

from __future__ import annotations

import re
from pathlib import Path

from gridcrawl.protocol import message_table
from gridcrawl.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()

#: Options the docs name that belong to other tools, with the tool.
OTHER_TOOLS = {
    "--port": "tests/docsite.py", "--root": "tests/docsite.py",
    "--grid": "benchmarks/*.py", "--pages": "benchmarks/render.py", "--sitemap": "benchmarks/recrawl.py",
    "--only": "benchmarks/run.py", "--readme": "benchmarks/run.py", "--rounds": "benchmarks/run.py",
    "--queued": "benchmarks/grid_overhead.py",
    "--store": "benchmarks/baselines.py",
    "--system": "useradd", "--home": "useradd", "--now": "systemctl enable",
    "--dist": "pytest-xdist",
    "--proxy-bypass-list": "Chromium", "--webrtc-ip-handling-policy": "Chromium", "--with-deps": "playwright install", "--packages": "spark-submit",
}


def test_readme_protocol_table_matches_the_protocol_module():
    assert message_table() in README


def test_readme_lists_every_setting_with_its_default():
    for name, default, doc in Settings.documented():
        assert f"| `{name}` | `{default!r}` | {doc} |" in README, name


def _program_options() -> set[str]:
    """Every option (``--name``, ``--no-name``, ``--help``) of the four programs and their subcommands."""
    import typer
    from gridcrawl import cli
    from gridcrawl.client import cli as client_cli
    from gridcrawl.executor import cli as executor_cli
    from gridcrawl.manager import cli as manager_cli
    options: set[str] = {"--help"}

    def walk(command) -> None:
        for param in command.params:
            options.update(param.opts + param.secondary_opts)
        for sub in getattr(command, "commands", {}).values():
            walk(sub)
    for module in (cli, manager_cli, executor_cli, client_cli):
        walk(typer.main.get_command(module.app))
    return options


def test_every_option_the_docs_name_exists():
    """An option renamed or removed in the code (or declared for one program less in
    gridcrawl.settings) must not live on in the README or docs/*.md."""
    known = _program_options() | set(OTHER_TOOLS)
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", page.read_text()))
        assert not named - known, (page.name, sorted(named - known))


def _command_options() -> dict[tuple[str, ...], set[str]]:
    """Each command of the four programs (``("gridcrawl", "run")``, ``("gridcrawl-manager",)``,
    ``("gridcrawl-manager", "users", "add")`` ...) with its own options."""
    import typer
    from gridcrawl import cli
    from gridcrawl.client import cli as client_cli
    from gridcrawl.executor import cli as executor_cli
    from gridcrawl.manager import cli as manager_cli
    found: dict[tuple[str, ...], set[str]] = {}

    def walk(path: tuple[str, ...], command) -> None:
        found[path] = {"--help", *(o for p in command.params for o in p.opts + p.secondary_opts)}
        for name, sub in getattr(command, "commands", {}).items():
            walk(path + (name,), sub)
    for program, module in (("gridcrawl", cli), ("gridcrawl-manager", manager_cli),
                            ("gridcrawl-executor", executor_cli), ("gridcrawl-client", client_cli)):
        walk((program,), typer.main.get_command(module.app))
    return found


def test_every_command_line_in_the_docs_takes_its_options():
    """A command line the README or docs/*.md show (in a code span or a code block) gives its
    command only options that command has: ``gridcrawl run --max-in-flight 1`` is refused if
    only ``gridcrawl-client`` has ``--max-in-flight``."""
    commands = _command_options()
    wrong = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        pieces = re.findall(r"```[a-z]*\n(.*?)```", text, re.S) + re.findall(r"(?<!`)`([^`\n]+)`(?!`)", text)
        for piece in pieces:
            for line in piece.replace("\\\n", " ").splitlines():
                for part in re.split(r"\||&&|;|\$\(", line):
                    words = part.split()
                    start = next((i for i, w in enumerate(words) if (w,) in commands), None)
                    if start is None:
                        continue
                    path = (words[start],)
                    for word in words[start + 1:]:
                        if word == "--":  # what follows is not this command's
                            break
                        if path + (word,) in commands:
                            path += (word,)
                            continue
                        option = word.split("=", 1)[0]
                        if (re.fullmatch(r"--[a-z][a-z0-9-]*", option) and option not in commands[path]
                                and option != "--config"):  # read by every command, wherever it stands
                            wrong.append((page.name, " ".join(path), option))
    assert not wrong, sorted(set(wrong))


def test_the_sitemap_bounds_the_docs_give_are_the_codes():
    """docs/realweb.md gives the bounds on a site's sitemap files with their numbers."""
    from gridcrawl.client.store import HOST_SITEMAPS, SITEMAP_FILES_PER_SITE
    realweb = " ".join((ROOT / "docs" / "realweb.md").read_text().split())
    assert f"at most {SITEMAP_FILES_PER_SITE:,} sitemap files per site (`SITEMAP_FILES_PER_SITE`" in realweb
    assert f"at most {HOST_SITEMAPS} of the host's own (`HOST_SITEMAPS`" in realweb
    readme = " ".join(README.split())
    assert f"at most {SITEMAP_FILES_PER_SITE:,} sitemap files a site, {HOST_SITEMAPS} of them its own" in readme


def test_the_docs_say_alike_what_max_pages_per_host_counts():
    """docs/politeness.md said the per-host cap counted a host's URLs "its seeds and sitemap
    files aside", docs/realweb.md that sitemaps "count against the host's max_pages_per_host
    like pages". The code counts every URL but the sitemap files (bounded apart, by
    SITEMAP_FILES_PER_SITE); each place that says what the cap counts says so."""
    from gridcrawl.client.cli import capped_note
    from gridcrawl.client.store import SITEMAP_FILES_PER_SITE
    doc = next(doc for name, _, doc in Settings.documented() if name == "max_pages_per_host")
    assert f"sitemap files not counted (bounded apart: {SITEMAP_FILES_PER_SITE:,} a site)" in doc
    rows = {page: [line for line in (ROOT / page).read_text().splitlines()
                   if line.startswith("| `max_pages_per_host`")] for page in ("docs/politeness.md", "docs/realweb.md")}
    for page, (row,) in rows.items():
        assert "sitemap files not counted" in row, page
    assert "sitemap files not counted" in capped_note(100)
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = " ".join(page.read_text().split())
        assert "Sitemaps, and the URLs they list, count against" not in text, page


def test_the_readme_python_example_crawls_with_items(tmp_path):
    """The README's "From Python" example, run as written against the Python docs (its port
    pointed at the test's nginx), crawls them and stores the modules its item spec finds. It
    loaded a "shop.toml" no newcomer has (a traceback) and crawled the docs with a shop's spec."""
    import json
    import sqlite3
    import subprocess
    import sys

    import pytest
    from docsite import docs_available, serve_python_docs

    if reason := docs_available():
        pytest.skip(reason)
    block = README.split("<!-- python-example -->\n```python\n", 1)[1].split("```", 1)[0]
    seed = "http://127.0.0.1:8088/index.html"
    assert seed in block
    with serve_python_docs() as base:
        out = subprocess.run([sys.executable, "-c", block.replace(seed, f"{base}/index.html")], cwd=tmp_path,
                             capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    # every page, the /sitemap.xml asked for (a 404: no failure), and Debian's missing changelog
    assert re.fullmatch(r"\d{3} pages, 1 failed", out.stdout.strip()), out.stdout
    with sqlite3.connect(tmp_path / "crawl.db") as conn:
        items = [json.loads(fields) for (fields,) in conn.execute("SELECT fields FROM item WHERE type = 'module'")]
    assert len(items) > 200, items
    assert {"name": "os", "summary": "os: Miscellaneous operating system interfaces."} in items
