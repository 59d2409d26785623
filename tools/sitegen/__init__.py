"""The site: scan the wheelhouse, keep the ledger, place files in variant indexes, render the Simple API pages and the front page, swap the site in, serve it."""
