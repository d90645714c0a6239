"""YAML a repository wrote, composed under bounds before anything is built from it.

PyYAML composes an alias as a second reference to its anchor's node and builds both as one
object, so a few hundred bytes of nested aliases (a "billion laughs") stand for billions of
values: whatever then walks the result (a ``repr`` in an error message, a JSON dump, a
loop over a list) runs out of memory. Its composer also recurses once per nesting level,
and a deep enough document raises RecursionError. :func:`compose` composes with a loader
that counts the nodes and the nesting depth as it goes and refuses anchors and aliases,
so what it returns is a tree no larger than its text; :func:`top_level_scalar` reads one
top-level value from a document of any size or shape (aliases allowed) as a stream of
events, building nothing.

This module imports PyYAML: import it where YAML is read, not at start-up.
"""

from __future__ import annotations

from typing import Any

import yaml


class Refused(yaml.MarkedYAMLError):
    """The document is over a bound, or holds an anchor or alias.

    Attributes:
        problem: what is wrong, one phrase.
        problem_mark: where (``.line`` is 0-based).
    """


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, counting nodes and depth while composing; no anchors, no
    aliases."""

    def __init__(self, text: str, max_nodes: int, max_depth: int):
        super().__init__(text)
        self._nodes_left = max_nodes
        self._max_nodes = max_nodes
        self._depth = 0
        self._max_depth = max_depth

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[no-untyped-call]  # untyped in the stubs
        mark = event.start_mark
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise Refused(problem="anchors and aliases (&name, *name) are not allowed",
                          problem_mark=mark)
        self._nodes_left -= 1
        if self._nodes_left < 0:
            raise Refused(problem=f"more than {self._max_nodes} values", problem_mark=mark)
        if self._depth >= self._max_depth:
            raise Refused(problem=f"nested deeper than {self._max_depth} levels",
                          problem_mark=mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def compose(text: str, *, max_nodes: int, max_depth: int) -> tuple[Any, yaml.Node | None]:
    """Parse one YAML document with PyYAML's safe schema (as :func:`yaml.safe_load`),
    under bounds.

    Args:
        text: the document.
        max_nodes: most nodes (scalars, sequences, mappings).
        max_depth: deepest nesting of nodes (a top-level scalar is depth 1).

    Returns:
        ``(data, node)``: the built value (None for an empty document) and its node tree
        (for the lines of keys: ``node.start_mark.line``, 0-based), or None.

    Raises:
        Refused: an anchor or alias, more than ``max_nodes`` nodes or deeper than
            ``max_depth``.
        yaml.YAMLError: not YAML (:class:`yaml.MarkedYAMLError` when PyYAML knows where).
    """
    loader = _BoundedLoader(text, max_nodes, max_depth)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    return data, node


def top_level_scalar(text: str, key: str) -> str | None:
    """The value of ``key`` in the top-level mapping of the YAML document ``text``, when it
    is a scalar the safe schema reads as a string; None when there is none or it is
    anything else.

    Reads parser events only (libyaml's parser when PyYAML has it), so neither the size
    nor the shape of the rest of the document (aliases, nesting) costs more than reading
    it once.

    Raises:
        yaml.YAMLError: not YAML before the key was found.
    """
    loader_class = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    resolver = yaml.resolver.Resolver()
    depth = 0
    is_key = True  # at depth 1: whether the next node is a key or its value
    wanted = False
    for event in yaml.parse(text, Loader=loader_class):
        if isinstance(event, yaml.CollectionStartEvent):
            if depth == 0 and not isinstance(event, yaml.MappingStartEvent):
                return None
            if depth == 1:
                if wanted and not is_key:
                    return None
                wanted, is_key = False, not is_key
            depth += 1
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
            if depth == 0:
                return None
        elif isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent)) and depth == 1:
            if is_key:
                wanted = isinstance(event, yaml.ScalarEvent) and event.value == key
            elif wanted:
                if not isinstance(event, yaml.ScalarEvent):
                    return None
                tag = event.tag
                if tag in (None, "!"):  # resolved as the safe schema does (untyped stubs)
                    tag = resolver.resolve(  # type: ignore[no-untyped-call]
                        yaml.ScalarNode, event.value, event.implicit)
                return event.value if tag == "tag:yaml.org,2002:str" else None
            is_key = not is_key
        elif isinstance(event, yaml.DocumentEndEvent):
            return None
    return None
