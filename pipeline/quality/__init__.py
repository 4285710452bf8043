"""Quality gates: Great Expectations suites over the source, the overlays and the pair files."""
