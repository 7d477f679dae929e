"""Lock names built per call: ``"invoice:{invoice_id}"`` filled from a call's arguments.

A decorator's ``name`` is either a :meth:`str.format` template whose fields name the
decorated callable's parameters (attribute and item access work: ``"{order.pk}"``,
``"{data[id]}"``), or a callable taking the same arguments and returning the name.

Errors are :class:`~django_redislock.InvalidLockName` (a ``ValueError``) naming the
template and the field: raised at decoration time when the signature shows that a field
cannot exist (no such parameter and no ``**kwargs``), else at call time. The rendered name
goes through the normal name rules, so a name over 256 characters, or one containing
``{`` / ``}`` (say from a ``dict`` argument), raises ``InvalidLockName`` at call time.
"""

from __future__ import annotations

import functools
import inspect
import re
import string
from collections.abc import Callable, Mapping
from typing import Any

from .exceptions import InvalidLockName
from .keys import MAX_NAME_LENGTH, validate_name

_ROOT = re.compile(r"[.\[]")


class _FieldError(Exception):
    def __init__(self, field: str, cause: BaseException) -> None:
        super().__init__(field)
        self.field = field
        self.cause = cause


class _NoneField(Exception):
    """A field resolved to ``None``: every such call would share one lock ``...:None``."""

    def __init__(self, field: str) -> None:
        super().__init__(field)
        self.field = field


class _NameFormatter(string.Formatter):
    """``str.format`` that reports which field failed, and refuses a field that is None."""

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
        try:
            value, first = super().get_field(field_name, args, kwargs)
        except (KeyError, AttributeError, IndexError, TypeError) as exc:
            raise _FieldError(field_name, exc) from exc
        if value is None:
            raise _NoneField(field_name)
        return value, first


_FORMATTER = _NameFormatter()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"no key {exc.args[0]!r}"
    return str(exc)


class NameTemplate:
    """A parsed name template; :meth:`render` fills it from a mapping."""

    def __init__(self, template: str, *, where: str = "") -> None:
        if not isinstance(template, str):
            raise InvalidLockName(
                f"Lock name must be a str template or a callable, not {template!r}"
            )
        self.template = template
        self.where = where
        try:
            parsed = list(_FORMATTER.parse(template))
        except ValueError as exc:
            raise InvalidLockName(
                f"Lock name template {template!r}{self._of} is malformed: {exc}"
            ) from None
        literal = "".join(text for text, _, _, _ in parsed)
        self.fields = tuple(field for _, field, _, _ in parsed if field is not None)
        for field in self.fields:
            if field == "" or field[0].isdigit():
                raise InvalidLockName(
                    f"Lock name template {template!r}{self._of} has a positional field "
                    f"{{{field}}}; name the argument instead, e.g. {{invoice_id}}."
                )
        #: The argument names the fields start from ("order" for "{order.pk}").
        self.roots = frozenset(_ROOT.split(field, 1)[0] for field in self.fields)
        if "{" in literal or "}" in literal:
            raise InvalidLockName(
                f"Lock name template {template!r}{self._of} would put '{{' or '}}' in the "
                "name; they are Redis hash-tag characters and not allowed."
            )
        if not self.fields:
            validate_name(template)
        elif len(literal) > MAX_NAME_LENGTH:
            raise InvalidLockName(
                f"Lock name template {template!r}{self._of} is longer than "
                f"{MAX_NAME_LENGTH} characters before any field is filled in."
            )

    @property
    def _of(self) -> str:
        return f" of {self.where}" if self.where else ""

    def render(self, values: Mapping[str, Any]) -> str:
        """The lock name for ``values``; :class:`InvalidLockName` names a failing field."""
        if not self.fields:
            return self.template
        try:
            name = _FORMATTER.vformat(self.template, (), values)
        except _NoneField as exc:
            raise InvalidLockName(
                f"Lock name template {self.template!r}{self._of}: field {{{exc.field}}} is "
                "None, so every such call would share one lock named "
                f"{self.template.replace('{' + exc.field + '}', 'None')!r} (an anonymous "
                "user's pk?). Require the value first (login_required...), or give a name "
                "callable that decides."
            ) from None
        except _FieldError as exc:
            available = ", ".join(sorted(values)) or "none"
            raise InvalidLockName(
                f"Lock name template {self.template!r}{self._of}: field {{{exc.field}}} "
                f"cannot be filled ({_describe(exc.cause)}). Available: {available}."
            ) from exc.cause
        except ValueError as exc:
            raise InvalidLockName(
                f"Lock name template {self.template!r}{self._of} failed: {exc}"
            ) from exc
        return checked_name(name, self.template, self.where)

    def check_parameters(self, names: frozenset[str]) -> None:
        """Fail now if a field's argument is not among ``names``."""
        missing = sorted(self.roots - names)
        if missing:
            raise InvalidLockName(
                f"Lock name template {self.template!r}{self._of} uses "
                f"{', '.join('{' + m + '}' for m in missing)}, which is not a parameter; "
                f"parameters: {', '.join(sorted(names)) or 'none'}."
            )


def checked_name(name: object, source: object, where: str) -> str:
    """Validate a rendered name, saying where it came from when it is invalid."""
    try:
        return validate_name(name)
    except InvalidLockName as exc:
        of = f" of {where}" if where else ""
        raise InvalidLockName(
            f"{exc} (lock name built by {source!r}{of})", lock_name=exc.lock_name
        ) from None


def _signature(func: Callable[..., Any]) -> inspect.Signature | None:
    # method_decorator hands decorators a functools.partial of the bound method with
    # ``__wrapped__`` set to the unbound function: following it would bring back ``self``.
    try:
        return inspect.signature(func, follow_wrapped=not isinstance(func, functools.partial))
    except (TypeError, ValueError):
        return None


class CallNamer:
    """Computes the lock name of each call of ``func`` from ``name`` (template or callable)."""

    def __init__(
        self, name: str | Callable[..., str], func: Callable[..., Any], *, where: str
    ) -> None:
        self.where = where
        self.signature = _signature(func)
        if callable(name):
            self.function: Callable[..., str] | None = name
            self.template: NameTemplate | None = None
            return
        self.function = None
        self.template = NameTemplate(name, where=where)
        sig = self.signature
        if sig is not None and not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
            self.template.check_parameters(frozenset(sig.parameters))

    @property
    def metrics_name(self) -> str | None:
        """The family of the locks it names: the template with fields (``"invoice:{id}"``),
        else ``None`` (a fixed name, or a callable: the name's own family applies)."""
        template = self.template
        return template.template if template is not None and template.fields else None

    def lock_options(self, lock_kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """``lock_kwargs`` with ``metrics_name`` set to the template unless given."""
        family = self.metrics_name
        if family is None or "metrics_name" in lock_kwargs:
            return dict(lock_kwargs)
        return {"metrics_name": family, **lock_kwargs}

    def arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments by name (``**kwargs`` merged in), defaults applied."""
        if self.signature is None:
            return {"args": args, **kwargs}
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = dict(bound.arguments)
        for param in self.signature.parameters.values():
            if param.kind is param.VAR_KEYWORD:
                for key, value in values.pop(param.name, {}).items():
                    values.setdefault(key, value)
        return values

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        if self.function is not None:
            return checked_name(self.function(*args, **kwargs), self.function, self.where)
        assert self.template is not None
        if not self.template.fields:
            return self.template.template
        return self.template.render(self.arguments(args, kwargs))


__all__ = ["CallNamer", "NameTemplate", "checked_name"]
