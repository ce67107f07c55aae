"""Long lines the migration wrote, wrapped as a formatter would.

A rewrite puts placements and specs where a short name stood, so a line like
`w, loss = p_sgd(jax.device_put(jnp.zeros(2), NamedSharding(mesh, P())), ...)` can run far
past the line limit. Each line the migration wrote that is longer than LINE_LIMIT (not in the
original, not a line of a helper template) is split as black splits it: at its last bracket
pair, the contents on their own line, or one item per line with a trailing comma if they do
not fit; a bare tuple after `return` or `=` is put in brackets first, and the names of a
`from ... import` in brackets, one per line (black's form for imports). A line inside brackets
is split at its own commas. Only whitespace and those brackets change: the result must parse
to the same AST (checked once for all the lines; line by line only if that fails), or a split
that changes it is dropped.
"""

from __future__ import annotations

import ast
import functools
import io
import itertools
import tokenize

from transforms.helpers.helper_templates import template_source

LINE_LIMIT = 99  # the longest line the migration writes (as global_view/step_text.py)
_OPEN, _CLOSE = "([{", ")]}"
_TEMPLATES = ("pmap_style_shard_map", "pmap_compat", "device_put_sharded", "device_put_replicated",
              "nested_pmap_shard_map", "first_replica")


def wrap_long_lines(source: bytes, original: bytes) -> bytes:
    """`source` with the long lines it does not share with `original` wrapped."""
    try:
        text = source.decode("utf-8")
        before = {line.strip() for line in original.decode("utf-8").splitlines()}
    except UnicodeDecodeError:
        return source
    lines = text.splitlines(keepends=True)
    long = [i for i, line in enumerate(lines) if len(line.rstrip("\r\n")) > LINE_LIMIT
            and line.strip() not in before and line.strip() not in _template_lines()]
    if not long:
        return source
    try:
        starts = _depth_at_line_starts(text)
        reference = ast.dump(ast.parse(text))
    except (SyntaxError, tokenize.TokenError, ValueError):
        return source
    splits: dict[int, str] = {}  # line -> its wrapped text
    for i in long:
        if i not in starts:
            continue
        line = lines[i]
        body = line.rstrip("\r\n")
        newline, indent = line[len(body):], body[: len(body) - len(body.lstrip())]
        depth, statement_ends_here = starts[i]
        if depth == 0 and statement_ends_here:
            split = _split_statement(body.strip(), indent)
        elif depth > 0 and _balanced(body):
            split = _split_items(body.strip(), indent) or _split_statement(
                body.strip(), indent, statement=False)
        else:
            split = None
        if split:
            splits[i] = "".join(part + newline for part in split)
    wrapped = "".join(splits.get(i, line) for i, line in enumerate(lines))
    if splits and not _same_tree(wrapped, reference):  # rare: find the lines at fault
        for i in list(splits):
            kept = {k: v for k, v in splits.items() if k != i}
            if _same_tree("".join(kept.get(k, line) for k, line in enumerate(lines)),
                          reference):
                splits = kept
        wrapped = "".join(splits.get(i, line) for i, line in enumerate(lines))
        if not _same_tree(wrapped, reference):
            return source
    return wrapped.encode("utf-8") if wrapped != text else source


def _same_tree(text: str, reference: str) -> bool:
    try:
        return ast.dump(ast.parse(text)) == reference
    except SyntaxError:
        return False


@functools.cache
def _template_lines() -> frozenset[str]:
    return frozenset(line.strip() for name in _TEMPLATES
                     for line in template_source(name).splitlines())


def _depth_at_line_starts(text: str) -> dict[int, tuple[int, bool]]:
    """0-based line -> (bracket depth where it starts, whether a statement ends on it), for
    lines that hold no comment and are not inside a string."""
    depth, result, opaque = 0, {}, set()
    line_depth: dict[int, int] = {}
    ends: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        row = token.start[0] - 1
        line_depth.setdefault(row, depth)
        if token.type == tokenize.OP and token.string in _OPEN:
            depth += 1
        elif token.type == tokenize.OP and token.string in _CLOSE:
            depth -= 1
        elif token.type == tokenize.NEWLINE:
            ends.add(row)
        elif token.type == tokenize.COMMENT or (token.type == tokenize.STRING
                                                and token.start[0] != token.end[0]):
            opaque.update(range(token.start[0] - 1, token.end[0]))
    for row, start in line_depth.items():
        if row not in opaque:
            result[row] = (start, row in ends)
    return result


def _tokens(text: str) -> list[tokenize.TokenInfo]:
    """The tokens of one line's text (which may hold unbalanced brackets)."""
    tokens = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER):
                continue
            tokens.append(token)
    except tokenize.TokenError:  # brackets left open at the end: the tokens so far are whole
        pass
    return tokens


def _balanced(text: str) -> bool:
    depth = 0
    for token in _tokens(text.strip()):
        if token.type == tokenize.OP and token.string in _OPEN:
            depth += 1
        elif token.type == tokenize.OP and token.string in _CLOSE:
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def _top_level_commas(text: str) -> list[int]:
    """Offsets of the commas of `text` outside brackets and outside a lambda's parameters."""
    depth, in_lambda, commas = 0, False, []
    for token in _tokens(text):
        if token.type == tokenize.OP and token.string in _OPEN:
            depth += 1
        elif token.type == tokenize.OP and token.string in _CLOSE:
            depth -= 1
        elif depth == 0 and token.type == tokenize.NAME and token.string == "for":
            return []  # a comprehension's contents: its commas are not items
        elif depth == 0 and token.type == tokenize.NAME and token.string == "lambda":
            in_lambda = True
        elif depth == 0 and token.type == tokenize.OP and token.string == ":":
            in_lambda = False
        elif depth == 0 and not in_lambda and token.type == tokenize.OP and token.string == ",":
            commas.append(token.start[1])
    return commas


