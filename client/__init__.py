"""The crawler application (``gridcrawl-client``; folder ``client/``): keeps a crawl's
``document``, ``visited_url`` and ``to_visit_url`` tables (:mod:`.store`), submits each URL to
visit as a grid thread and applies every result (:mod:`.app`), with a progress bar
(:mod:`.progress`)."""
