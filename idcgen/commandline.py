"""How an ``idcgen`` command is declared and how it fails: the machinery under :mod:`idcgen.cli`'s commands.

A command's parameter annotated with a settings group (:mod:`idcgen.options`) becomes the group's options,
and the command receives the group built from what was typed (:func:`register`); a single-valued option
given twice is refused. Every library error becomes one line on stderr (``error: ...``) and exit status 1,
the parameters it names spelt as the flags that set them (:func:`in_cli_words`), the flags read from the
options the commands declare (:func:`parameter_flags`).
"""

from __future__ import annotations

import functools
import re
import shlex

import typer
import typer.core

from .errors import IdcgenError, Param, listed


def also_sets(option, *parameters: str):
    """``option`` (a typer option) recorded as the flag of the library ``parameters`` it sets under another
    name (--force: ``overwrite``), so that an error naming one of them names the flag."""
    option.library_names = parameters
    return option


@functools.cache
def parameter_flags(app: typer.Typer) -> dict[str, str]:
    """Each library parameter name -> the flag that sets it, read from the options ``app``'s commands declare:
    an option's own parameter (batch_size: --batch-size, only_class: --class, a group's fields among them)
    and the library parameters it also sets (:func:`also_sets`). Read once all commands are registered."""
    import inspect

    flags: dict[str, str] = {}
    for command in app.registered_commands:
        for p in inspect.signature(command.callback).parameters.values():
            if isinstance(p.default, typer.models.OptionInfo):
                flag = next(d for d in p.default.param_decls if d.startswith("--"))
                for name in (p.name, *getattr(p.default, "library_names", ())):
                    flags.setdefault(name, flag)
    return flags


def in_cli_words(error: IdcgenError, app: typer.Typer) -> str:
    """``error``'s message with the parameters it names spelt as the flags of ``app`` that set them:
    "--batch-size must ...", "pass --scale none"; a parameter no option sets keeps the library's words. (The app
    is passed in: this module sits under idcgen.cli and does not import it.)"""
    flags = parameter_flags(app)

    def spell(param: Param) -> str:
        flag = flags.get(param.name)
        if flag is None or param.value is False:
            return str(param)
        if not param.has_value or param.value is True:
            return flag
        return f"{flag} {shlex.quote(str(listed(param.value)))}"

    return error.worded(spell)


def _close_progress_bars() -> None:
    """Close the progress bars still open, so that an error gets a line of its own (not the bar's)."""
    import sys

    tqdm = getattr(sys.modules.get("tqdm.std"), "tqdm", None)  # none open unless tqdm was imported
    for bar in list(getattr(tqdm, "_instances", ()) or ()):
        bar.close()


def fail(message: str) -> None:
    _close_progress_bars()  # else the error lands on the line of a bar the error interrupted
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


class _Command(typer.core.TyperCommand):
    """A command refusing a single-valued option given twice (click keeps the last one silently)."""

    def parse_args(self, ctx, args):
        # each name of a single-valued option -> the option (--architecture and --weights are one option)
        single = {
            name: p
            for p in self.params
            if not getattr(p, "multiple", False) and not getattr(p, "is_flag", False)
            for name in p.opts
            if name.startswith("--")
        }
        seen = {}
        for arg in args:
            if arg == "--":
                break
            name = arg.split("=", 1)[0]
            if name in single and single[name] in seen:
                first = seen[single[name]]
                fail(
                    f"{name} given twice (only one is used): give it once"
                    if first == name
                    else f"{first} and {name} are two names of one option (only one value is used): give one"
                )
            if name in single:
                seen[single[name]] = name
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx):
        # typer writes a required argument {OLD}, which reads as a set; click's plain OLD is the convention
        return [re.sub(r"^\{(.+)\}$", r"\1", piece) for piece in super().collect_usage_pieces(ctx)]


def register(app: typer.Typer, func):
    """Register ``func`` as a command of ``app`` and turn idcgen errors into one clear line.

    A parameter annotated with a settings group (:mod:`idcgen.options`) becomes the group's options on the
    command line; the command receives the group built from what was typed, each value parsed once."""
    groups, signature = _expand_groups(func)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            if groups:
                kwargs = _build_groups(groups, kwargs)
            return func(*args, **kwargs)
        except IdcgenError as exc:
            fail(in_cli_words(exc, app))
        except OSError as exc:  # unwritable --out, a file where a folder should be, a full disk
            fail(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
        except Exception as exc:  # a device out of memory where no batch halving caught it: one line too
            from .framework.device import is_out_of_memory, out_of_memory_error

            if not is_out_of_memory(exc):
                raise
            fail(in_cli_words(out_of_memory_error(exc), app))
        except KeyboardInterrupt:
            typer.echo("error: interrupted", err=True)
            raise typer.Exit(130) from None

    wrapper.__signature__ = signature  # typer reads the expanded options, not the groups
    wrapper.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
    return app.command(cls=_Command)(wrapper)


_CTX = "_typed_ctx"  # the click context a command with groups is given, to tell typed options from defaults


def _expand_groups(func):
    """({parameter: group class}, the signature typer reads): each group-typed parameter replaced by the
    group's options."""
    import inspect
    import typing

    from .options import Group

    hints = typing.get_type_hints(func)
    groups, params = {}, []
    for p in inspect.signature(func).parameters.values():
        kind = hints.get(p.name)
        if isinstance(kind, type) and issubclass(kind, Group):
            groups[p.name] = kind
            for name, flag in kind.flags().items():
                params.append(
                    inspect.Parameter(
                        name,
                        inspect.Parameter.KEYWORD_ONLY,
                        annotation=flag.cli_type,
                        default=typer.Option(flag.cli_default, *flag.names, help=flag.help),
                    )
                )
        else:
            params.append(p.replace(annotation=hints.get(p.name, p.annotation), kind=inspect.Parameter.KEYWORD_ONLY))
    names = [p.name for p in params]
    clash = {n for n in names if names.count(n) > 1}
    if clash:  # a programming error: one option in two groups of the command
        raise TypeError(f"{func.__name__}: options {sorted(clash)} are in more than one group")
    if groups and not any(p.annotation is typer.Context for p in params):
        params.append(inspect.Parameter(_CTX, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context))
    return groups, inspect.Signature(params)


def _build_groups(groups: dict, kwargs: dict) -> dict:
    """The command's keywords with each group's options gathered into the group (parsed once), each group told
    the options typed on the command line (not left at their defaults)."""
    ctx = kwargs.pop(_CTX, None) or next(v for v in kwargs.values() if isinstance(v, typer.Context))
    source = ctx.get_parameter_source  # click's ParameterSource (typer vendors click: compared by name)
    typed = tuple(name for name in ctx.params if getattr(source(name), "name", None) == "COMMANDLINE")
    for param, kind in groups.items():
        kwargs[param] = kind.from_typed({n: kwargs.pop(n) for n in kind.flags() if n in kwargs}, typed)
    return kwargs
