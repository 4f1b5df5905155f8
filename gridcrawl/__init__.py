"""gridcrawl: a grid web crawler. This package (folder ``gridcrawl/``) is the library the three
programs share: the message protocol, settings, thread states, SQL tables and migrations, canonical
URLs, crawl rules, focused-crawl scoring, exports, reports and the ``gridcrawl`` command.
The programs are its subpackages :mod:`gridcrawl.manager` (folder ``manager/``),
:mod:`gridcrawl.executor` (``executor/``) and :mod:`gridcrawl.client` (``client/``)."""
