"""Side-by-side crawl evaluation on the test web: crawler registry, metrics, harness, report."""
