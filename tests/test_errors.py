"""tools.core.errors: one error type per failure class, each with its own exit code, and the
``cli`` wrapper every command's ``main`` goes through."""

from __future__ import annotations

import pytest

from tools.core import errors
from tools.core.errors import CuwheelsError, RecipeError, cli

#: Every failure class the project has (the subclasses of CuwheelsError in the module).
CLASSES = [obj for obj in vars(errors).values()
           if isinstance(obj, type) and issubclass(obj, CuwheelsError) and obj is not CuwheelsError]


def test_each_failure_class_has_its_own_exit_code_and_kind():
    assert len(CLASSES) >= 12
    codes = [c.exit_code for c in CLASSES]
    kinds = [c.kind for c in CLASSES]
    assert len(set(codes)) == len(codes) and len(set(kinds)) == len(kinds)
    # 0 is success and 1 the base class's: a failure class says more
    assert min(codes) >= 2 and CuwheelsError.exit_code not in codes
    assert all(c.__doc__ for c in CLASSES)


@pytest.mark.parametrize("hint,text", [
    (None, "recipes/x/recipe.yaml: cuda: 12.8 is not in the table"),
    ("add it to recipes/table.yaml", "recipes/x/recipe.yaml: cuda: 12.8 is not in the table\n"
                                     "  fix: add it to recipes/table.yaml"),
])
def test_message_and_fix(hint, text):
    exc = RecipeError("recipes/x/recipe.yaml: cuda: 12.8 is not in the table", hint=hint)
    assert str(exc) == text
    assert (exc.message, exc.hint) == ("recipes/x/recipe.yaml: cuda: 12.8 is not in the table",
                                       hint)


@pytest.mark.parametrize("returns,code", [(None, 0), (0, 0), (1, 1), (3, 3)])
def test_cli_passes_the_status_on(returns, code, capsys):
    @cli
    def main(argv=None):
        """A command."""
        return returns

    assert main([]) == code
    assert capsys.readouterr() == ("", "")
    assert main.__doc__ == "A command." and main.__name__ == "main"


@pytest.mark.parametrize("error", CLASSES)
def test_cli_prints_a_failure_and_exits_with_its_code(error, capsys):
    @cli
    def main():
        raise error("no cell 'x' in the plan", hint="python -m tools.matrix --format ids")

    assert main() == error.exit_code
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (f"{error.kind} error: no cell 'x' in the plan\n"
                   "  fix: python -m tools.matrix --format ids\n")


def test_cli_lets_a_bug_through():
    @cli
    def main():
        raise KeyError("a bug, not a failure class: its traceback is wanted")

    with pytest.raises(KeyError):
        main()
