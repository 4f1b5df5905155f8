"""python -m gridcrawl.manager"""
from gridcrawl.entry import manager

manager()
