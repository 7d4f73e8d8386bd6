"""CSV and TSV triples: a header row names the columns, and each row after it is one edge.

Columns (any order, names in any case): ``head``, ``relation``, ``tail`` (or subject, predicate,
object; source, target ...), and optional ``head_type``, ``tail_type``, ``head_label``,
``tail_label``, ``relation_label``. Without a label column the head and tail cells are the
entities' labels (ids are made from them); with one, they are ids and the label column names them.
Rows are counted as a spreadsheet does: the header is row 1, and a row is its line in the file.

>>> text = "Subject,Predicate,Object,Object Type\\naspirin,treats,headache,symptom\\n"
>>> draft = read_table(text, "drugs.csv", ",")
>>> [(e.key, e.type) for e in draft.entities.values()], draft.links
([('aspirin', None), ('headache', ('symptom', 'row 2'))], [('aspirin', 'treats', 'headache', 'row 2')])
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from library.errors import DataFileError
from library.graph.formats.assemble import Draft

# Header names each column may go by, after lowering case and turning spaces and dashes into "_".
_ENDS = {"head": ("head", "subject", "source", "src", "from", "h", "s"),
         "tail": ("tail", "object", "target", "dst", "to", "t", "o")}
_RELATION = ("relation", "predicate", "rel", "relationship", "property", "edge", "r", "p")
COLUMNS: dict[str, tuple[str, ...]] = {
    "head": _ENDS["head"], "relation": _RELATION, "tail": _ENDS["tail"],
    **{f"{end}_type": tuple(f"{n}_type" for n in names) for end, names in _ENDS.items()},
    **{f"{end}_label": tuple(f"{n}_{s}" for n in names for s in ("label", "name")) for end, names in _ENDS.items()},
    "relation_label": tuple(f"{n}_label" for n in _RELATION),
}
REQUIRED = ("head", "relation", "tail")


def columns(header: list[str], source: str) -> tuple[dict[str, int], list[str]]:
    """Which column holds what (role -> index), and the header names left unread.

    >>> columns(["source", "target", "relation", "weight"], "g.csv")
    ({'head': 0, 'tail': 1, 'relation': 2}, ['weight'])
    >>> columns(["name", "kind"], "g.csv")
    Traceback (most recent call last):
    ...
    library.errors.DataFileError: g.csv:1: no head, relation or tail column: the header row names 'name', 'kind'; \
name them head, relation, tail (or subject, predicate, object; source, relation, target), with optional \
head_type, tail_type, head_label, tail_label, relation_label
    """
    role_of = {name: role for role, names in COLUMNS.items() for name in names}
    found: dict[str, int] = {}
    ignored = []
    for i, name in enumerate(header):
        role = role_of.get(re.sub(r"[\s\-]+", "_", name.strip().lower()))
        if role is None:
            ignored.append(name)
        elif role in found:
            raise DataFileError(source, f"columns {header[found[role]]!r} and {name!r} both name the {role}", line=1)
        else:
            found[role] = i
    missing = [r for r in REQUIRED if r not in found]
    if missing:
        what = ", ".join(missing[:-1]) + (" or " if len(missing) > 1 else "") + missing[-1]
        named = ", ".join(repr(h) for h in header) or "nothing"
        raise DataFileError(source, f"no {what} column: the header row names {named}; name them head, relation, "
                                    "tail (or subject, predicate, object; source, relation, target), with optional "
                                    "head_type, tail_type, head_label, tail_label, relation_label", line=1)
    return found, ignored


def read_table(text: str, source: str | Path, delimiter: str) -> Draft:
    """A :class:`Draft` of the triples in ``text`` (a whole CSV or TSV file)."""
    source = str(source)
    name = "TSV" if delimiter == "\t" else "CSV"
    draft = Draft(source, name, type_hint="their head_type or tail_type cells")
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    header = next(reader, None)
    if header is None:
        raise DataFileError(source, "empty file: a header row naming head, relation and tail comes first")
    found, ignored = columns(header, source)
    if ignored:
        draft.notes.append(f"ignored columns: {', '.join(map(repr, ignored))}")
    start = reader.line_num + 1
    for cells in _rows(reader, source):
        row, start = start, reader.line_num + 1  # a quoted cell may span lines: a row is its first line
        if not any(c.strip() for c in cells):
            continue
        if any(c.strip() for c in cells[len(header):]):
            raise DataFileError(source, f"{len(cells)} cells, but the header names {len(header)} columns "
                                        f"(a {'tab' if delimiter == chr(9) else repr(delimiter)} inside an "
                                        "unquoted cell?)", line=row)
        cell = {role: cells[i].strip() if i < len(cells) else "" for role, i in found.items()}
        for role in REQUIRED:
            if not cell[role]:
                raise DataFileError(source, f"the {header[found[role]]!r} cell is empty: every row needs a head, "
                                            "a relation and a tail", line=row)
        place = f"row {row}"
        for end in ("head", "tail"):
            # With a label column the end's cell is an id, kept as written where it can be.
            has_label = f"{end}_label" in found
            draft.entity(cell[end], place, label=cell.get(f"{end}_label") or None,
                         type=cell.get(f"{end}_type") or None, ident=cell[end] if has_label else None)
        draft.relation(cell["relation"], place, label=cell.get("relation_label") or None)
        draft.link(cell["head"], cell["relation"], cell["tail"], place)
    return draft


def _rows(reader, source: str):
    """``reader``'s rows; a row csv cannot read (an unclosed quote swallowing the file) is a DataFileError."""
    while True:
        first = reader.line_num + 1  # where the row csv is about to read starts
        try:
            yield next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise DataFileError(source, f"cannot read the row that starts here as "
                                        f"{'TSV' if reader.dialect.delimiter == chr(9) else 'CSV'}: {exc} "
                                        "(an unclosed quote?)", line=first) from None


def read_table_file(path: str | Path, delimiter: str) -> Draft:
    """Read a CSV (``delimiter`` ","; ";" where the header has no comma, as some spreadsheets
    write) or TSV (``"\\t"``) file; a UTF-8 byte-order mark is allowed."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataFileError(path, f"not UTF-8 text (byte {exc.start}): save the table as UTF-8") from None
    first = text.split("\n", 1)[0]
    if delimiter == "," and "," not in first and ";" in first:
        delimiter = ";"
    return read_table(text, path, delimiter)
