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

With ``--sitemap`` the copy also gets a ``/sitemap.xml`` listing every HTML file with the
lastmod ``2023-01-01``; step 3 sets the lastmod of the edited files to the time of the edit
(and drops the deleted ones from it), and steps 4 and 5 are ``gridcrawl run --recrawl``: no
document is due by its schedule (30 days), so what is fetched is what the sitemap's lastmod
made due. Every run then has ``GRIDCRAWL_RECRAWL_MIN_INTERVAL=1`` (a lastmod may make a page
due one second after its visit instead of 60: the runs follow each other within a minute).

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
    counts done, and the edited and deleted files under ``"files"``."""
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
    return {"touched": len(touched), "edited": len(edited), "deleted": len(deleted),
            "files": {"edited": edited, "deleted": deleted}}


def write_sitemap(root: pathlib.Path, base: str, newer: dict[str, str] | None = None,
                  dropped: list[str] = ()) -> None:
    """Write ``root/sitemap.xml``: every HTML file under ``root`` (but ``dropped``) at ``base``,
    with lastmod ``2023-01-01`` or its value in ``newer``."""
    newer = newer or {}
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*.html"))
    entries = "".join(f"<url><loc>{base}/{name}</loc><lastmod>{newer.get(name, '2023-01-01')}</lastmod></url>\n"
                      for name in files if name not in dropped)
    (root / "sitemap.xml").write_text('<?xml version="1.0" encoding="UTF-8"?>\n'
                                      '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
                                      f"{entries}</urlset>\n", encoding="utf-8")


def run(command: list[str], env: dict | None = None) -> float:
    """Run ``command`` (with ``env`` added to the environment); return its wall seconds. Exits
    if it fails."""
    started = time.monotonic()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, **(env or {})})
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
    parser.add_argument("--sitemap", action="store_true",
                        help="serve a sitemap with lastmods; recrawl with --recrawl, driven by them")
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
            env = {"GRIDCRAWL_RECRAWL_MIN_INTERVAL": "1"} if args.sitemap else {}
            again = ["--recrawl"] if args.sitemap else ["--recrawl-all"]
            if args.sitemap:
                write_sitemap(root, base)
            for name, extra in (("first crawl", [f"{base}/index.html"]), ("recrawl after changes", again),
                                ("recrawl, nothing changed", again)):
                if name == "recrawl after changes":
                    time.sleep(1.1)  # the edits' lastmod is after the first crawl's visits
                    changes = change_site(root, args.touch, args.edit, args.delete)
                    files = changes.pop("files")
                    if args.sitemap:
                        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
                        write_sitemap(root, base, dict.fromkeys(files["edited"], stamp), files["deleted"])
                    time.sleep(1.1)  # a lastmod can make a page due 1 s after its visit at the earliest
                began = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
                seconds = run(gridcrawl + extra, env)
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
    path = out / f"{dt.date.today():%Y-%m-%d}-recrawl{'-sitemap' if args.sitemap else ''}.md"
    path.write_text(f"# Recrawl of the Python documentation, {dt.datetime.now():%Y-%m-%d %H:%M}\n\n"
                    f"Command: `python benchmarks/recrawl.py {' '.join(argv or sys.argv[1:])}`; nginx serving a copy "
                    f"of python3-doc{' with a sitemap (lastmods)' if args.sitemap else ''}; changes: {changes}. requests/200/304/404/body bytes from nginx's access log "
                    f"(robots.txt included); crawl s: first grid thread submitted to last finished (manager "
                    f"database); wall s: the whole `gridcrawl run` command.\n\n{text}\n")
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
