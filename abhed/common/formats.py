"""The tool-call formats Abhed can ask a model to use: one registry, read by everything that names them.

A format is how the calls travel. `native`: the server parses them (vLLM's --tool-call-parser) and
the request carries `tools`. A text format: the tools are described in the system prompt and the
model writes its calls in the text, in a form one of abhed/model/textcalls/ reads (that package
reads replies in every form a family writes, asked for or not; this registry names only the forms
Abhed can *ask* for, and the adapter that asks).

Config validation (session/config.py), the profiles (model/profiles.py), the CLI (--tool-format's
choices, `abhed models NAME`), `abhed doctor`, conformance's text cases and the adapters
(model/adapters.adapter_for) all read this registry: adding a format is one `register` here, with
its adapter and, if no form reads its calls yet, its parser (docs/architecture.md, "Where a change
goes"). The adapter is named as "module:Class", not imported: this module sits below the model
layer, and the CLI reads the names without loading the model client; model/adapters.py imports it
when the format is used.
"""

from __future__ import annotations

from typing import NamedTuple


class Format(NamedTuple):
    name: str  # model.tool_format, --tool-format, a profile's tool_format / text_format
    adapter: str  # "module:Class" of its Adapter (model/adapters.py): the request, prompt and history
    description: str  # one line: `abhed models NAME` and doctor show it beside the name
    # The textcalls form its calls are written in (textcalls/, the form's `name`), read back by the
    # adapter; None: the server's parser reads them (native), so the format needs that parser.
    form: str | None = None

    @property
    def needs_server_parser(self) -> bool:
        return self.form is None


_REGISTRY: dict[str, Format] = {}


def register(fmt: Format) -> Format:
    """Add a format; a name already registered is a programming error, refused."""
    if fmt.name in _REGISTRY or fmt.name == "auto":
        raise ValueError(f"the tool-call format {fmt.name!r} is already registered (or reserved)")
    if ":" not in fmt.adapter:
        raise ValueError(f"the tool-call format {fmt.name!r} names its adapter as \"module:Class\", not {fmt.adapter!r}")
    _REGISTRY[fmt.name] = fmt
    return fmt


def unregister(name: str) -> None:
    """Remove a format (tests register scratch formats and take them away again)."""
    _REGISTRY.pop(name, None)


def names() -> tuple[str, ...]:
    """Every format's name, in registration order (native first)."""
    return tuple(_REGISTRY)


def text_names() -> tuple[str, ...]:
    """The formats written in the text: those Abhed can ask a model without a tool-call parser for."""
    return tuple(f.name for f in _REGISTRY.values() if not f.needs_server_parser)


def get(name: str) -> Format:
    """The format called `name`; ValueError naming the known ones if there is none."""
    if name not in _REGISTRY:
        raise ValueError(f"Unknown tool format {name!r}: use one of {', '.join(_REGISTRY)}.")
    return _REGISTRY[name]


def form_of(name: str) -> str:
    """The textcalls form the format `name` has its calls written in; its own name when it is native
    or not registered (a saved conformance report may name a format no longer known)."""
    fmt = _REGISTRY.get(name)
    return fmt.form if fmt is not None and fmt.form is not None else name


def asking_for(form: str) -> str | None:
    """The format whose calls are written in the textcalls form `form`, if Abhed can ask for it."""
    return next((f.name for f in _REGISTRY.values() if f.form == form), None)


def validated(value: object, *, auto: bool = False, text: bool = False) -> str:
    """`value` if it names a format (a text one, if `text`; or "auto", if `auto`): the pydantic
    validator of config and profiles, run before the type's. The error reads as pydantic's own for a
    Literal, as it did when the names were spelled there."""
    allowed = (("auto",) if auto else ()) + (text_names() if text else names())
    if isinstance(value, str) and value in allowed:
        return value
    from pydantic_core import PydanticCustomError  # only ever called while pydantic validates
    quoted = [repr(name) for name in allowed]
    expected = " or ".join([", ".join(quoted[:-1]), quoted[-1]]) if len(quoted) > 1 else quoted[0]
    raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})


DEFAULT_TEXT = "hermes"  # a profile's text_format when it names none

register(Format("native", "abhed.model.adapters:Adapter",
                "the request carries the tools and the server's tool-call parser reads the calls (vLLM "
                "--enable-auto-tool-choice --tool-call-parser)"))
register(Format("hermes", "abhed.model.adapters:TextAdapter",
                "tools described in the prompt; calls written as JSON in <tool_call> tags", form="hermes"))
register(Format("qwen3_coder", "abhed.model.adapters:Qwen3CoderAdapter",
                "tools described in the prompt; calls written as <function=NAME><parameter=KEY> XML", form="qwen3_coder"))
