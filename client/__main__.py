"""python -m gridcrawl.client"""
from gridcrawl.client.cli import main

main()
