"""``python -m tools.oci_runtime``: make a container engine start containers where the OCI runtime may not set resource limits.

The command only; the logic is ``tools.backends.oci_runtime``.
"""

import sys

from tools.backends.oci_runtime import main

if __name__ == "__main__":
    sys.exit(main())
