"""Staged release: kernel shards of compile groups, then the cells that read them."""
