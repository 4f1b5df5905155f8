"""python -m gridcrawl: the gridcrawl command (run, report, db)."""
from gridcrawl.cli import main

main()
