"""Cluster membership, partition placement and proxying (a one-member ring on a single node)."""
