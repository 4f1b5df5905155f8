"""python -m gridcrawl.executor"""
from gridcrawl.entry import executor

executor()
