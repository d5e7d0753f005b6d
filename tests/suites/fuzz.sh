# fuzz suite — filled in by its owner; see tests/run.
