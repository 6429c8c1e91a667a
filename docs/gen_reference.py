"""Generate ``reference/configuration.md`` from the config models (run by mkdocs-gen-files).

Every model in :func:`models` gets a section: its docstring, then one row per field with the
field's name (and alias), type, default, constraints and description (pydantic's
``description``, else the ``#`` comment beside or above the field in the source). Models that
a listed model refers to (nested sections such as ``trigger:``) get a section too; one that
subclasses a listed model shows only the fields it adds. Credentials (``SecretStr`` fields)
show as *secret*, never a value.

When modules move, repoint :func:`models`: it is the only place that names them.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import re
import sys
import textwrap
import tokenize
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PAGE = "reference/configuration.md"


def models() -> list[tuple[str, type]]:
    """(title, model) for every config model the reference shows, in page order.

    The ONE place that names modules: repoint it when they move.
    """
    from exactlyonce.connectors import registry
    from exactlyonce.connectors.base.config import DedupSettings
    from exactlyonce.connectors.kafka.buffer_config import KafkaBuffer
    from exactlyonce.dedup.config import DedupConfig
    from exactlyonce.integration.config import sources
    from exactlyonce.integration.config.pipeline import PipelineConfig

    listed: list[tuple[str, type]] = [("Pipeline file", PipelineConfig)]
    listed += [
        (f"Source `type: {_literal_default(m, 'type')}`", m)
        for m in union_members(sources.SourceConfig)
    ]
    listed += [(f"Sink `type: {kind.name}`", kind.config) for kind in registry.kinds()]
    listed += [
        ("Kafka buffer (`KafkaBuffer`, a sink's `buffer:`)", KafkaBuffer),
        ("Dedup settings (a sink's `dedup:` section)", DedupSettings),
        ("Dedup catalog (`DedupConfig`, Python)", DedupConfig),
    ]
    return listed


# -- introspection ----------------------------------------------------------------------


@dataclasses.dataclass
class Field:
    name: str
    alias: str | None
    alias_choices: bool
    annotation: Any
    required: bool
    default: Any
    constraints: list[str]
    description: str
    secret: bool


def union_members(tp: Any) -> list[type]:
    """The classes of a (possibly Annotated) union type."""
    tp = _strip_annotated(tp)
    return [a for a in typing.get_args(tp) if isinstance(a, type)] or [tp]


def _strip_annotated(tp: Any) -> Any:
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _literal_default(model: type, name: str) -> str:
    args = typing.get_args(_strip_annotated(_fields_of(model)[name].annotation))
    return str(args[0]) if args else name


def _is_pydantic(model: type) -> bool:
    return hasattr(model, "model_fields")


def _own_doc(model: type) -> str:
    doc = model.__dict__.get("__doc__")
    return inspect.cleandoc(doc) if doc else ""


def _field_comments(model: type) -> dict[str, str]:
    """``#`` comments beside or directly above each field in the class bodies of ``model``
    and its bases (the nearest class wins)."""
    found: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if cls.__module__ in ("builtins", "typing") or cls.__module__.startswith("pydantic"):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(cls))
        except (OSError, TypeError):
            continue
        comments: dict[int, str] = {}
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0]] = tok.string.lstrip("#").strip()
        lines = source.splitlines()
        for lineno, line in enumerate(lines, start=1):
            match = re.match(r"^    (\w+)\s*:", line)
            if not match or match.group(1).startswith("_"):
                continue
            name = match.group(1)
            texts = []
            above = lineno - 1
            block = []
            while above in comments and lines[above - 1].strip().startswith("#"):
                block.insert(0, comments[above])
                above -= 1
            texts += block
            # a trailing comment on the field's own line(s): up to the next field or blank
            end = lineno
            while end <= len(lines):
                if end in comments and not lines[end - 1].strip().startswith("#"):
                    texts.append(comments[end])
                nxt = lines[end] if end < len(lines) else ""
                if not nxt.startswith("        ") or nxt.strip().startswith("#"):
                    break
                end += 1
            if texts:
                found[name] = " ".join(texts)
            elif name in found and name in cls.__dict__.get("__annotations__", {}):
                del found[name]
    return found


def _fields_of(model: type) -> dict[str, Any]:
    if _is_pydantic(model):
        return dict(model.model_fields)  # type: ignore[attr-defined]
    return {f.name: f for f in dataclasses.fields(model)}


def _contains(tp: Any, target: type) -> bool:
    tp = _strip_annotated(tp)
    if tp is target:
        return True
    return any(_contains(a, target) for a in typing.get_args(tp))


def fields(model: type) -> list[Field]:
    from pydantic import SecretStr

    comments = _field_comments(model)
    out = []
    if _is_pydantic(model):
        for name, info in model.model_fields.items():  # type: ignore[attr-defined]
            alias = info.alias
            if alias is None and info.validation_alias is not None:
                choices = getattr(info.validation_alias, "choices", None)
                alias = ", ".join(str(c) for c in choices if c != name) if choices else None
            required = info.is_required()
            if required:
                default = None
            elif info.default_factory is not None:
                default = info.default_factory()  # type: ignore[call-arg]
            else:
                default = info.default
            out.append(
                Field(
                    name=name,
                    alias=alias,
                    alias_choices=info.alias is None and alias is not None,
                    annotation=info.annotation,
                    required=required,
                    default=default,
                    constraints=_constraints(info.metadata, info.annotation),
                    description=info.description or comments.get(name, ""),
                    secret=_contains(info.annotation, SecretStr),
                )
            )
        return out
    hints = typing.get_type_hints(model)
    for f in dataclasses.fields(model):
        if f.default is not dataclasses.MISSING:
            required, default = False, f.default
        elif f.default_factory is not dataclasses.MISSING:
            required, default = False, f.default_factory()
        else:
            required, default = True, None
        out.append(
            Field(
                name=f.name,
                alias=None,
                alias_choices=False,
                annotation=hints.get(f.name, f.type),
                required=required,
                default=default,
                constraints=[],
                description=comments.get(f.name, ""),
                secret=_contains(hints.get(f.name, f.type), SecretStr),
            )
        )
    return out


_BOUNDS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}


def _constraints(metadata: list[Any], annotation: Any) -> list[str]:
    items: list[Any] = list(metadata)
    # constraints inside Annotated[...] of the annotation (e.g. StrictInt | None)
    for arg in [annotation, *typing.get_args(annotation)]:
        if typing.get_origin(arg) is typing.Annotated:
            items += list(typing.get_args(arg)[1:])
    out = []
    for item in items:
        for attr, symbol in _BOUNDS.items():
            value = getattr(item, attr, None)
            if value is not None and type(item).__name__.lower() == attr:
                out.append(f"{symbol} {value:,}" if isinstance(value, int) else f"{symbol} {value}")
        if type(item).__name__ == "MinLen":
            out.append(f"min length {item.min_length}")
        elif type(item).__name__ == "MaxLen":
            out.append(f"max length {item.max_length}")
        elif type(item).__name__ == "Strict" and getattr(item, "strict", False):
            out.append("strict (no coercion)")
        elif type(item).__name__ == "BeforeValidator" and "one_to_list" in repr(item.func):
            out.append("one name or a list")
    return list(dict.fromkeys(out))


# -- rendering --------------------------------------------------------------------------


def anchor(model: type) -> str:
    return f"{model.__module__}.{model.__qualname__}".replace(".", "-").replace("_", "-").lower()


class Page:
    def __init__(self, listed: list[tuple[str, type]]) -> None:
        self.listed = listed
        self.titles: dict[type, str] = {m: t for t, m in listed}
        self.queue: list[type] = []

    def link(self, model: type) -> str:
        if model not in self.titles:
            self.titles[model] = f"`{model.__name__}`"
            self.queue.append(model)
        return f"[{model.__name__}](#{anchor(model)})"

    def type_text(self, tp: Any) -> str:
        from pydantic import BaseModel, SecretStr

        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin is typing.Annotated:
            return self.type_text(args[0])
        if tp is SecretStr:
            return "secret"
        if tp is type(None):
            return "None"
        if tp is typing.Any:
            return "any"
        if origin is typing.Literal:
            return " \\| ".join(f'`"{a}"`' if isinstance(a, str) else f"`{a}`" for a in args)
        if origin in (typing.Union, types.UnionType):
            return " \\| ".join(self.type_text(a) for a in args)
        if origin in (tuple, list):
            inner = args[0] if args else typing.Any
            return f"list of {self.type_text(inner)}"
        if origin is dict:
            return f"mapping {self.type_text(args[0])} → {self.type_text(args[1])}"
        if origin is not None and "Callable" in str(origin):
            return "callable"
        if isinstance(tp, type):
            if issubclass(tp, BaseModel) or dataclasses.is_dataclass(tp):
                return self.link(tp)
            return f"`{tp.__name__}`"
        return f"`{tp}`".replace("|", "\\|")

    @staticmethod
    def default_text(field: Field) -> str:
        from pydantic import BaseModel

        if field.required:
            return "**required**"
        value = field.default
        if field.secret and value is not None:
            return "*secret*"
        if isinstance(value, BaseModel):
            return "its defaults"
        if isinstance(value, str):
            return f'`"{value}"`'
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10_000:
            return f"`{value:_}`"
        if isinstance(value, tuple):
            value = list(value)
        return f"`{value!r}`".replace("|", "\\|")

    def section(self, title: str, model: type) -> Iterator[str]:
        yield f"## {title} {{ #{anchor(model)} }}"
        yield ""
        yield f"`{model.__module__}.{model.__qualname__}`"
        yield ""
        doc = _own_doc(model)
        if doc:
            yield rst_to_markdown(doc)
            yield ""
        own = fields(model)
        base = next((b for b in model.__mro__[1:] if b in [m for _, m in self.listed]), None)
        if base is not None and model not in [m for _, m in self.listed]:
            inherited = set(_fields_of(base))
            own = [f for f in own if f.name not in inherited]
            yield f"Every setting of {self.link(base)}, plus:"
            yield ""
        if not own:
            yield "*No fields.*"
            yield ""
            return
        yield "| field | type | default | constraints | description |"
        yield "| --- | --- | --- | --- | --- |"
        for f in own:
            name = f"`{f.name}`"
            if f.alias and f.alias_choices:
                name += f" (or `{f.alias}`)"
            elif f.alias:
                name = f"`{f.alias}` (Python attribute `{f.name}`)"
            description = rst_to_markdown(f.description).replace("|", "\\|")
            if f.secret:
                description = ("**Credential**: never printed. " + description).strip()
            yield (
                f"| {name} | {self.type_text(f.annotation)} | {self.default_text(f)} | "
                f"{', '.join(f.constraints) or ''} | {description} |"
            )
        yield ""

    def render(self) -> str:
        out = [
            "# Configuration reference",
            "",
            "Generated from the config models by `docs/gen_reference.py` at every docs build,",
            "so it cannot drift from the code. A pipeline file's sections, a sink's Python",
            "constructor, a sink URL and `format(\"exactlyonce\")` options are all parsed by",
            "these models (see [Getting started](../getting-started.md)).",
            "Credentials show as *secret*: their values are never printed.",
            "",
        ]
        for title, model in self.listed:
            out += list(self.section(title, model))
        done: set[type] = {m for _, m in self.listed}
        while self.queue:
            model = self.queue.pop(0)
            if model in done:
                continue
            done.add(model)
            out += list(self.section(f"`{model.__name__}` (`{model.__module__}`)", model))
        return "\n".join(out) + "\n"


def rst_to_markdown(text: str) -> str:
    """The few reStructuredText habits of the docstrings, as Markdown."""
    text = re.sub(r":(?:class|mod|func|meth|attr|data):`~?([^`]+)`", r"`\1`", text)
    text = text.replace("``", "`")
    text = re.sub(r"`\\ s\b", "`s", text)
    return text.replace("::\n", ":\n")


def main() -> None:
    page = Page(models()).render()
    if sys.argv[1:] == ["--print"]:  # by hand: python docs/gen_reference.py --print
        print(page)
        return
    import mkdocs_gen_files

    with mkdocs_gen_files.open(PAGE, "w") as handle:
        handle.write(page)
    mkdocs_gen_files.set_edit_path(PAGE, "gen_reference.py")


main()
