#!/usr/bin/env python3
"""A hook config derived from the default rule, as data: write-config.py DEFAULT OUT TOP DRIVER.

DEFAULT is hook/default-config.toml; TOP and DRIVER are TOML text (host-specific top-level keys,
and keys for the default rule's `[rule.driver]`). The three are parsed, TOP's keys are set at
the top level and DRIVER's in the driver table of the rule named `nvidia`, and the result is
written to OUT as TOML. A key that TOP or DRIVER would set twice, or that the default already
sets at the top level, is an error: a derived config adds to the rule, it never edits it.
"""

import math
import sys
import tomllib
from pathlib import Path


def value(v):
    """One TOML value: the scalars and arrays of scalars a hook config holds."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float) and math.isfinite(v):
        return repr(v)
    if isinstance(v, str):
        out = []
        for c in v:
            if c in '"\\':
                out.append("\\" + c)
            elif ord(c) < 0x20 or ord(c) == 0x7F:
                out.append(f"\\u{ord(c):04x}")
            else:
                out.append(c)
        return '"' + "".join(out) + '"'
    if isinstance(v, list) and not any(isinstance(x, dict) for x in v):
        return "[" + ", ".join(value(x) for x in v) + "]"
    raise SystemExit(f"write-config: cannot write {v!r} as a TOML value")


def key(k):
    bare = k and all(c.isascii() and (c.isalnum() or c in "-_") for c in k)
    return k if bare else value(k)


def is_tables(v):
    return isinstance(v, list) and v and all(isinstance(x, dict) for x in v)


def table(lines, path, t):
    """Plain keys first, then sub-tables and arrays of tables, each under its full header."""
    for k, v in t.items():
        if not isinstance(v, dict) and not is_tables(v):
            lines.append(f"{key(k)} = {value(v)}")
    for k, v in t.items():
        sub = path + [key(k)]
        if isinstance(v, dict):
            lines += ["", "[" + ".".join(sub) + "]"]
            table(lines, sub, v)
        elif is_tables(v):
            for item in v:
                lines += ["", "[[" + ".".join(sub) + "]]"]
                table(lines, sub, item)


def parse(what, text):
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SystemExit(f"write-config: {what} is not TOML: {e}")


def main():
    default, out, top, driver = sys.argv[1:5]
    config = parse(default, Path(default).read_text())
    for k, v in parse("the top-level keys", top).items():
        if k in config:
            raise SystemExit(f"write-config: the default rule already sets {k}")
        config[k] = v
    rules = [r for r in config.get("rule", []) if r.get("name") == "nvidia"]
    if len(rules) != 1:
        raise SystemExit(f"write-config: {default} has {len(rules)} rules named nvidia, not 1")
    keys = rules[0].setdefault("driver", {})
    for k, v in parse("the driver keys", driver).items():
        if k in keys:
            raise SystemExit(f"write-config: the default rule's driver already sets {k}")
        keys[k] = v
    lines = [f"# Written by scripts/lib/write-config.py from {Path(default).name}."]
    table(lines, [], config)
    text = "\n".join(lines) + "\n"
    # What was written must read back as what was meant.
    assert tomllib.loads(text) == config, "write-config: the TOML written does not read back"
    Path(out).write_text(text)


main()
