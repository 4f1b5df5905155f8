"""The recrawl measurement of issue 19: what a recrawl of the Python documentation costs against
the first crawl, with nginx answering the conditional requests.

This module owns one command, ``python benchmarks/recrawl.py [--executors 4] [--port P]``:

1. copy Debian's ``python3-doc`` HTML (``/usr/share/doc/python3-doc/html``) to a temporary
   folder and serve the copy with nginx on 127.0.0.1 (``tests/docsite.py``), its access log
   kept: nginx logs the status and the body bytes of every response;
2. ``gridcrawl run`` the docs (the first crawl);
3. change the copy: touch ``--touch`` files (new mtime, so a new ETag and Last-Modified, same
   bytes), append a comment to ``--edit`` files, delete ``--delete`` files (chosen by a fixed
   rule from the sorted file list, so every run changes the same files);
4. ``gridcrawl run --recrawl-all`` (every document, conditional requests);
5. ``gridcrawl run --recrawl-all`` again with nothing changed.

For each run it prints, from nginx's access log: requests, 200s, 304s, 404s and body bytes
sent; the crawl seconds (first grid thread submitted to last finished, from the manager
database's ``thread`` table) and the wall seconds of the whole ``gridcrawl run`` command
(process start-up and shut-down included); and, from the crawl database, the recrawl's counts
(table ``recrawl``). The same table goes to
``benchmarks/results/<date>-recrawl.md``. Nothing outside 127.0.0.0/8 is contacted; these are
measurements, not tests.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import pathlib
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))

from docsite import DOCS_ROOT, docs_available, serve_python_docs  # noqa: E402

_LINE = re.compile(r'"[A-Z]+ \S+ [^"]*" (\d{3}) (\d+)')


def log_figures(path: pathlib.Path, start: int) -> tuple[dict, int]:
    """Requests, statuses and body bytes of nginx's combined access log ``path`` from line
    ``start`` on; returns them and the line count."""
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    figures = {"requests": 0, "200": 0, "304": 0, "404": 0, "body bytes": 0}
    for line in lines[start:]:
        match = _LINE.search(line)
        if match is None:
            continue
        figures["requests"] += 1
        if match.group(1) in figures:
            figures[match.group(1)] += 1
        figures["body bytes"] += int(match.group(2))
    return figures, len(lines)


def crawl_seconds(manager_db: pathlib.Path, since: dt.datetime) -> float:
    """Seconds from the first grid thread submitted at or after ``since`` (naive UTC) to the
    last one finished, from the manager database's ``thread`` table."""
    with sqlite3.connect(manager_db) as conn:
        first, last = conn.execute(
            "SELECT (julianday(MIN(time_submitted))), (julianday(MAX(time_finished))) FROM thread "
            "WHERE time_submitted >= ?", (since.isoformat(sep=" "),)).fetchone()
    return (last - first) * 86400 if first is not None and last is not None else float("nan")


def change_site(root: pathlib.Path, touch: int, edit: int, delete: int) -> dict:
    """Touch every 10th HTML file (at most ``touch``), append a comment to every 50th from the
    6th (at most ``edit``), delete every 200th from the 8th (at most ``delete``); returns the
    counts done."""
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*.html"))
    touched, edited = files[1::10][:touch], files[5::50][:edit]
    deleted = [f for f in files[7::200] if f not in touched and f not in edited][:delete]
    later = time.time() + 5
    for name in touched:
        os.utime(root / name, (later, later))
    for name in edited:
        with open(root / name, "a", encoding="utf-8") as fh:
            fh.write("\n<!-- edited for the gridcrawl recrawl measurement -->\n")
    for name in deleted:
        (root / name).unlink()
    return {"touched": len(touched), "edited": len(edited), "deleted": len(deleted)}


def run(command: list[str]) -> float:
    """Run ``command``; return its wall seconds. Exits if it fails."""
    started = time.monotonic()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    """Run the measurement and print its table; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executors", type=int, default=4)
    parser.add_argument("--port", type=int, default=None, help="nginx's port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--touch", type=int, default=50)
    parser.add_argument("--edit", type=int, default=10)
    parser.add_argument("--delete", type=int, default=3)
    parser.add_argument("--out-dir", default=str(pathlib.Path(__file__).resolve().parent / "results"))
    args = parser.parse_args(argv)
    why = docs_available()
    if why:
        print(f"skipped: {why}", file=sys.stderr)
        return 0
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="gridcrawl-recrawl-"))
    try:
        root = tmp / "html"
        shutil.copytree(os.path.realpath(DOCS_ROOT), root, symlinks=False)
        access = tmp / "access.log"
        workdir = tmp / "run"
        rows = []
        with serve_python_docs(args.port, root=str(root), access_log=str(access)) as base:
            gridcrawl = [sys.executable, "-m", "gridcrawl", "run", "--executors", str(args.executors),
                         "--workdir", str(workdir), "--no-progress"]
            offset = 0
            changes = {}
            for name, extra in (("first crawl", [f"{base}/index.html"]), ("recrawl after changes", ["--recrawl-all"]),
                                ("recrawl, nothing changed", ["--recrawl-all"])):
                if name == "recrawl after changes":
                    changes = change_site(root, args.touch, args.edit, args.delete)
                began = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
                seconds = run(gridcrawl + extra)
                time.sleep(0.5)  # nginx writes its log line after the response
                figures, offset = log_figures(access, offset)
                rows.append((name, seconds, figures, crawl_seconds(workdir / "manager.db", began)))
        with sqlite3.connect(workdir / "crawl.db") as conn:
            recrawls = conn.execute("SELECT due, fetched, not_modified, unchanged, changed, gone, new "
                                    "FROM recrawl ORDER BY recrawl_id").fetchall()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    head = ("| run | requests | 200 | 304 | 404 | body bytes | crawl s | wall s | due | fetched | 304 | "
            "unchanged | changed | gone | new |")
    table = [head, "|" + "---|" * 15]
    for i, (name, seconds, f, crawl) in enumerate(rows):
        counts = recrawls[i - 1] if i and i - 1 < len(recrawls) else None
        recrawl = " | ".join(str(c) for c in counts[:7]) if counts else " | ".join(["-"] * 7)
        table.append(f"| {name} | {f['requests']} | {f['200']} | {f['304']} | {f['404']} | {f['body bytes']:,} | "
                     f"{crawl:.2f} | {seconds:.2f} | {recrawl} |")
    text = "\n".join(table)
    print(text)
    print(f"changes between the first crawl and the recrawl: {changes}")
    out = pathlib.Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{dt.date.today():%Y-%m-%d}-recrawl.md"
    path.write_text(f"# Recrawl of the Python documentation, {dt.datetime.now():%Y-%m-%d %H:%M}\n\n"
                    f"Command: `python benchmarks/recrawl.py {' '.join(argv or sys.argv[1:])}`; nginx serving a copy "
                    f"of python3-doc; changes: {changes}. requests/200/304/404/body bytes from nginx's access log "
                    f"(robots.txt included); crawl s: first grid thread submitted to last finished (manager "
                    f"database); wall s: the whole `gridcrawl run` command.\n\n{text}\n")
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
