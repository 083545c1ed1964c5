"""The detectors: each registers where it runs (node-local or fleet-wide) and what it reads (base.py), and has
one method, `detect(now, seen)`."""
