"""Correctness of the benchmark's baseline crawlers (benchmarks/baselines.py), no timing.

The benchmark compares gridcrawl's pages/s with two single-process baselines; the comparison
is only fair if the baselines crawl exactly what gridcrawl crawls. These tests run both
baselines in-process against a real ``SiteServer`` on 127.0.0.1 and check, from the server's
own request log, that each fetches every reachable page exactly once and nothing else (not
the unreachable pages, not the ``mailto:``, ``javascript:`` or ``external.invalid`` links),
and that ``max_pages`` caps the crawl.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from sites import generate_site, page_path, reachable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import baselines  # noqa: E402  (benchmarks/baselines.py)

CRAWLERS = {
    "serial": lambda seed, **kw: baselines.crawl_serial(seed, **kw),
    "threads": lambda seed, **kw: baselines.crawl_threaded(seed, threads=4, **kw),
}


@pytest.mark.parametrize("mode", sorted(CRAWLERS))
def test_baseline_fetches_exactly_the_reachable_set(site_server, mode: str) -> None:
    site = generate_site(40, links_per_page=6, seed=7, page_bytes=2000, unreachable=3)
    want = reachable(site)
    assert page_path(40) not in want  # the unreachable pages exist and must stay unfetched
    srv = site_server(site)

    result = CRAWLERS[mode](srv.url("/"), max_pages=500)  # a cap far above the site: a bug cannot loop forever

    counts = srv.per_path_counts()
    assert set(counts) == want
    assert all(n == 1 for n in counts.values()), {p: n for p, n in counts.items() if n != 1}
    assert result.visited == {srv.url(p) for p in want}
    assert result.pages == len(want) == result.documents
    assert result.errors == 0
    assert result.seconds > 0


@pytest.mark.parametrize("mode", sorted(CRAWLERS))
def test_baseline_stops_at_max_pages(site_server, mode: str) -> None:
    site = generate_site(60, links_per_page=5, seed=3)
    srv = site_server(site)

    result = CRAWLERS[mode](srv.url("/"), max_pages=17)

    counts = srv.per_path_counts()
    assert result.pages == 17 == len(counts)
    assert all(n == 1 for n in counts.values())
    assert set(counts) <= reachable(site)


def test_baselines_count_errors_and_skip_non_html_bodies(site_server) -> None:
    from sites import status_page

    site = generate_site(5, links_per_page=2, seed=11)
    site.pages["/"] = site.pages["/"].replace(
        b"</ul>", b'<li><a href="/gone.html">gone</a></li><li><a href="/data.txt">data</a></li></ul>')
    site.pages["/data.txt"] = b'<a href="/p/never.html">not parsed: not HTML</a>'
    site.types["/data.txt"] = "text/plain"
    site.extra["/gone.html"] = status_page(404)
    srv = site_server(site)

    for mode in sorted(CRAWLERS):
        srv.reset()
        result = CRAWLERS[mode](srv.url("/"), max_pages=500)
        counts = srv.per_path_counts()
        assert "/p/never.html" not in counts, mode
        assert set(counts) == reachable(site) | {"/gone.html", "/data.txt"}, mode
        assert result.pages == len(reachable(site)) + 2, mode
        assert result.errors == 1 and result.documents == result.pages - 1, mode


@pytest.mark.parametrize("mode", sorted(CRAWLERS))
def test_baseline_store_holds_every_page_fetched(site_server, tmp_path, mode: str) -> None:
    """``--store`` (issue 23's "same pages stored"): one row per page fetched below 400, with its
    status, type, title and decoded text; the 404 and nothing else left out."""
    import sqlite3

    from sites import status_page

    site = generate_site(30, links_per_page=4, seed=5, page_bytes=1500)
    site.pages["/"] = site.pages["/"].replace(b"</ul>", b'<li><a href="/gone.html">gone</a></li></ul>')
    site.extra["/gone.html"] = status_page(404)
    srv = site_server(site)
    db = tmp_path / f"{mode}.db"

    result = CRAWLERS[mode](srv.url("/"), max_pages=500, store=str(db))

    with sqlite3.connect(db) as conn:
        rows = {url: (status, title, content) for url, status, title, content
                in conn.execute("SELECT url, status, title, content FROM document")}
    assert result.documents == len(reachable(site)) == len(rows)
    assert srv.url("/gone.html") not in rows
    for path in reachable(site):
        status, title, content = rows[srv.url(path)]
        assert status == 200 and title
        assert content == site.pages[path].decode("utf-8").replace("{BASE}", srv.base_url)  # as served


def test_many_executors_benchmark_runs_and_counts_right(tmp_path) -> None:
    """benchmarks/many_executors.py at tiny sizes (no timing asserted): a real manager, simulated
    executors on real DEALER sockets in two processes, every thread finished and recorded Dead,
    every executor welcomed and none declared dead, and a snapshot of the dashboard built."""
    import many_executors  # benchmarks/many_executors.py

    figures = many_executors.run(executors=6, processes=2, workers=2, threads=300, tmp=tmp_path)
    assert figures["threads_dead"] == 300 and figures["attempts"] == 300 == figures["results"]
    assert figures["attempts_not_finished"] == 0 and figures["declared_dead"] == 0
    assert figures["executors_recorded"] == 6 == figures["welcomed"] and figures["executors_disconnected"] == 0
    assert figures["refusals"] == 0 and figures["rate"] > 0 and figures["rss_connected_mb"] > 0
    assert figures["register_s"] > 0  # every executor was welcomed (else run raises) before the submit
    build = many_executors.snapshot_build_ms(executors=6, threads=300, workers=2, repeats=2)
    assert len(build) == 2 and all(ms > 0 for ms in build)
    # --rounds: the report gives every pair's ratio, their median, and the median pair's table
    few = dict(figures, executors=2, rate=figures["rate"] * 2)
    pairs = [(dict(figures, rate=figures["rate"] * k), few) for k in (1.8, 1.0, 1.5)]  # 90 %, 50 %, 75 %
    args = SimpleNamespace(executors=6, baseline=2, threads=300, processes=2, workers=2, baseline_workers=64,
                           rounds=3)
    text = many_executors.report(pairs, build, args)
    assert "**75%** of the rate with 2, median of 3 pairs: 90% (" in text and "Round 3 of 3" in text
    assert f"| 6 | {figures['rate'] * 1.5:,.0f} |" in text  # the median pair's row


def test_target_2_ratios_net_of_start_up_and_the_fixed_cost_s_floor() -> None:
    """benchmarks/run.py's two derived CPU ratios of target 2, from whole-command figures: net of
    each command's one-page CPU, and the floor the one-page CPU sets (gridcrawl at the baseline's
    CPU per page beyond the first); neither from a failed run."""
    import run  # benchmarks/run.py

    def result(cpu: float, pages: int, error: str = "") -> "run.RunResult":
        return run.RunResult("r", "threads", pages=pages, cpu_total=cpu, error=error)

    base, base1 = result(3.0, 101), result(1.0, 1)
    grid, grid1 = result(6.0, 101), result(2.0, 1)
    # per page beyond the first: baseline (3 - 1) / 100 = 0.02 s, gridcrawl (6 - 2) / 100 = 0.04 s
    assert run.net_cpu_ratio(base, grid, base1, grid1) == pytest.approx(2.0)
    # gridcrawl at 0.02 s a page beyond its first: 2 + 100 × 0.02 = 4 CPU-s for 101 pages, the baseline's 3
    assert run.floor_cpu_ratio(base, grid, base1, grid1) == pytest.approx(4 / 3)
    # a gridcrawl that spends less per page than the baseline goes below the floor
    cheaper = result(3.5, 101)
    assert run.floor_cpu_ratio(base, cheaper, base1, grid1) > 3.5 / 3.0
    failed = result(0.5, 1, error="exit status 1")
    assert run.net_cpu_ratio(base, grid, base1, failed) is None
    assert run.floor_cpu_ratio(base, grid, failed, grid1) is None
    assert run.floor_cpu_ratio(base, result(2.0, 1), base1, grid1) is None  # one page: nothing beyond it


def test_the_readme_table_gives_each_headline_ratio_with_its_rounds_range() -> None:
    """benchmarks/run.py's README rows: the median ratio in bold, then the lowest and highest
    round (how far one round strays on a noisy machine), for wall clock and CPU per page."""
    import run  # benchmarks/run.py

    section = run.Section("ratio", "ratio", "")
    section.summary.update({
        "ratio_setting": "--executors 2 --threads 8",
        "ratios": {"no added latency": (1.1, 1.38, 5, 0.92)},
        "cpu_ratios": {"no added latency": (1.19, 5, 1.4, 1.04, 1.14)},
        "ranges": {"no added latency": ((0.97, 1.29), (1.01, 1.28))},
    })
    table = run.readme_table([section], "benchmarks/results/x.md")
    wall_row, cpu_row = table.splitlines()[2:4]
    assert "**1.10×** (rounds 0.97–1.29×; crawl seconds only: 1.38×" in wall_row and "median of 5 rounds" in wall_row
    assert "**1.19×** (rounds 1.01–1.28×; vs the crawler storing nothing: 1.40×" in cpu_row
    section.summary.pop("ranges")  # a summary without ranges (an older run's) still makes its rows
    assert "**1.10×** (crawl seconds only: 1.38×" in run.readme_table([section], "benchmarks/results/x.md")
