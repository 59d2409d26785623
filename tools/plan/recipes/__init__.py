"""The recipe's model: what ``recipes/<package>/recipe.yaml`` says, loaded strictly and checked.

``model`` is what a recipe is (:class:`~tools.plan.recipes.model.Recipe`, ``load_recipe``,
``load_all``); ``shape`` its shape, the JSON Schema ``recipe.schema.json`` beside it; ``blocks``
its optional ``check``, ``probe`` and ``depends``; ``env`` its build variables; ``platforms``
where it is built besides Linux x86_64; ``torch`` its torch series per CUDA version. (The package
is named for the ``recipes/`` folder it reads: ``tools.recipe`` is the command that checks them.)
"""
