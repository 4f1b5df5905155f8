"""A link maze over endless subdomains, crawled by ``gridcrawl run`` through the test proxy.

``python benchmarks/subdomain_maze.py [gridcrawl run options]`` serves
``tests/adversarial.py``'s ``subdomain_maze_site`` on 127.0.0.1 and a forward proxy
(``tests/proxy.py``) that maps ``maze.invalid`` and every subdomain of it to that server, as a
wildcard DNS record would; ``.invalid`` names are never sent to a DNS server (RFC 6761), so no
packet leaves 127.0.0.0/8. It runs ``gridcrawl run http://maze.invalid:PORT/ --proxy ...
--no-progress OPTIONS`` under ``/usr/bin/time -v`` and prints its exit status, wall clock
seconds, the end of its stderr (the summary, then time's figures: the largest process's RSS)
and the requests the proxy forwarded. With ``STOP_AFTER=S`` in the environment the run is sent
Ctrl-C after S seconds (a crawl that would not end by itself).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from adversarial import MAZE_DOMAIN, subdomain_maze_site  # noqa: E402
from proxy import ForwardProxy  # noqa: E402
from sites import SiteServer  # noqa: E402


def main(options: list[str]) -> int:
    """Run the crawl once with ``options``; return its exit status."""
    stop_after = float(os.environ.get("STOP_AFTER", "0")) or None
    hosts = {MAZE_DOMAIN: "127.0.0.1", f"*.{MAZE_DOMAIN}": "127.0.0.1"}
    with SiteServer(subdomain_maze_site()) as server, ForwardProxy(hosts=hosts) as proxy:
        command = ["/usr/bin/time", "-v", sys.executable, "-m", "gridcrawl", "run",
                   f"http://{MAZE_DOMAIN}:{server.port}/", "--proxy", proxy.url, "--no-progress", *options]
        started = time.monotonic()
        run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
        try:
            _, err = run.communicate(timeout=stop_after)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGINT)
            _, err = run.communicate()
        print(f"exit {run.returncode}, wall {time.monotonic() - started:.1f} s")
        print(err[-4000:])
        print(f"{len(proxy.records)} requests through the proxy")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
