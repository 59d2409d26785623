"""The environment variables the project reads: all in the table (tools.devtools.envvars), none
listed that nothing reads, and the scanner finds each kind of read."""

from __future__ import annotations

import ast
import textwrap

from tools.devtools.envvars import VARIABLES, _reads, read_in_code


def test_every_variable_the_code_reads_is_in_the_table():
    found = read_in_code()
    unnamed = sorted(name for name in found if name.startswith("?"))
    assert unnamed == [], f"name these reads with a literal or a module constant: {unnamed}"
    missing = {name: sorted(where) for name, where in found.items() if name not in VARIABLES}
    assert missing == {}, "add these to tools/devtools/envvars.py VARIABLES, with what they do"


def test_the_table_lists_nothing_that_nothing_reads():
    found = read_in_code()
    assert [name for name in VARIABLES if name not in found] == []
    assert all(what.strip() for what in VARIABLES.values())


def test_the_scanner_finds_each_kind_of_read():
    source = textwrap.dedent('''
        import os
        NAME = "FROM_CONSTANT"
        LIST = ("IN_TUPLE_A", "IN_TUPLE_B")
        a = os.environ["SUBSCRIPT"]
        b = os.environ.get("GET")
        c = os.getenv("GETENV")
        d = "IN_TEST" in os.environ
        e = os.environ.get(NAME)
        f = {k: os.environ[k] for k in LIST if k in os.environ}
        os.environ["WRITTEN_ONLY"] = "1"

        def g(environ=None):
            environ = dict(os.environ) if environ is None else environ
            return environ.get("THROUGH_A_COPY")

        def h(env=None):
            env = env if env is not None else dict(os.environ)
            found = env.get("ALIAS")
            return found["NOT_ENV"]

        def i(key):
            return os.environ.get(key)
        ''')
    got = set(_reads(ast.parse(source)))
    assert got == {"SUBSCRIPT", "GET", "GETENV", "IN_TEST", "FROM_CONSTANT", "IN_TUPLE_A",
                   "IN_TUPLE_B", "THROUGH_A_COPY", "ALIAS", "? os.environ.get(key)"}


def test_the_reference_page_names_who_reads_each_variable():
    from tools.devtools.envvars import reference_page
    page = reference_page()
    assert "| `CUWHEELS_CCACHE_DIR` | `tools/pipeline/ccache.py`" in page
    assert "| `MAX_JOBS` | `tools/backends/shardninja.py` |" in page
    assert "| `INDEX_DIR` | `Makefile` |" in page
