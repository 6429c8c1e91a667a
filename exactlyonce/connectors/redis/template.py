"""Key templates: ``str.format``-style templates whose fields name columns (``"user:{user_id}"``),
checked once in the driver and rendered per Arrow batch in the executors."""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from exactlyonce.errors import ConfigError


@dataclass(frozen=True)
class KeyTemplate:
    """``str.format``-style key template whose fields name columns: ``"user:{user_id}"``."""

    text: str
    parts: tuple[tuple[str, str | None, str, str | None], ...]

    @classmethod
    def parse(cls, text: object) -> KeyTemplate:
        """The template of ``text``, or a ConfigError saying what is wrong with it."""
        if not isinstance(text, str) or not text:
            raise ConfigError("key_template", "a non-empty str.format template is required")
        try:
            parsed = tuple(
                (literal, name, spec or "", conv)
                for literal, name, spec, conv in string.Formatter().parse(text)
            )
        except ValueError as exc:
            raise ConfigError("key_template", f"not a str.format template: {exc}") from None
        for _, name, spec, _conv in parsed:
            if name is None:
                continue
            if name == "" or name.isdigit():
                raise ConfigError("key_template", "fields must name columns, as in {user_id}")
            if "." in name or "[" in name:
                raise ConfigError(
                    "key_template", f"{{{name}}}: name a column, not an attribute or an item"
                )
            if "{" in spec:
                raise ConfigError("key_template", f"{{{name}}}: nested fields are not supported")
        template = cls(text, parsed)
        try:
            text.format_map({name: "x" for name in template.fields})
        except (ValueError, TypeError) as exc:
            raise ConfigError(
                "key_template", f"cannot format it with string column values: {exc}"
            ) from None
        return template

    @property
    def fields(self) -> tuple[str, ...]:
        """The column names the template uses, in order, each once."""
        return tuple(dict.fromkeys(p[1] for p in self.parts if p[1] is not None))

    @property
    def fixed_start(self) -> str:
        """The text every rendered key begins with: the literal before the first field (the
        whole key when there is no field). Nothing after it is known before rendering."""
        start = ""
        for literal, name, _, _ in self.parts:
            start += literal
            if name is not None:
                break
        return start

    def always_in(self, namespace: str) -> bool:
        """Whether EVERY key the template renders begins with ``namespace``."""
        return self.fixed_start.startswith(namespace)

    def may_reach(self, namespace: str) -> bool:
        """Whether SOME key the template renders may begin with ``namespace`` (a value can
        complete the fixed start into it). False means no value ever can."""
        start = self.fixed_start
        if not self.fields:  # one constant key
            return start.startswith(namespace)
        return start.startswith(namespace) or namespace.startswith(start)

    def render(self, batch: pa.RecordBatch) -> list[str]:
        """The key of every row; the columns are strings, non-null (else dead-lettered)."""
        n = batch.num_rows
        if not self.fields:
            return [self.text.format()] * n
        if all(spec == "" and conv is None for _, _, spec, conv in self.parts):
            pieces: list[Any] = []
            for literal, name, _, _ in self.parts:
                if literal:
                    pieces.append(pa.scalar(literal, pa.string()))
                if name is not None:
                    pieces.append(batch.column(name).cast(pa.string()))
            if len(pieces) == 1:
                return list(pieces[0].to_pylist())
            joined = pc.binary_join_element_wise(*pieces, pa.scalar("", pa.string()))
            return list(joined.to_pylist())
        columns = {name: batch.column(name).to_pylist() for name in self.fields}
        names = list(columns)
        return [
            self.text.format_map(dict(zip(names, values, strict=True)))
            for values in zip(*columns.values(), strict=True)
        ]
