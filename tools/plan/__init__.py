"""The plan: the compatibility table, recipes and their schema, and the matrix of cells planned from them."""
