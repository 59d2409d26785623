"""tools.upstream.yamltext: the refresh's YAML round trip keeps a file byte for byte, and the
values it writes are spelled as the table spells its own."""

from __future__ import annotations

from tools.upstream.registry import TorchFacts
from tools.upstream.yamltext import dump, flow, like, quoted, show, source, yaml_rt

TEXT = """\
# a comment kept
torch:
  "2.15":
    release: "2.15.0"
    python: ["3.11", "3.12"]   # why: an end-of-line comment kept
    source: 'single quotes kept'
"""


def test_a_file_round_trips_byte_for_byte_and_new_values_follow_its_spelling():
    doc = yaml_rt().load(TEXT)
    assert dump(doc) == TEXT
    row = doc["torch"]["2.15"]
    row["release"] = like(row["release"], "2.15.1")
    row["python"] = flow(["3.11", "3.12", "3.13"])
    row["source"] = like(row["source"], "read again")
    row["pypi_cuda"] = quoted("13.2")
    assert dump(doc) == TEXT.replace('"2.15.0"', '"2.15.1"').replace(
        '["3.11", "3.12"]   #', '["3.11", "3.12", "3.13"] #').replace(
        "'single quotes kept'", "'read again'") + '    pypi_cuda: "13.2"\n'


def test_a_rows_source_and_shown_values():
    facts = TorchFacts("2.15", "2.15.0", how={"python": "file names", "read": "x.whl read"})
    assert source(facts, ["python", "cuda"], "2026-11-25") == \
        "python: file names; x.whl read, by tools.refresh on 2026-11-25"
    assert (show(["13.0", "13.2"]), show(True), show("2_28")) == ("[13.0, 13.2]", "true", "2_28")
