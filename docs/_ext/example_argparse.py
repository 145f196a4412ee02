"""The ``argparse`` directive of the algorithm pages: an example's flags, read from its
``train.py``, as sphinx-argparse shows them, with two corrections.

- The description keeps its line breaks: the usage lines (indented, one command a line) become
  a literal block instead of one paragraph that runs the commands together.
- A switch (``store_true``, ``store_false``) reads ``Default: False``: it is off unless given.
  sphinx-argparse shows the default of the value the switch stores, so ``--no_progress``
  (which stores ``progress=False``) read ``Default: True``.

An example's script imports the modules beside it (``from agent import ...``) and the folders
share module names, so each script is read with its own folder first on ``sys.path`` and the
same-named modules of another folder put aside, as ``python examples/X/train.py`` runs it.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from typing import Any
from unittest import mock


def description_rst(text: str) -> str:
    """``text`` (a parser's plain description: paragraphs apart by blank lines, usage lines
    indented) as reStructuredText that keeps it: each indented paragraph a literal block."""
    blocks = [block for block in text.strip("\n").split("\n\n") if block.strip()]
    out: list[str] = []
    for block in blocks:
        lines = block.split("\n")
        if all(line.startswith((" ", "\t")) or not line.strip() for line in lines):
            out.append("::")  # a literal block of its own, whatever the paragraph above says
            out.append(textwrap.indent(textwrap.dedent(block), "    "))
        else:
            out.append("\n".join(line.strip() for line in lines))
    return "\n\n".join(out) + "\n"


SWITCHES = (argparse._StoreTrueAction, argparse._StoreFalseAction)


def switches_off(result: dict[str, Any], parser: argparse.ArgumentParser) -> dict[str, Any]:
    """sphinx-argparse's ``result`` with each switch's default ``False`` (not given)."""
    names = {
        option
        for action in parser._actions
        if isinstance(action, SWITCHES)
        for option in action.option_strings
    }
    for group in result.get("action_groups", []):
        for entry in group["options"]:
            if set(entry["name"]) & names and entry["default"] != "==SUPPRESS==":
                entry["default"] = False
    return result


def _directive() -> type:
    import sphinxarg.ext
    from docutils import nodes
    from docutils.statemachine import StringList
    from sphinxarg.ext import ArgParseDirective

    parse_parser = sphinxarg.ext.parse_parser

    def parse_with_switches(parser: argparse.ArgumentParser, **options: Any) -> dict[str, Any]:
        return switches_off(parse_parser(parser, **options), parser)

    class ExampleArgParseDirective(ArgParseDirective):
        def _nested_parse_paragraph(self, text: str) -> nodes.Element:
            content = nodes.container()
            self.state.nested_parse(StringList(description_rst(text).split("\n")), 0, content)
            return content

        def run(self) -> list[nodes.Node]:
            with mock.patch.object(sphinxarg.ext, "parse_parser", parse_with_switches):
                if "filename" not in self.options:
                    return super().run()
                path = os.path.join(self.env.srcdir, self.options["filename"])
                folder = os.path.realpath(os.path.dirname(path))
                names = {f[:-3] for f in os.listdir(folder) if f.endswith(".py")}
                aside = {name: sys.modules.pop(name) for name in names if name in sys.modules}
                sys.path.insert(0, folder)
                try:
                    return super().run()
                finally:
                    sys.path.remove(folder)
                    for name in names:
                        sys.modules.pop(name, None)
                    sys.modules.update(aside)

    return ExampleArgParseDirective


def setup(app: Any) -> dict[str, Any]:
    app.setup_extension("sphinxarg.ext")
    app.add_directive("argparse", _directive(), override=True)
    return {"parallel_read_safe": True}
