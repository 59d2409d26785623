"""Which wheel fits this machine: pick the variant index to install from, or explain an import error.

    python -m tools.selector flash-attn                                           what to install, and how
    python -m tools.selector flash-attn --version 2.8.3 --index SITE --json        the same, for scripts
    python -m tools.selector flash-attn --index SITE --torch-version 2.8.0+cu128 --sm 90   another machine
    python -m tools.selector --doctor flash-attn [--error TEXT | --error-file FILE]  why an import fails
    python -m tools.selector --detect                                             what was detected

Installed, the command is ``cuwheels-select``. Every site publishes the same code as one file,
``cuwheels-select.pyz`` (tools.selector.bundle), that runs with nothing but Python >= 3.8
(``python cuwheels-select.pyz flash-attn``) in the environment that has the
problem: the modules here use the standard library, the package tools.core (cell ids and labels,
the manifest, the range reader, demangling; shipped whole) and ``packaging`` (carried inside the
file), never yaml, jinja2 or torch (torch only as a last
resort, in a subprocess).

Modules, one job each: ``gpu`` (which GPU code runs on which GPU), ``detect`` (the machine:
Python, OS, glibc, torch, driver, GPUs, with overrides), ``localread`` (every read of this
machine's files and probes' output, bounded in size and time), ``facts`` (what the site publishes for
the selector), ``fetch`` (what may be read, from which hosts, how much and for how long),
``client`` (reading a site: PEP 691 JSON, HTML fallback, a wheel's manifest by range requests,
every field checked), ``checks`` (whether one wheel fits), ``answer`` (the pick and the pip/uv
commands, or why nothing fits), ``doctor`` (an import error explained), ``cli`` (options and
output), ``bundle`` (the single-file build; not shipped in it).

The index is not trusted (tools.selector.fetch): only http(s) URLs on the index's host (or one
``--allow-host`` names) are read, each answer under a size cap, each request within
``--timeout`` seconds from connecting to its last byte and all of them within ``--deadline``;
a redirect elsewhere is refused; a page that is not what a cuwheels index writes is an error
naming the field; nothing the index says reaches the terminal with its control characters.

The index is the project's own (tools.core.site.INDEX_URL, the one place its address is
written) unless ``--index`` names another: a URL or a site directory. A miss says what would
help for its reason (tools.selector.advice), and suggests a build only where one would.

Exit status: 0 a wheel fits (doctor: no problem found); 1 none fits (doctor: a problem was found
and explained); 2 bad arguments; 3 the index could not be read (or was refused).
"""
