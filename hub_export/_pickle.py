"""A pickle walker: one linear, size-bounded pass over a pickle's opcodes that refuses every global outside an
allow-list, without running anything.

Unpickling imports whatever globals the stream names (``GLOBAL``/``INST`` name them inline, ``STACK_GLOBAL`` takes
two strings from the stack) and calls them, which is how a crafted pickle runs code. :func:`walk_pickle` reads the
opcodes with :func:`pickletools.genops` (which decodes, never executes) and keeps a model of the unpickler's stack
(marks included) holding, for each slot, the string it would hold or ``None``. A ``STACK_GLOBAL`` whose two operands
are not known strings is refused, as are the copyreg extension opcodes (globals by number), persistent ids unless
the caller's loader resolves them (``torch.load`` does), anything after ``STOP`` and any malformed stream. Every
protocol is walked the same way, including protocol 0, which has no header.

Each opcode consumes at least one byte and does constant work on the model stack, so the walk is linear in the
size of the pickle, which is checked against ``max_bytes`` before the first opcode.
"""

from __future__ import annotations

import io
import pickletools
from collections.abc import Callable, Iterable

from .errors import UnsafeExportError

__all__ = ["walk_pickle"]

_STRING_OPS = frozenset(
    {"UNICODE", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "STRING", "BINSTRING", "SHORT_BINSTRING"}
)
_GET_OPS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_PUT_OPS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_EXTENSION_OPS = frozenset({"EXT1", "EXT2", "EXT4"})
_MARK = object()


class _Malformed(Exception):
    pass


def _effects() -> dict[str, tuple[int, int, bool]]:
    """``{opcode: (items popped below the mark, items pushed, pops to a mark)}`` from pickletools' stack notes."""
    table = {}
    for op in pickletools.opcodes:
        before = op.stack_before
        if pickletools.markobject in before:
            table[op.name] = (before.index(pickletools.markobject), len(op.stack_after), True)
        else:
            table[op.name] = (len(before), len(op.stack_after), False)
    return table


_EFFECTS = _effects()


def walk_pickle(
    data: bytes,
    where: str,
    allowed: frozenset[tuple[str, str]] | Callable[[str, str], bool],
    *,
    max_bytes: int,
    persistent_ids: bool = False,
    hint: str = "",
) -> None:
    """Walk a pickle's opcodes once; refuse it unless every global it imports is allowed.

    Args:
        data: The whole pickle (nothing may follow its ``STOP``).
        where: Its location for messages (``file:entry``).
        allowed: ``(module, name)`` pairs, or a predicate over them.
        max_bytes: Refuse a pickle larger than this before reading it.
        persistent_ids: Accept ``PERSID``/``BINPERSID`` (the caller's unpickler resolves them, as ``torch.load``
            resolves storages).
        hint: Appended to the message that refuses a global (how to load a file one trusts).

    Raises:
        UnsafeExportError: A global outside ``allowed``, a computed global, an extension-registry or persistent-id
            opcode, a malformed pickle, bytes after its end, or a pickle over ``max_bytes``.
    """
    if len(data) > max_bytes:
        raise UnsafeExportError(f"{where}: a {len(data)} byte pickle, over the {max_bytes} byte limit; refusing it.")
    check: Callable[[str, str], bool] = allowed if callable(allowed) else (lambda m, n: (m, n) in allowed)
    try:
        end = _walk(pickletools.genops(io.BytesIO(data)), where, check, persistent_ids, hint)
    except UnsafeExportError:
        raise
    except _Malformed as exc:
        raise UnsafeExportError(f"{where}: not a valid pickle ({exc}); refusing to load it.") from None
    except Exception as exc:  # noqa: BLE001 - genops raises ValueError, struct.error, UnicodeDecodeError... on garbage
        raise UnsafeExportError(f"{where}: not a valid pickle ({exc}); refusing to load it.") from None
    if end != len(data):
        raise UnsafeExportError(f"{where}: {len(data) - end} unexpected bytes after the pickle; refusing it.")


def _walk(
    ops: Iterable[tuple[pickletools.OpcodeInfo, object, int | None]],
    where: str,
    check: Callable[[str, str], bool],
    persistent_ids: bool,
    hint: str,
) -> int:
    stack: list[object] = []  # a str the unpickler would hold there, None for any other value, _MARK for a mark
    marks: list[int] = []
    memo: dict[object, object] = {}

    def allow(module: str, name: str) -> None:
        if not check(module, name):
            raise UnsafeExportError(
                f"{where}: the pickle references {module}.{name}, which is not an allow-listed global; loading it "
                f"could run arbitrary code.{(' ' + hint) if hint else ''}"
            )

    def pop(count: int) -> list[object]:
        floor = marks[-1] if marks else 0
        if len(stack) - count < floor:
            raise _Malformed("stack underflow")
        taken = stack[len(stack) - count :] if count else []
        del stack[len(stack) - count :]
        return taken

    for opcode, arg, pos in ops:
        name = opcode.name
        if name == "STOP":
            pop(1)
            return (pos or 0) + 1
        if name in _EXTENSION_OPS:
            raise UnsafeExportError(f"{where}: opcode {name} (the copyreg extension registry) is not allowed.")
        if name in ("PERSID", "BINPERSID") and not persistent_ids:
            raise UnsafeExportError(f"{where}: opcode {name} (a persistent id) is not allowed in this pickle.")
        if name in ("GLOBAL", "INST"):
            module, _, attr = str(arg).partition(" ")
            allow(module, attr)
        elif name == "STACK_GLOBAL":
            names = pop(2)
            if not isinstance(names[0], str) or not isinstance(names[1], str):
                raise UnsafeExportError(f"{where}: STACK_GLOBAL at byte {pos} with a computed name; refusing it.")
            allow(names[0], names[1])
            stack.append(None)
            continue
        if name in _STRING_OPS:
            stack.append(arg.decode("latin-1") if isinstance(arg, bytes) else str(arg))
        elif name in _GET_OPS:
            if arg not in memo:
                raise _Malformed(f"memo key {arg} read before it is written")
            stack.append(memo[arg])
        elif name in _PUT_OPS:
            if len(stack) <= (marks[-1] if marks else 0):
                raise _Malformed("memo write with an empty stack")
            memo[arg] = stack[-1]
        elif name == "MEMOIZE":
            if len(stack) <= (marks[-1] if marks else 0):
                raise _Malformed("memo write with an empty stack")
            memo[len(memo)] = stack[-1]
        elif name == "DUP":
            top = pop(1)[0]
            stack.extend((top, top))
        elif name == "MARK":
            marks.append(len(stack))
        else:
            below, pushed, to_mark = _EFFECTS[name]
            if to_mark:
                if not marks:
                    raise _Malformed(f"{name} without a mark")
                del stack[marks.pop() :]
            pop(below)
            stack.extend([None] * pushed)
    raise _Malformed("no STOP opcode")
