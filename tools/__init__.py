"""cuwheels: recipes, build pipeline and package index for CUDA PyTorch extension wheels.

One module per pipeline step; each has a thin ``main()`` run as ``python -m tools.<step>``.
"""

from pathlib import Path

#: The repository root (tools/ lives directly under it).
ROOT = Path(__file__).resolve().parent.parent
RECIPES_DIR = ROOT / "recipes"
