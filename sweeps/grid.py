"""A grid of named server settings and its points, and the check of a command template against it.

A parameter is `NAME=V1,V2,...` on the command line (`--param`, repeatable) or a mapping
`NAME: [V1, V2]` in a YAML or JSON file (`--grid`). Values are read as YAML scalars (64 is a
number, true a boolean, 0.9 a float), which is what a simulator profile's field needs; a command
template gets each value as it was written. The points are every combination, the first parameter
varying slowest.
"""

from __future__ import annotations

import itertools
import math
import re
import string
from dataclasses import dataclass, field

import yaml

from core.errors import InputError

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PORT = "port"  # the one field of a template the suite fills itself: a free port
MAX_POINTS = 500  # a grid larger than this is a typo more often than a plan


@dataclass(frozen=True)
class Point:
    """One combination of settings. `texts` are the values as written (for a template), `values`
    as parsed (for a profile)."""

    index: int  # 1-based, in grid order
    texts: dict[str, str]
    values: dict[str, object] = field(compare=False)

    @property
    def name(self) -> str:
        """The point's folder name: its settings, so a resumed sweep finds its folder even when
        the grid's order changed."""
        text = "__".join(f"{k}-{v}" for k, v in self.texts.items()) or "default"
        return re.sub(r"[^A-Za-z0-9_.=+-]", "_", text)[:150]

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.texts.items()) or "(no setting)"


def scalar(text: str) -> object:
    """A value as YAML reads it: '64' -> 64, 'true' -> True, '0.9' -> 0.9, 'abc' -> 'abc'."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str):  # YAML 1.1 reads 2e-08 (no dot) as text: a number all the same
        try:
            number = float(value)
        except ValueError:
            return value
        return number if math.isfinite(number) else value
    return value if isinstance(value, (int, float, bool)) or value is None else text


def parse_param(text: str, option: str = "--param") -> tuple[str, list[str]]:
    """'max_num_seqs=64,128' -> ('max_num_seqs', ['64', '128'])."""
    name, sep, values = text.partition("=")
    name = name.strip()
    if not sep:
        raise InputError(f"{option} {text!r}: no '=': write NAME=V1,V2, e.g. max_num_seqs=64,128,256")
    if not NAME.match(name):
        raise InputError(
            f"{option} {text!r}: {name!r} is not a parameter name (letters, digits, _; not starting with a digit)"
        )
    if name == PORT:
        raise InputError(f"{option} {text!r}: {{port}} is the free port the suite picks; name the parameter otherwise")
    items = [v.strip() for v in values.split(",")]
    if not values.strip() or any(v == "" for v in items):
        raise InputError(f"{option} {text!r}: an empty value; write NAME=V1,V2 with no empty item")
    if len(set(items)) != len(items):
        raise InputError(f"{option} {text!r}: a value is given twice")
    return name, items


def read_grid_file(path: str) -> dict[str, list[str]]:
    """A YAML or JSON file: a mapping of parameter name to a list of values (or one value)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise InputError(f"--grid {path}: cannot read it ({e.strerror})") from None
    except yaml.YAMLError as e:
        raise InputError(f"--grid {path}: not valid YAML or JSON ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict) or not data:
        raise InputError(f"--grid {path}: write a mapping of parameter to values, e.g. max_num_seqs: [64, 128, 256]")
    out = {}
    for name, values in data.items():
        values = values if isinstance(values, list) else [values]
        text = f"{name}=" + ",".join(_text(v) for v in values)
        key, items = parse_param(text, f"--grid {path}:")
        out[key] = items
    return out


def _text(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)) or v is None:
        raise InputError(f"--grid: {v!r} is not a setting; give numbers, booleans or text")
    return str(v)


def build_grid(params: list[str], grid_file: str | None = None) -> dict[str, list[str]]:
    """The parameters of `--grid` then those of each `--param`; a name given twice is an error."""
    grid = read_grid_file(grid_file) if grid_file else {}
    for text in params:
        name, items = parse_param(text)
        if name in grid:
            raise InputError(f"--param {text!r}: {name} is given twice (in --grid or another --param); give it once")
        grid[name] = items
    return grid


def points(grid: dict[str, list[str]]) -> list[Point]:
    names = list(grid)
    combos = list(itertools.product(*(grid[n] for n in names)))
    if len(combos) > MAX_POINTS:
        raise InputError(f"--param: {len(combos)} points (more than {MAX_POINTS}); sweep fewer values at once")
    return [Point(i, dict(zip(names, c)), {n: scalar(v) for n, v in zip(names, c)}) for i, c in enumerate(combos, 1)]


def template_fields(template: str, option: str = "--server") -> set[str]:
    """The names a template's `{...}` fields use; a malformed one is an error."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        raise InputError(
            f"{option}: the template's braces do not match ({e}); write a literal brace as {{{{ or }}}}"
        ) from None
    names = set()
    for _text_part, name, spec, conv in parsed:
        if name is None:
            continue
        if not NAME.match(name) or spec or conv:
            raise InputError(
                f"{option}: {{{name}{'!' + conv if conv else ''}{':' + spec if spec else ''}}} is not a "
                "parameter field; write {NAME} with the name of a --param, or {port}"
            )
        names.add(name)
    return names


def check_template(template: str, grid: dict[str, list[str]], option: str = "--server") -> None:
    """Every field of the template is a grid parameter (or {port}), and every parameter is used."""
    used = template_fields(template, option)
    if PORT not in used:
        raise InputError(
            f"{option}: the template has no {{port}}; the suite picks a free port per point, e.g. "
            "'vllm serve M --port {port}'"
        )
    missing = sorted(used - {PORT} - set(grid))
    if missing:
        raise InputError(
            f"{option}: the template names {{{missing[0]}}} but the grid has no parameter {missing[0]}: "
            f"add --param {missing[0]}=... or take {{{missing[0]}}} out of the template"
        )
    unused = [n for n in grid if n not in used]
    if unused:
        raise InputError(
            f"--param {unused[0]}: the template never uses {{{unused[0]}}}: add it to {option} or drop the parameter"
        )


def fill(template: str, point: Point, port: int) -> str:
    return template.format(port=port, **point.texts)
