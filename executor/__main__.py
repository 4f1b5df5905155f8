"""python -m gridcrawl.executor"""
from gridcrawl.executor.cli import main

main()
