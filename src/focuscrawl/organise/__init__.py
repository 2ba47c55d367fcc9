"""Organising a crawl's collection (BINGO! thesis chapter 3): base and restrictive clustering,
meta clustering, restrictive classification of a taxonomy, subtopic suggestion, and
near-duplicates."""
