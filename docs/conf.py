"""Sphinx configuration of the parl-torch documentation site.

Build: ``sphinx-build -W -n --keep-going -b html docs docs/_build/html`` (what ``.ci/run`` runs).
"""

from __future__ import annotations

import os
import sys

import parl

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext"))

project = "parl-torch"
author = "the parl-torch authors"
copyright = "the parl-torch authors"  # the name Sphinx reads
release = parl.__version__
version = parl.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "myst_parser",
    "sphinxarg.ext",
    "example_argparse",  # _ext/: the examples' flags (line breaks kept, switches off)
    "sphinx_copybutton",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]

# Markdown pages: ```{directive} blocks, ::: fences, definition lists, heading anchors for
# links such as [text](clusters.md#troubleshooting).
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# API pages: one page per public name (autosummary), signatures with their type hints in the
# description, the class docstring and the __init__ docstring together.
autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"
autodoc_class_signature = "mixed"
autoclass_content = "class"
autodoc_member_order = "bysource"
autodoc_preserve_defaults = True
autodoc_inherit_docstrings = False  # gymnasium's and torch's docstrings are theirs to document
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

# Types of other libraries: the site is built without network access (no intersphinx), so
# references to them stay plain text instead of failing the nitpicky build.
nitpick_ignore_regex = [
    ("py:.*", r"(numpy|np|torch|gymnasium|gym|paramiko|ray|psutil|tqdm|tensorboard)(\..*)?"),
    ("py:.*", r"(collections\.abc|typing|typing_extensions|types|os|pathlib|socket|select)\..*"),
    ("py:.*", r"(threading|multiprocessing|subprocess|argparse|logging|dataclasses|enum)\..*"),
    ("py:.*", r"(concurrent\.futures|io|weakref|mmap|contextlib|http\.server|struct)\..*"),
    ("py:.*", r"(NDArray|ArrayLike|DTypeLike|Tensor|Module|Optimizer|Env|Space|Path)"),
    ("py:class", r"SummaryWriter|AutoresetMode|nn\..*"),
    ("py:class", r"Shape"),  # a type alias of parl.utils.replay_memory (a tuple of ints)
    # internal bases and modules that public docstrings mention; not part of the API
    ("py:class", r"parl\.wire\.(caller|contract)\.CallTimeout"),
    # the SSH types in ConnectOptions' fields (imported for type checking only: parl.ssh
    # loads paramiko); documented on the SSH hosts page
    ("py:class", r"HostSpec|SSHOptions"),
    ("py:class", r"parl\.remote\.proxy\.RemoteProxy"),  # the base of every actor proxy
    ("py:class", r"parl\.env\.mujoco_wrappers\._RmsAccess"),
    ("py:mod", r"parl\.env\.fast_envs"),
]

# Prompts and outputs are not copied by the copy button.
copybutton_prompt_text = r"\$ |>>> |\.\.\. "
copybutton_prompt_is_regexp = True
copybutton_exclude = ".linenos, .gp, .go"

# "--port" stays two hyphens (help texts and options), quotes stay straight
smartquotes = False

html_theme = "furo"
html_title = f"parl-torch {release}"
html_static_path = ["_static"]
html_show_sourcelink = False
html_copy_source = False


# A name that parl re-exports (``parl.errors.ActorDiedError`` is ``parl.ActorDiedError``) or
# that a docstring names without its package (``FutureEmpty``) points at the one page that
# documents it: the reference resolves when exactly one documented object has that name.
def _resolve_by_name(app, env, node, contnode):
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    name = target.rsplit(".", 1)[-1]
    if not name or (target != name and not target.startswith("parl.")):
        return None
    domain = env.get_domain("py")
    # one object may be listed under several names (its module's and the package's)
    places = {
        (entry.docname, entry.node_id): full
        for full, entry in domain.objects.items()
        if full.rsplit(".", 1)[-1] == name
    }
    if len(places) != 1:
        return None
    from sphinx.util.nodes import make_refnode

    ((docname, node_id), full), = places.items()
    return make_refnode(app.builder, node["refdoc"], docname, node_id, contnode, full)


def setup(app):
    app.connect("missing-reference", _resolve_by_name)
