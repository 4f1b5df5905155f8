"""python -m gridcrawl.manager"""
from gridcrawl.manager.cli import main

main()
