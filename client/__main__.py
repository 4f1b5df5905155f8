"""python -m gridcrawl.client"""
from gridcrawl.entry import client

client()
