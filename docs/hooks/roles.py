"""mkdocs hook: Sphinx cross-reference roles in docstrings (``:class:`Runner```) shown as
code, without the role's name.

The docstrings are written for readers of the source and use Sphinx's roles; mkdocstrings
renders them as Markdown, where ``:meth:`warm_up``` would print the role. The rendered page
has ``:meth:<code>warm_up</code>``: the role's name is dropped there.
"""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|mod|exc|data|obj|const|ref):(?=<code>)")


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    return ROLE.sub("", html)
