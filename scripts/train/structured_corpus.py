"""Generated structured text whose continuations are deterministic once their pattern has begun.

Why: a target trained on the standard library alone is unpredictable on held-out code, so no
drafter accepts more than ~2 tokens a round on it; real chat / code targets are predictable on
their benchmarks (MATH-500, HumanEval), which is where DFlash drafters accept 6-8. These documents
(times tables, data classes, argparse boilerplate, numbered constant tables, dispatch tables) leave
a few free choices at their start (names, numbers) and then repeat them in a fixed form, the way
boilerplate code and worked arithmetic do. Everything is drawn from one seeded `random.Random`
and a fixed word list, so the text is the same on every machine and Python version.
"""

from __future__ import annotations

import random
from collections.abc import Callable

WORDS = (
    "alpha beta gamma delta offset length width height depth count index total limit score value "
    "name path mode size rate step start stop level label title owner group user host port timeout "
    "retries buffer cache queue stack frame token parser reader writer source target result status "
    "record entry field column row table window layer block chunk batch shard epoch budget weight "
    "color shape style format prefix suffix marker anchor region origin center radius angle speed "
    "price amount balance account order item product vendor region country city street number code"
).split()


def _names(rng: random.Random, k: int) -> list[str]:
    return rng.sample(WORDS, k)


def _camel(words: list[str]) -> str:
    return "".join(w.capitalize() for w in words)


def times_table(rng: random.Random) -> str:
    n, rows = rng.randint(2, 99), rng.randint(8, 16)
    sign = rng.choice(("x", "*"))
    return f"# times table of {n}\n" + "".join(f"{n} {sign} {i} = {n * i}\n" for i in range(1, rows + 1))


def data_class(rng: random.Random) -> str:
    fields = _names(rng, rng.randint(2, 6))
    name = _camel(_names(rng, 2))
    out = [f"class {name}:", f"    def __init__(self, {', '.join(fields)}):"]
    out += [f"        self.{f} = {f}" for f in fields]
    for f in fields:
        out += ["", "    @property", f"    def {f}(self):", f"        return self._{f}",
                "", f"    @{f}.setter", f"    def {f}(self, value):", f"        self._{f} = value"]
    out += ["", "    def __repr__(self):",
            f"        return f\"{name}({', '.join(f'{f}={{self.{f}!r}}' for f in fields)})\"",
            "", "    def to_dict(self):", "        return {"]
    out += [f"            \"{f}\": self.{f}," for f in fields]
    out += ["        }", ""]
    return "\n".join(out) + "\n"


def argparse_block(rng: random.Random) -> str:
    fields = _names(rng, rng.randint(2, 7))
    kinds = {f: rng.choice(("int", "float", "str")) for f in fields}
    default = {"int": lambda: str(rng.randint(0, 512)), "float": lambda: f"{rng.randint(1, 99) / 100}",
               "str": lambda: f"\"{rng.choice(WORDS)}\""}
    out = ["def parse_args(argv=None):", "    parser = argparse.ArgumentParser()"]
    out += [f"    parser.add_argument(\"--{f}\", type={kinds[f]}, default={default[kinds[f]]()}, "
            f"help=\"the {f}\")" for f in fields]
    out += ["    return parser.parse_args(argv)", "", "", "def main(argv=None):", "    args = parse_args(argv)"]
    out += [f"    {f} = args.{f}" for f in fields]
    out += [f"    print(\"{f}:\", {f})" for f in fields]
    out += ["", ""]
    return "\n".join(out) + "\n"


def constant_table(rng: random.Random) -> str:
    names = _names(rng, rng.randint(4, 12))
    start, step = rng.randint(0, 200), rng.choice((1, 2, 4, 8, 10, 16, 100))
    table = _camel(_names(rng, 1)).upper()
    out = [f"{table}_{n.upper()} = {start + i * step}" for i, n in enumerate(names)]
    out += ["", f"{table}_NAMES = {{"]
    out += [f"    {table}_{n.upper()}: \"{n}\"," for n in names]
    out += ["}", ""]
    return "\n".join(out) + "\n"


def dispatch_table(rng: random.Random) -> str:
    verbs = _names(rng, rng.randint(3, 7))
    obj = rng.choice(WORDS)
    out = []
    for v in verbs:
        out += [f"def handle_{v}({obj}):", f"    \"\"\"Handle the {v} of a {obj}.\"\"\"",
                f"    return {obj}.{v}()", "", ""]
    out += ["HANDLERS = {"] + [f"    \"{v}\": handle_{v}," for v in verbs] + ["}", ""]
    return "\n".join(out) + "\n"


KINDS: tuple[Callable[[random.Random], str], ...] = (times_table, data_class, argparse_block, constant_table,
                                                     dispatch_table)


def documents(seed: int, chars: int) -> list[str]:
    """Documents of every kind in turn, drawn from `seed`, until they hold `chars` characters."""
    rng = random.Random(seed)
    docs, used = [], 0
    while used < chars:
        doc = KINDS[len(docs) % len(KINDS)](rng)
        docs.append(doc)
        used += len(doc)
    return docs
