"""A stand-in for xml.dom.minidom's parseString, for prompt_toolkit's HTML() markup in the binary.

The one-file binary leaves out the xml package (the system's libexpat would raise its glibc floor),
but prompt_toolkit builds HTML() templates when it is imported (its progress-bar formatters), so the
chat's input line could not start there. packaging/abhed.nuitka-package.config.yml makes
prompt_toolkit.formatted_text.html import this module instead: a tree of just what HTML() reads
(childNodes, nodeType, nodeName, data, attributes), parsed by the standard library's pure-Python
html.parser. It is never imported outside the binary.
"""

from __future__ import annotations

from html.parser import HTMLParser


class Node:
    TEXT_NODE = 3
    ELEMENT_NODE = 1

    def __init__(self, name: str, attributes: dict[str, str] | None = None, data: str = "") -> None:
        self.nodeName = name
        self.nodeType = self.TEXT_NODE if name == "#text" else self.ELEMENT_NODE
        self.attributes = attributes or {}
        self.data = data
        self.childNodes: list[Node] = []


class _Builder(HTMLParser):
    # <style> is prompt_toolkit's colour tag, not HTML's raw-text element. typeshed marks the attribute Final,
    # yet overriding it in a subclass is how HTMLParser is told which elements hold raw text.
    CDATA_CONTENT_ELEMENTS = ()  # type: ignore[misc]

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.document = Node("#document")
        self.open = [self.document]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.open[-1].childNodes.append(node)
        self.open.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.open[-1].childNodes.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        if len(self.open) > 1 and self.open[-1].nodeName == tag:
            self.open.pop()
        else:  # minidom refuses what is not well formed; so does this
            raise ValueError(f"mismatched tag </{tag}>")

    def handle_data(self, data: str) -> None:
        self.open[-1].childNodes.append(Node("#text", data=data))


def parseString(text: str) -> Node:  # noqa: N802  (minidom's name)
    builder = _Builder()
    builder.feed(text)
    builder.close()
    if len(builder.open) != 1:
        raise ValueError(f"unclosed tag <{builder.open[-1].nodeName}>")
    return builder.document
