"""Test-only fault injection for the executor (tests/test_faults.py): a crashing executor.

Python imports ``sitecustomize`` at start-up when it is on ``sys.path``; :class:`tests.grid.Grid`
puts this folder on ``PYTHONPATH`` of the processes it starts with ``GRIDCRAWL_TEST_CRASH_ON`` in
their environment. Then :func:`gridcrawl.executor.page.visit` is wrapped: a process visiting a
URL containing that value dies at once (``os._exit(70)``, no clean-up), as an executor crashing
on a page would. Production code knows nothing of it.
"""

import os

CRASH_ENV = "GRIDCRAWL_TEST_CRASH_ON"

if os.environ.get(CRASH_ENV):
    import functools

    from gridcrawl.executor import page

    _visit = page.visit

    @functools.wraps(_visit)
    def _crashing_visit(fetcher, url, *args, **kwargs):
        if os.environ[CRASH_ENV] in url:
            os._exit(70)
        return _visit(fetcher, url, *args, **kwargs)

    page.visit = _crashing_visit