def _items(text: str) -> list[str]:
    cuts = [-1, *_top_level_commas(text), len(text)]
    items = [text[a + 1:b].strip() for a, b in itertools.pairwise(cuts)]
    return [item for item in items if item]


def _split_statement(text: str, indent: str, statement: bool = True) -> list[str] | None:
    """A one-line statement (or, not `statement`, one item inside brackets) split at its last
    bracket pair (black's right-hand split)."""
    imported = _from_import_names(text) if statement else None
    if imported is not None:
        head, names = imported
        return [indent + head + "(", *_item_lines(_items(names), indent + "    ", trailing=True),
                indent + ")"]
    bare = _bare_tuple(text) if statement else None
    if bare is not None:
        head, contents = bare
        return _bracketed(head + "(", contents, ")", indent)
    depth, pairs, opener = 0, [], None
    for token in _tokens(text):
        if token.type == tokenize.OP and token.string in _OPEN:
            if depth == 0:
                opener = token
            depth += 1
        elif token.type == tokenize.OP and token.string in _CLOSE:
            depth -= 1
            if depth == 0 and opener is not None:
                pairs.append((opener.end[1], token.start[1]))
    # The last bracket pair whose head and tail fit, passing over pairs that hold one plain
    # name or number when an earlier one fits (`f(...)(tree)[0]` splits at `f(`).
    fitting = [(start, end) for start, end in pairs if end > start
               and len(indent + text[:start]) <= LINE_LIMIT
               and len(indent + text[end:]) <= LINE_LIMIT]
    worth = [(start, end) for start, end in fitting if len(_tokens(text[start:end])) > 1]
    if not (worth or fitting):
        return None
    start, end = (worth or fitting)[-1]
    return _bracketed(text[:start], text[start:end], text[end:], indent)


def _from_import_names(text: str) -> tuple[str, str] | None:
    """(`from x import `, the names) of a `from ... import a, b as c` written without
    brackets (the imports the migration adds, with `as` renames); None otherwise."""
    tokens = _tokens(text)
    if not tokens or tokens[0].string != "from" or any(
            t.type == tokenize.OP and t.string in _OPEN + ";" for t in tokens):
        return None
    keyword = next((t for t in tokens if t.type == tokenize.NAME and t.string == "import"), None)
    if keyword is None or text[keyword.end[1]:].strip() == "*":
        return None
    return text[:keyword.end[1]] + " ", text[keyword.end[1]:].strip()


def _bare_tuple(text: str) -> tuple[str, str] | None:
    """(`return `, `yield ` or `targets = `, the tuple) of a statement that returns, yields or
    assigns a tuple written without brackets; None otherwise."""
    for keyword in ("return ", "yield "):
        if text.startswith(keyword) and _top_level_commas(text[len(keyword):]):
            return keyword, text[len(keyword):]
    equals = [t for t in _tokens(text) if t.type == tokenize.OP and t.string == "="]
    if len(equals) == 1:
        value = text[equals[0].end[1]:]
        if _top_level_commas(value) and _tokens(text)[0].type == tokenize.NAME:
            depth_before = sum(1 if t.string in _OPEN else -1 for t in _tokens(text)
                               if t.type == tokenize.OP and t.string in _OPEN + _CLOSE
                               and t.start[1] < equals[0].start[1])
            if depth_before == 0:
                return text[: equals[0].end[1]] + " ", value.strip()
    return None


def _bracketed(head: str, contents: str, tail: str, indent: str) -> list[str] | None:
    inner = indent + "    "
    contents = contents.strip()
    if len(indent + head) > LINE_LIMIT or not contents:
        return None
    if len(inner + contents) <= LINE_LIMIT:
        return [indent + head, inner + contents, indent + tail]
    clauses = _comprehension_clauses(contents)
    if clauses:
        return [indent + head, *(inner + clause for clause in clauses), indent + tail]
    items = _items(contents)
    if len(items) < 2:
        nested = _split_statement(contents, inner, statement=False)
        return [indent + head, *nested, indent + tail] if nested else None
    return [indent + head, *_item_lines(items, inner, trailing=True), indent + tail]


def _comprehension_clauses(text: str) -> list[str]:
    """A comprehension's element and its `for` / `if` clauses, or [] for anything else."""
    depth, cuts, seen_for = 0, [], False
    for token in _tokens(text):
        if token.type == tokenize.OP and token.string in _OPEN:
            depth += 1
        elif token.type == tokenize.OP and token.string in _CLOSE:
            depth -= 1
        elif depth == 0 and token.type == tokenize.NAME and (
                token.string == "for" or (token.string == "if" and seen_for)):
            seen_for = seen_for or token.string == "for"
            cuts.append(token.start[1])
    if not cuts:
        return []
    bounds = [0, *cuts, len(text)]
    return [text[a:b].strip() for a, b in itertools.pairwise(bounds)]


def _split_items(text: str, indent: str) -> list[str] | None:
    """A line inside brackets holding several items: one item per line."""
    items = _items(text)
    if len(items) < 2:
        return None
    return _item_lines(items, indent, trailing=text.rstrip().endswith(","))


def _item_lines(items: list[str], indent: str, trailing: bool) -> list[str]:
    lines = []
    for number, item in enumerate(items):
        comma = "," if trailing or number < len(items) - 1 else ""
        line = indent + item + comma
        if len(line) > LINE_LIMIT:
            nested = _split_statement(item + comma, indent, statement=False)
            if nested:
                lines.extend(nested)
                continue
        lines.append(line)
    return lines
