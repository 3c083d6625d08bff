"""Storage backends behind one contract (``base.py``): memory, sqlite and, for clusters, cassandra."""
