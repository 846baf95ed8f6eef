"""JSON values that every backend stores and reads back unchanged, or a clear refusal.

A job's payload, its result and the other JSON columns are stored as jsonb on PostgreSQL
and as text (checked by `json_valid`) on SQLite. Some values Python's json module writes
happily are not storable or do not come back equal:

- a lone surrogate (`"\\ud800"`): not Unicode text. jsonb refuses it; SQLite stores the
  escape, and every later read of the row fails to encode the answer (HTML or JSON);
- the NUL character (`"\\u0000"`): jsonb refuses it (and PostgreSQL text too);
- NaN and ±Infinity: not JSON;
- numbers beyond ±(2**53 − 1) (I-JSON, RFC 7493): a larger float comes back from jsonb as
  an integer of another value, and readers in JavaScript lose a larger integer's digits;
- object keys other than strings: json writes `1` as `"1"`, so the value read back differs
  (and `{1: …, "1": …}` loses an entry);
- anything nested so deeply that encoding or decoding it hits the recursion limit.

`checked_json` refuses all of these, plus values over a size limit, with a message that
names the value (`what`) and where in it the problem is. `checked_text` refuses the first
two in a string stored in a text column (a key, a name, a reason). `safe_text` is for
text that must be stored whatever it holds (an exception's message, say): it replaces
what cannot be stored and cuts it to a length.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_SAFE_INTEGER = 2**53 - 1  # I-JSON: every integer up to it is exact as a double
REPLACEMENT = "\ufffd"
TRUNCATED = "… [{n} more characters]"
PATH_CHARS = 120  # a path in a message is cut to this many characters
KEY_CHARS = 40  # and each key in it to this many

ERR_SURROGATE = "{what} contains a lone surrogate ({char}) {place} {path}: send valid UTF-8 text"
ERR_NUL = (
    "{what} must not contain the NUL character (\\u0000), found {place} {path}: "
    "PostgreSQL cannot store it"
)
ERR_KEY = "{what} has a non-string key ({key}) at {path}: JSON object keys are strings"
ERR_NUMBER = (
    "{what} has a number out of range at {path}: numbers must lie within ±{limit} "
    "(2**53 - 1); send larger ones as strings"
)
ERR_TYPE = "{what} must be JSON-serialisable: {reason}"
ERR_DEPTH = "{what} is nested deeper than {depth} levels (at {path})"
ERR_SIZE = "{what} is {size} bytes encoded as JSON; the limit is {limit}"
ERR_TEXT = (
    "{what} must not contain the NUL character (\\u0000) or a lone surrogate"
    " (\\ud800-\\udfff): send valid UTF-8 text."
)


class JsonValueError(ValueError):
    """A value `checked_json` refuses; the message names it and says what to fix.
    ``path`` is where in the value the problem was found (e.g. ``payload['a'][0]``)."""

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


def _key_text(key: Any) -> str:
    text = repr(key)  # repr escapes surrogates and control characters: always printable
    return text if len(text) <= KEY_CHARS else text[: KEY_CHARS - 1] + "…"


def _path_text(path: tuple[Any, ...], what: str) -> str:
    text = what + "".join(f"[{_key_text(step)}]" for step in path)
    return text if len(text) <= PATH_CHARS else text[: PATH_CHARS - 1] + "…"


def _string_problem(text: str, what: str, path_text: str, place: str = "at") -> str | None:
    if "\x00" in text:
        return ERR_NUL.format(what=what, place=place, path=path_text)
    for char in text:
        if "\ud800" <= char <= "\udfff":
            char_text = f"\\u{ord(char):04x}"
            return ERR_SURROGATE.format(what=what, char=char_text, place=place, path=path_text)
    return None


def _has_bad_char(text: str) -> bool:
    # Fast path: a string that encodes as UTF-8 has no surrogate.
    if "\x00" in text:
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _check_walk(value: Any, *, what: str, max_depth: int) -> None:
    """Every problem but the size, found without recursion (so a value nested 100,000
    deep is refused, not a RecursionError)."""
    # (value, path, depth of the containers around it)
    stack: list[tuple[Any, tuple[Any, ...], int]] = [(value, (), 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            if _has_bad_char(item):
                problem = _string_problem(item, what, _path_text(path, what))
                if problem:
                    raise JsonValueError(problem, path=_path_text(path, what))
        elif item is None or isinstance(item, bool):
            pass
        elif isinstance(item, int):
            if not -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                where = _path_text(path, what)
                message = ERR_NUMBER.format(what=what, path=where, limit=MAX_SAFE_INTEGER)
                raise JsonValueError(message, path=where)
        elif isinstance(item, float):
            where = _path_text(path, what)
            if not math.isfinite(item):
                raise JsonValueError(
                    ERR_TYPE.format(what=what, reason=_json_reason(item)), path=where
                )
            if not -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                message = ERR_NUMBER.format(what=what, path=where, limit=MAX_SAFE_INTEGER)
                raise JsonValueError(message, path=where)
        elif isinstance(item, dict | list | tuple):
            if depth >= max_depth:
                where = _path_text(path, what)
                raise JsonValueError(
                    ERR_DEPTH.format(what=what, depth=max_depth, path=where), path=where
                )
            if isinstance(item, dict):
                children = []
                for key, child in item.items():
                    if not isinstance(key, str):
                        where = _path_text(path, what)
                        message = ERR_KEY.format(what=what, key=_key_text(key), path=where)
                        raise JsonValueError(message, path=where)
                    if _has_bad_char(key):
                        where = _path_text((*path, key), what)
                        problem = _string_problem(key, what, where, place="in the key at")
                        if problem:
                            raise JsonValueError(problem, path=where)
                    children.append((child, (*path, key), depth + 1))
            else:
                children = [(child, (*path, i), depth + 1) for i, child in enumerate(item)]
            stack.extend(reversed(children))  # report the first problem in reading order
        else:
            where = _path_text(path, what)
            raise JsonValueError(ERR_TYPE.format(what=what, reason=_json_reason(item)), path=where)


def _json_reason(item: Any) -> str:
    """What json.dumps says about `item` (the same words as before this module)."""
    try:
        json.dumps(item, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return f"{type(item).__name__} is not supported"  # pragma: no cover


def checked_json(
    value: Any, *, what: str, max_bytes: int, max_depth: int, limit_name: str = ""
) -> Any:
    """`value` as it is stored and read back (tuples become lists), or JsonValueError.

    Refused: strings or keys with a lone surrogate or NUL, non-string keys, NaN and
    ±Infinity, numbers beyond ±(2**53 − 1), other types than dict, list, tuple, str, int,
    float, bool and None, containers nested more than `max_depth` deep (a scalar is at
    depth 0, `{"a": 1}` at 1), and values whose JSON text (as the database gets it) is
    over `max_bytes`. Messages start with `what` (e.g. "payload") and say where; the
    size message names `limit_name` (a setting) if given.
    """
    if value is None:  # most handlers return nothing: no walk, no text
        return None
    _check_walk(value, what=what, max_depth=max_depth)
    text = json.dumps(value, allow_nan=False)  # ensure_ascii: as Django writes the column
    if len(text) > max_bytes:  # ASCII only: characters are bytes
        limit = f"{max_bytes} ({limit_name})" if limit_name else str(max_bytes)
        raise JsonValueError(ERR_SIZE.format(what=what, size=len(text), limit=limit))
    return json.loads(text)


def checked_text(text: str, *, what: str) -> str:
    """`text` if every backend stores it in a text column and reads it back the same;
    JsonValueError (ERR_TEXT, naming `what`) for a NUL character or a lone surrogate."""
    if _has_bad_char(text):
        raise JsonValueError(ERR_TEXT.format(what=what))
    return text


def _replace_bad_chars(text: str) -> str:
    if not _has_bad_char(text):
        return text
    text = text.replace("\x00", REPLACEMENT)
    # UTF-16 with surrogatepass joins a pair of surrogates back into its character and
    # leaves a lone one for the decoder to replace.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def safe_text(text: str, *, max_chars: int) -> str:
    """`text` made storable anywhere: NUL characters and lone surrogates become U+FFFD
    (a surrogate pair becomes its character), and text longer than `max_chars` is cut,
    ending with "… [N more characters]" within the limit. Not a str: its str()."""
    if not isinstance(text, str):
        text = str(text)
    text = _replace_bad_chars(text)
    if len(text) <= max_chars:
        return text
    keep = max_chars
    while True:  # the marker's length depends on how many characters it stands for
        marker = TRUNCATED.format(n=len(text) - keep)
        if len(marker) > max_chars:
            return text[:max_chars]
        if keep + len(marker) <= max_chars:
            break
        keep = max_chars - len(marker)
    return text[:keep] + marker


def safe_json(value: Any) -> Any:
    """A JSON value read back (from a row stored before the checks existed, or an error
    answer echoing input) with every string and key made encodable as safe_text does,
    uncut. Values without such characters come back as they are."""
    if isinstance(value, str):
        return _replace_bad_chars(value)
    if isinstance(value, dict):
        return {
            _replace_bad_chars(k) if isinstance(k, str) else k: safe_json(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [safe_json(item) for item in value]
    return value
