"""python -m gridcrawl: the gridcrawl command (run, report, db)."""
from gridcrawl.entry import gridcrawl

gridcrawl()
