"""The project's public addresses: the one setting a fork changes to publish its own index.

The README, the docs, the front page and the selector's default index all read these. The
index is the GitHub Pages site of the repository that publishes it (``<owner>.github.io/<repo>``),
its docs under ``docs/`` there; a fork sets its own two addresses here and nowhere else
(``tests/test_docs.py`` fails where a page or module spells one out).
"""

from __future__ import annotations

#: Where the package index is served: the front page, ``<variant>/simple/`` pages, ``selector.json``.
INDEX_URL = "https://cuwheels.github.io/cuwheels/"

#: The repository that builds and publishes it: its source, issues and pull requests.
REPOSITORY_URL = "https://github.com/cuwheels/cuwheels"

#: The docs site, published with the index (``make docs`` builds it into the site's ``docs/``).
DOCS_URL = INDEX_URL + "docs/"

#: Where users report a broken wheel or ask for a package.
ISSUES_URL = REPOSITORY_URL + "/issues"

