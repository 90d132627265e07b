"""How an ``idcgen`` command is declared and how it fails: the machinery under :mod:`idcgen.cli`'s commands.

A command's parameter annotated with a settings group (:mod:`idcgen.options`) becomes the group's options,
and the command receives the group built from what was typed (:func:`register`); a single-valued option
given twice is refused. Every library error becomes one line on stderr (``error: ...``) and exit status 1,
its parameter names spelt as the flags that set them (:func:`in_cli_words`).
"""

from __future__ import annotations

import functools
import re
import shlex

import typer
import typer.core

from .errors import IdcgenError

#: The one table from the library's parameter names to the flags that set them. The library's messages
#: name Python parameters ("The 'batch_size' parameter must ...", "scale='255'"); the CLI's error handler
#: rewrites those references into the user's words ("--batch-size must ...", "--scale 255").
FLAGS = {
    "alpha": "--alpha",
    "analysis": "--analysis",
    "architecture": "--architecture",
    "beta": "--beta",
    "budget": "--budget",
    "batch_size": "--batch-size",
    "threshold": "--threshold",
    "scaling": "--scaling",
    "top": "--top",
    "clusters": "--clusters",
    "crop": "--crop",
    "labels": "--labels",
    "task": "--task",
    "class_names": "--class-names",
    "cluster_method": "--cluster-method",
    "correct_only": "--correct-only",
    "criteria": "--criteria",
    "epochs": "--epochs",
    "force": "--force",
    "guide": "--guide",
    "image_shape": "--image-shape",
    "layer": "--layer",
    "limit": "--limit",
    "limit_test": "--limit-test",
    "m": "--m",
    "measure": "--measure",
    "mode": "--mode",
    "model": "--model",
    "mutators": "--mutators",
    "no_round": "--no-round",
    "no_validity": "--no-validity",
    "only_class": "--class",
    "oracle": "--oracle",
    "out": "--out",
    "overwrite": "--force",
    "pair": "--pair",
    "preprocess": "--preprocess",
    "random_state": "--random-state",
    "relevance_of": "--relevance-of",
    "repeats": "--repeats",
    "resize": "--resize",
    "scale": "--scale",
    "scheduler": "--scheduler",
    "seeds": "--seeds",
    "train": "--train",
    "value_range": "--value-range",
    "tol": "--tol",
    "measures": "--measures",
    "units": "--units",
    "hypotheses": "--hypotheses",
    "workers": "--workers",
    "by": "--by",
    "passes": "--passes",
    "tolerance": "--tolerance",
    "x_train": "--train",
    "device": "--device",
    "precision": "--precision",
    "gpus_per_worker": "--gpus-per-worker",
}
# "the 'm' parameter", "the 'layer' and 'm' parameters" (not "the 'std' parameter of gauss": a mutator's own)
_PARAMETER_WORDS = re.compile(r"(?<!\w)(?:[Tt]he )?'(\w+)'(?: and '(\w+)')? parameters?\b(?! of )")
# name=value with a Python repr or a bare value, not inside a spec such as rotate(limit=30)
_ASSIGNMENT = re.compile(r"(?<![\w(])(\w+)=('[^']*'|\"[^\"]*\"|[^\s,;)]+)")


def _in_spec(text: str, at: int) -> bool:
    """Whether ``text[at]`` lies inside a spec's parentheses, nc(scaling=none,threshold=0.5): the spec is
    what the user wrote, not flags, however deep (kmnc(k=(2,3),...))."""
    depth = 0
    for i in range(at - 1, -1, -1):
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            if depth == 0:
                return i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")
            depth -= 1
    return False


def in_cli_words(message: str) -> str:
    """A library message with its parameter references spelt as the flags that set them (see FLAGS)."""

    def words(match):
        names = [n for n in match.groups() if n]
        if not all(n in FLAGS for n in names):
            return match.group(0)
        return " and ".join(FLAGS[n] for n in names)

    def assignment(match):
        name, value = match.groups()
        if name not in FLAGS or _in_spec(match.string, match.start()):
            return match.group(0)
        if value[:1] in "'\"" and value[-1:] == value[:1] and len(value) >= 2:
            value = value[1:-1]
        return FLAGS[name] if value == "True" else f"{FLAGS[name]} {shlex.quote(value)}"

    return _ASSIGNMENT.sub(assignment, _PARAMETER_WORDS.sub(words, message))


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
            fail(in_cli_words(str(exc)))
        except OSError as exc:  # unwritable --out, a file where a folder should be, a full disk
            fail(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
        except Exception as exc:  # a device out of memory where no batch halving caught it: one line too
            from .framework.device import is_out_of_memory, out_of_memory_line

            if not is_out_of_memory(exc):
                raise
            fail(in_cli_words(out_of_memory_line(exc)))
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
    """The command's keywords with each group's options gathered into the group (parsed once)."""
    ctx = kwargs.pop(_CTX, None) or next(v for v in kwargs.values() if isinstance(v, typer.Context))
    typed = tuple(_given(ctx))
    for param, kind in groups.items():
        kwargs[param] = kind.from_typed({n: kwargs.pop(n) for n in kind.flags() if n in kwargs}, typed)
    return kwargs


def _given(ctx: typer.Context) -> dict:
    """The options typed on the command line (not left at their defaults), by parameter name."""
    source = ctx.get_parameter_source  # click's ParameterSource (typer vendors click: compared by name)
    return {k: v for k, v in ctx.params.items() if getattr(source(k), "name", None) == "COMMANDLINE"}
