"""Kernel shards of compile groups, compiled on a machine, then the cells that read them."""
