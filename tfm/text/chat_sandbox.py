"""Rendering an untrusted Jinja chat template with bounded time and memory.

A chat template comes from a model file (tokenizer_config.json's `chat_template`, a GGUF's
`tokenizer.chat_template`): anyone who made the file wrote it. It runs in Jinja's
`ImmutableSandboxedEnvironment` set up as Hugging Face's `apply_chat_template` sets it up
(transformers/utils/chat_template_utils.py: `trim_blocks`, `lstrip_blocks`, loop controls, the
`{% generation %}` tag, `raise_exception`, `strftime_now`, a `tojson` that does not escape
HTML, `dict`, a `namespace` without underscore names), so the text equals HF's. The sandbox
stops attribute access to Python internals; on top of it, every cost is bounded:

* the template's length before it is compiled (`MAX_TEMPLATE_CHARS`);
* time: a line tracer on the template's own compiled code (only its frames, only this thread)
  stops it after `MAX_RENDER_SECONDS` or `MAX_STEPS` executed lines, so loops that print
  nothing are caught too;
* memory: the output is streamed and cut at `MAX_RENDERED_CHARS`; `*`, `**`, `+` and `%`
  refuse results longer than that (a doubled string, `'x' * 10**9`) or integers over
  `MAX_INT_BITS` (`2 ** 10**9`, squaring in a loop), and so do filters and calls given an
  integer argument that large (`center(10**9)`, `ljust`) or a format string with a huge width
  (`'%0999999999d' % 1`, `'{:>999999999}'.format`); `~` (the template's own join), filters and
  every printed value are measured (strings inside lists and dicts too) before they become text.
* what the template may reach: the sandbox's attribute checks, made errors (Jinja would print
  an unsafe attribute as empty text).

Every failure is one `ValueError` saying what the template did.
"""

from __future__ import annotations

import functools
import json
import re
import sys
import time
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["MAX_TEMPLATE_CHARS", "MAX_RENDERED_CHARS", "MAX_RENDER_SECONDS", "MAX_STEPS", "render_template"]

MAX_TEMPLATE_CHARS = 100_000  # real templates: ChatML ~0.4k, Llama 3.1 with tools ~6k, Qwen3 ~4k
MAX_RENDERED_CHARS = 2_000_000  # above the most messages (64) at the server's 20k-character prompt cap
MAX_RENDER_SECONDS = 2.0  # a real template renders far faster
MAX_STEPS = 2_000_000  # template lines executed (under a second of pure looping)
MAX_INT_BITS = 1 << 16  # integers a template computes (a 64-bit id needs 64)
_CHECK_EVERY = 1024  # lines between two clock reads
_TEMPLATE_FILE = "<chat template>"


class TemplateLimit(Exception):
    """Raised inside a render that went over a bound."""


class _Budget:
    """Lines executed and the deadline of one render (one thread)."""

    def __init__(self) -> None:
        self.steps, self.deadline = 0, time.perf_counter() + MAX_RENDER_SECONDS

    def tick(self, frame, event, arg):
        if event == "line":
            self.steps += 1
            if self.steps >= MAX_STEPS:
                raise TemplateLimit(f"it ran more than {MAX_STEPS:,} steps")
            if self.steps % _CHECK_EVERY == 0 and time.perf_counter() > self.deadline:
                raise TemplateLimit(f"it ran longer than {MAX_RENDER_SECONDS:g} s")
        return self.tick

    def on_call(self, frame, event, arg):
        """Trace only the template's own frames: Python and Jinja internals run untraced."""
        return self.tick if frame.f_code.co_filename == _TEMPLATE_FILE else None


def _too_long(value) -> bool:
    return isinstance(value, (str, list, tuple, dict)) and len(value) > MAX_RENDERED_CHARS


def _big_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_RENDERED_CHARS


def _int_too_big(operator: str, left, right) -> bool:
    """Would `left ** right` or `left * right` (integers) pass MAX_INT_BITS? (a power tower, squaring in a loop)"""
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (left, right)):
        return operator == "**" and isinstance(right, (int, float)) and abs(right) > MAX_INT_BITS
    if operator == "**":
        return right > 0 and abs(left) > 1 and abs(left).bit_length() * right > MAX_INT_BITS
    return operator == "*" and abs(left).bit_length() + abs(right).bit_length() > MAX_INT_BITS


