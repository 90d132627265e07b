"""One grammar for the specs of mutators, oracles, criteria and schedulers: ``name`` or ``name(key=value, ...)``.

    parse("gauss(std=0.05)")                 -> Spec("gauss", kwargs={"std": 0.05})
    parse("uncertain(0.7)")                  -> Spec("uncertain", args=(0.7,))      (a positional value)
    parse("nc(scaling=channel-means)", words=True)   -> a bare word is kept as the string it is
    parse("kmnc:k=10:layers=conv1+fc", words=True)   -> the criteria's older colon spelling, still read

Values are Python literals (numbers, strings, booleans, None, tuples); ``words=True`` also takes a bare
word such as ``channel-means`` or ``conv1+fc`` as its text (criteria name layers and modes that way). Code
is never evaluated: values are read with ``ast.literal_eval``. Each kind's factory (``make_mutator``,
``make_oracle``, ``make_criterion``, ``make_scheduler``) looks the name up in its registry.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from .errors import ParameterError

_NAME = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_-]*)\s*(?:\((.*)\))?\s*", re.DOTALL)


@dataclass(frozen=True)
class Spec:
    name: str
    args: tuple = ()  # positional values (older spellings such as confusion(3,5))
    kwargs: dict = field(default_factory=dict)  # named values, in the order given

    def __str__(self) -> str:
        return format_spec(self.name, self.kwargs, self.args)


def parse(text: str, what: str = "spec", *, words: bool = False, positional: bool = True) -> Spec:
    """A spec string -> :class:`Spec`; one-line ParameterError naming ``what`` ("mutator", "oracle", ...) for
    a malformed one. ``positional=False`` refuses unnamed values; ``words=True`` accepts bare words and the
    colon spelling ``name:key=value:key=value``."""
    if not isinstance(text, str):
        raise ParameterError(
            f"a {what} spec must be a string such as 'name' or 'name(key=value)'. Got {text!r} instead."
        )
    if words and ":" in text and "(" not in text:
        return _colon_spec(text, what)
    match = _NAME.fullmatch(text)
    if not match:
        raise ParameterError(f"malformed {what} spec {text!r}: expected name or name(key=value, ...)")
    name, inside = match.group(1), match.group(2)
    if inside is None or not inside.strip():
        return Spec(name)
    try:  # ast.parse only builds a syntax tree; literal_eval below accepts literals only
        call = ast.parse(f"f({inside})", mode="eval").body
    except SyntaxError as exc:
        raise ParameterError(f"malformed {what} spec {text!r}: {exc.msg}; expected name(key=value, ...)") from None
    if (
        not isinstance(call, ast.Call)
        or any(kw.arg is None for kw in call.keywords)
        or any(isinstance(a, ast.Starred) for a in call.args)
        or (call.args and not positional)
    ):
        raise ParameterError(f"malformed {what} spec {text!r}: give parameters by name, as name(key=value, ...)")
    source = f"f({inside})"
    args = tuple(_value(node, source, text, what, None, words) for node in call.args)
    kwargs = {}
    for kw in call.keywords:
        if kw.arg in kwargs:
            raise ParameterError(f"malformed {what} spec {text!r}: parameter {kw.arg!r} given twice")
        kwargs[kw.arg] = _value(kw.value, source, text, what, kw.arg, words)
    return Spec(name, args, kwargs)


def _value(node, source: str, text: str, what: str, key: str | None, words: bool):
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        written = ast.get_source_segment(source, node) or ast.unparse(node)
        if words and re.fullmatch(r"[A-Za-z0-9_.+\-]+", written):
            return written
        which = f"the value of {key!r}" if key else "a value"
        raise ParameterError(
            f"malformed {what} spec {text!r}: {which} must be a Python literal (number, bool, "
            f"string or tuple). Got {written!r}"
            + (f"; a string goes in quotes: {key}='{written}'" if key and written.isidentifier() else "")
        ) from None


def _colon_spec(text: str, what: str) -> Spec:
    """``name:key=value[:key=value...]``: values as written (the reader converts them)."""
    name, *parts = text.split(":")
    kwargs = {}
    for part in parts:
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ParameterError(
                f"{what} spec {text!r}: expected name:key=value[:key=value...] or name(key=value, ...); got {part!r}."
            )
        if key in kwargs:
            raise ParameterError(f"{what} spec {text!r} sets {key!r} twice.")
        kwargs[key] = value.strip()
    return Spec(name.strip(), (), kwargs)


def format_spec(name: str, kwargs: dict | None = None, args: tuple = ()) -> str:
    """The canonical spelling ``name(key=value, ...)`` (``name`` alone without parameters)."""
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in (kwargs or {}).items()]
    return f"{name}({', '.join(parts)})" if parts else name


def split_specs(text: str) -> list[str]:
    """Split a list of specs at commas outside parentheses, brackets and quotes."""
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [part.strip() for part in parts]
