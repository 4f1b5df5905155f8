"""The executor (``gridcrawl-executor``; folder ``executor/``): lends a desktop to the grid —
registers with the manager (:mod:`.agent`), fetches (:mod:`.fetch`) and parses (:mod:`.parse`)
the page of each grid thread (:mod:`.page`) under robots.txt (:mod:`.robots`) and the SSRF guard
(:mod:`.ssrf`), and can run only while the desktop is idle (:mod:`.idle`)."""