class _BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox, with the operators and calls that can allocate without bound checked."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def call_binop(self, context, operator, left, right):
        if operator == "%" and isinstance(left, str) and (_big_format(left) or _too_big(right)):
            raise TemplateLimit("it formatted a text with a width or precision too large")
        if _int_too_big(operator, left, right):
            raise TemplateLimit(f"it computed a number of more than {MAX_INT_BITS:,} bits")
        if (
            operator == "*"
            and (_big_int(left) or _big_int(right))
            and (isinstance(left, (str, list, tuple)) or isinstance(right, (str, list, tuple)))
        ):
            raise TemplateLimit("it repeated a text or list too many times")
        result = super().call_binop(context, operator, left, right)
        if _too_long(result):
            raise TemplateLimit(f"it built a value longer than {MAX_RENDERED_CHARS:,}")
        return result

    def unsafe_undefined(self, obj, attribute):
        """Jinja prints an unsafe attribute as empty text; a template reaching for one is refused."""
        raise jinja2.exceptions.SecurityError(
            f"access to attribute {str(attribute)[:40]!r} of a {type(obj).__name__} is not allowed"
        )

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (Jinja's own signature)
        if any(_big_int(a) for a in (*args, *kwargs.values())):
            raise TemplateLimit("it called a function with a number too large to be a size")
        owner = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)  # 'text'.format(...)
        if isinstance(owner, str) and _big_format(owner):
            raise TemplateLimit("it formatted a text with a width or precision too large")
        result = super().call(__context, __obj, *args, **kwargs)
        if _too_long(result):
            raise TemplateLimit(f"it built a value longer than {MAX_RENDERED_CHARS:,}")
        return result


def _size(value, limit: int = MAX_RENDERED_CHARS) -> int:
    """Characters `value` holds as text (strings inside lists, tuples and dicts), counted until
    `limit` is passed: a list of many long strings is refused before it is joined or printed."""
    total, todo = 0, [value]
    while todo and total <= limit:
        v = todo.pop()
        if isinstance(v, str):
            total += len(v)
        elif isinstance(v, dict):
            todo.extend(v.keys())
            todo.extend(v.values())
        elif isinstance(v, (list, tuple)):
            total += len(v)
            todo.extend(v)
        else:
            total += 8
    return total


def _too_big(value) -> bool:
    return _size(value) > MAX_RENDERED_CHARS


def _big_format(text: str) -> bool:
    """A width or precision in a format string ('%0999999999d', '{:>999999999}') too large to print."""
    return any(int(n) > MAX_RENDERED_CHARS for n in re.findall(r"\d{7,}", text))


def _finalize(value):
    """Every printed value passes here before it becomes text."""
    if _too_big(value):
        raise TemplateLimit(f"it printed a value longer than {MAX_RENDERED_CHARS:,}")
    return value


def _bounded_join(join):
    """The compiled template's `~` concatenation, refusing a result too long before building it."""

    def bounded(seq):
        seq = list(seq)
        if _too_big(seq):
            raise TemplateLimit(f"it joined texts longer than {MAX_RENDERED_CHARS:,}")
        return join(seq)

    return bounded


def _bounded_filter(f):
    """A built-in filter that refuses size-like integer arguments (`center(10**9)`), a value too
    large to turn into text, and format strings with huge widths."""
    skip = 2 if hasattr(f, "jinja_pass_arg") else 1  # the context (if passed) and the value itself

    @functools.wraps(f)
    def bounded(*args, **kwargs):
        if any(_big_int(a) for a in (*args[skip:], *kwargs.values())):
            raise TemplateLimit("it gave a filter a number too large to be a size")
        value = args[skip - 1] if len(args) >= skip else None
        if _too_big(value) or (isinstance(value, str) and _big_format(value)):
            raise TemplateLimit(f"it gave a filter a value longer than {MAX_RENDERED_CHARS:,} or a huge width")
        result = f(*args, **kwargs)
        if _too_long(result):
            raise TemplateLimit(f"a filter built a value longer than {MAX_RENDERED_CHARS:,}")
        return result

    return bounded


