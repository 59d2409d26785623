"""The exclusion a failed probe proposes: the recipe's ``exclude:`` gains the new series, with the
failure as its reason, so that merging the refresh publishes what compiles and names what doesn't.

The entry is ``{torch: "<series>", cuda: "<cuda>", reason: "..."}`` where the recipe builds the
series for one CUDA version, without ``cuda`` where it builds it for several (a probe compiles
torch's headers, the same for every CUDA variant of a series). It is appended to the recipe's
``exclude:`` list (created at the end of the file when the recipe has none), and the recipe is
loaded again with the project's own loader: an exclusion the loader refuses (one that would
leave a CUDA version with no series at all) is not written, and the note says what to narrow by
hand instead.
"""

from __future__ import annotations

from pathlib import Path

from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import DoubleQuotedScalarString

from tools.core.errors import RecipeError
from tools.plan.recipes.model import parse_recipe
from tools.plan.schema import parse_yaml
from tools.plan.table import Table
from .verdicts import Verdict

#: The comment above an ``exclude:`` list the refresh creates.
COMMENT = ("Series the recipe's ranges include but that do not build: each from a probe, with "
           "its first error (tools.refresh --probes)")


def reason(verdict: Verdict, date: str) -> str:
    """The exclusion's reason: the cell probed, the unit and its first error, when, and what
    lifts it."""
    t = verdict.target
    return (f"probe of {t.cell} (sm_{t.archs}) on {date} failed at {verdict.unit}: "
            f"{verdict.error}; remove this entry once a patch or a new release compiles it "
            "(python -m tools.probe)")


def entry(verdict: Verdict, date: str) -> CommentedMap:
    """The ``exclude:`` entry for a failed probe, in flow style like the recipes' other lists."""
    t = verdict.target
    item = CommentedMap()
    item["torch"] = DoubleQuotedScalarString(t.series)
    if len(t.builds) == 1:
        item["cuda"] = DoubleQuotedScalarString(t.builds[0])
    item["reason"] = DoubleQuotedScalarString(reason(verdict, date))
    item.fa.set_flow_style()
    return item


def add_exclusion(doc: CommentedMap, verdict: Verdict, date: str) -> None:
    """Append the failed probe's entry to the recipe document's ``exclude:``."""
    if "exclude" not in doc or doc["exclude"] is None:
        seq = CommentedSeq()
        doc["exclude"] = seq
        doc.yaml_set_comment_before_after_key("exclude", before=COMMENT)
    doc["exclude"].append(entry(verdict, date))


def check(text: str, path: Path, table: Table) -> str | None:
    """None when the recipe text loads against ``table``, else the loader's message."""
    try:
        parse_recipe(parse_yaml(text, path, RecipeError), path, table)
    except RecipeError as exc:
        return exc.message
    return None


def note_refused(verdict: Verdict, path: Path, problem: str) -> str:
    """What the summary says when the exclusion can't be written."""
    t = verdict.target
    # The loader's message is "<file>: N problems:" and one "  - ..." line per problem.
    said = [line.strip().removeprefix("- ") for line in problem.splitlines()[1:]] or [problem]
    return (f"{t.package}: {verdict.text}; no exclusion was proposed, because {path} would not "
            f"load with it ({'; '.join(said)}): narrow its cuda: entries so that torch "
            f"{t.series} is left out, by hand")
