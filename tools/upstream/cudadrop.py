"""A CUDA version the table stops publishing for every series of a recipe's range: the refresh
drops the recipe's entry for it in the same change.

When torch's own index no longer lists a CUDA variant (PyTorch retiring its ``cu126`` line, say),
the refresh drops it from the table's rows; a recipe whose ``cuda.<X.Y>`` range then includes no
series the table publishes for X.Y would be refused by the loader ("includes no series the table
publishes"), and the whole refresh with it. So the refresh removes that entry from the recipe,
with what hangs on it (its ``archs.<X.Y>``, each platform's ``archs.<X.Y>``, and ``exclude``
entries of that CUDA version), and says so. A recipe whose every CUDA version went is left as it
is: dropping them all would leave a recipe that builds nothing, which a person decides.
"""

from __future__ import annotations

from ruamel.yaml.comments import CommentedMap

from tools.plan.recipes.model import Recipe
from tools.plan.table import Table


def _series(table: Table, cuda: str, included) -> list[str]:
    return [s for s, t in table.torch.items() if cuda in t.cuda and included(s)]


def drop_unpublished_cuda(doc: CommentedMap, recipe: Recipe, old: Table, new: Table) -> list[str]:
    """Remove from ``doc`` (the recipe's YAML, round-trip loaded) each CUDA entry whose range
    includes series ``old`` publishes for that CUDA version and none that ``new`` does; the
    changes, in words."""
    cuda_map = doc.get("cuda")
    if not isinstance(cuda_map, dict):
        return []
    gone = []
    for target in recipe.cuda:
        entry = cuda_map.get(target.cuda)
        if not isinstance(entry, dict):
            continue
        listed = [str(s) for s in entry.get("torch") or ()]

        def included(series: str, target=target, listed=listed) -> bool:
            ok = target.range.includes(series) if target.range else series in listed
            return ok and (recipe.torch_range is None or recipe.torch_range.includes(series))

        was = _series(old, target.cuda, included)
        if was and not _series(new, target.cuda, included):
            gone.append((target, was))
    if not gone or len(gone) == len(cuda_map):
        return []
    changes = []
    for target, was in gone:
        cuda = target.cuda
        del cuda_map[cuda]
        archs = doc.get("archs")
        if isinstance(archs, dict) and cuda in archs:
            del archs[cuda]
        for choice in (doc.get("platforms") or {}).values():
            own = choice.get("archs") if isinstance(choice, dict) else None
            if isinstance(own, dict) and cuda in own:
                del own[cuda]
        exclude = doc.get("exclude")
        if isinstance(exclude, list):
            exclude[:] = [x for x in exclude if not (isinstance(x, dict) and x.get("cuda") == cuda)]
            if not exclude:
                del doc["exclude"]
        span = str(target.range) if target.range else ", ".join(target.torch)
        changes.append(f"{recipe.package}: CUDA {cuda} dropped: the table no longer publishes a "
                       f"CUDA {cuda} build of any series its range ({span}) includes (it did of "
                       f"{', '.join(was)})")
    return changes