class _Generation(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` (HF marks assistant text with it): the body as is."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    if _big_int(indent):
        raise TemplateLimit("it asked tojson for a huge indent")
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format):
    return datetime.now().strftime(format)


class _TemplateDict:
    """`dict(...)` for templates, without the type itself (no type hacking through it)."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


class _Namespace(jinja2.utils.Namespace):
    """Jinja's namespace refusing underscore names, as HF's (no reaching internals through it)."""

    def __init__(*args, **kwargs):  # noqa: N805 (Jinja's signature trick: `namespace(self=...)` works)
        self, attrs = args[0], dict(*args[1:], **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a namespace attribute may not start with '_' ({name[:40]!r})")


def _environment() -> _BoundedEnvironment:
    env = _BoundedEnvironment(
        trim_blocks=True, lstrip_blocks=True, finalize=_finalize, extensions=[_Generation, jinja2.ext.loopcontrols]
    )
    env.filters = {name: _bounded_filter(f) for name, f in env.filters.items()}
    env.filters["tojson"] = _tojson
    env.globals.update(
        raise_exception=_raise_exception, strftime_now=_strftime_now, dict=_TemplateDict(), namespace=_Namespace
    )
    return env


_ENV = _environment()


@functools.lru_cache(maxsize=16)
def _compiled(source: str) -> jinja2.Template:
    code = _ENV.compile(source, filename=_TEMPLATE_FILE)
    template = _ENV.template_class.from_code(_ENV, code, _ENV.make_globals(None), None)
    namespace = template.root_render_func.__globals__  # this template's own module namespace
    for name in ("str_join", "markup_join"):  # what `a ~ b` compiles to
        if name in namespace:
            namespace[name] = _bounded_join(namespace[name])
    return template


def render_template(source: str, **variables) -> str:
    """Render the untrusted template `source` with `variables` (messages, add_generation_prompt,
    bos_token, ...). ValueError with one line when it is too long, does not compile, raises,
    reaches for internals, or goes over a time or size bound."""
    if not isinstance(source, str):
        raise ValueError(f"a chat template is text, got {type(source).__name__}")
    if len(source) > MAX_TEMPLATE_CHARS:
        raise ValueError(
            f"the chat template has {len(source):,} characters; tfm reads templates up to {MAX_TEMPLATE_CHARS:,}"
        )
    budget, previous = _Budget(), sys.gettrace()
    sys.settrace(budget.on_call)
    try:
        template = _compiled(source)
        parts, size = [], 0
        for part in template.generate(**variables):
            size += len(part)
            if size > MAX_RENDERED_CHARS:
                raise TemplateLimit(f"its text grew past {MAX_RENDERED_CHARS:,} characters")
            parts.append(part)
        return "".join(parts)
    except jinja2.exceptions.TemplateSyntaxError as e:
        raise ValueError(f"the chat template does not compile (line {e.lineno}): {_short(e)}") from None
    except TemplateLimit as e:
        raise ValueError(f"the chat template was stopped: {e}") from None
    except jinja2.exceptions.SecurityError as e:
        raise ValueError(f"the chat template tried something the sandbox forbids: {_short(e)}") from None
    except jinja2.exceptions.TemplateError as e:  # raise_exception(...) and undefined names
        raise ValueError(f"the chat template refused these messages: {_short(e)}") from None
    except (RecursionError, MemoryError) as e:
        raise ValueError(f"the chat template was stopped: {type(e).__name__}") from None
    except Exception as e:  # untrusted code: any other failure is its own, said in one line
        raise ValueError(f"the chat template failed: {type(e).__name__}: {_short(e)}") from None
    finally:
        sys.settrace(previous)


def _short(e: Exception) -> str:
    text = str(e).replace("\n", " ")
    return text if len(text) <= 200 else text[:200] + "…"
