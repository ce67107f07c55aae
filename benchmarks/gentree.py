"""Deterministic generator of realistic Python source trees for the speed benchmark.

Each file is about 100-400 lines (median ~260) of ordinary application / ML code: a module docstring, imports,
constants, functions with docstrings and comments, dataclasses and classes with methods,
loops, comprehensions, try/except, f-strings. A chosen fraction of files also carries one or
two `jax.pmap` sites, written in the forms real 2022-24 JAX code used.

Only the standard library is used. The same (seed, files, fraction) always gives the same
bytes, so runs on different days measure the same input.
"""

from __future__ import annotations

import random
from pathlib import Path

# Words for identifiers. None of them contains a word the migrator's prefilter looks for
# (pmap, tree_map, device_put_*, PmapSharding, ...), so a file without a site really has none.
NOUNS = [
    "batch", "record", "token", "weight", "bias", "metric", "sample", "feature", "label",
    "score", "buffer", "state", "config", "layer", "block", "cache", "entry", "window",
    "shard", "chunk", "grad", "loss", "step", "epoch", "image", "vector", "matrix", "row",
    "column", "index", "offset", "scale", "mask", "logit", "prob", "count", "total", "queue",
    "request", "response", "user", "session", "item", "order", "price", "event", "frame",
]
VERBS = [
    "load", "save", "build", "compute", "update", "apply", "merge", "split", "normalize",
    "validate", "parse", "encode", "decode", "filter", "collect", "reduce", "resolve",
    "prepare", "render", "fetch", "refresh", "score", "rank", "clip", "pad", "flatten",
    "summarize", "reset", "emit", "track", "schedule", "sample", "project", "shuffle",
]
ADJECTIVES = ["raw", "clean", "cached", "local", "global", "padded", "scaled", "masked",
              "sorted", "merged", "final", "initial", "running", "smoothed", "partial"]

STDLIB_IMPORTS = [
    "import os", "import sys", "import json", "import math", "import time", "import logging",
    "import re", "import itertools", "import collections", "import dataclasses",
    "import functools", "import hashlib", "import pathlib", "import random", "import string",
    "from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple",
    "from collections import defaultdict, OrderedDict", "from pathlib import Path",
    "from dataclasses import dataclass, field",
]
THIRD_PARTY_IMPORTS = [
    "import numpy as np", "import jax", "import jax.numpy as jnp", "from jax import lax",
    "import optax", "import flax.linen as nn", "import requests", "import yaml",
]

COMMENTS = [
    "# Keep this in sync with the schema in the docs.",
    "# NOTE: the order matters here; callers rely on it.",
    "# TODO(team): revisit once the upstream API settles.",
    "# Fast path: most inputs are already in the right shape.",
    "# Avoid an extra copy when the input is contiguous.",
    "# This mirrors what the previous implementation did.",
    "# Guard against empty inputs (seen in production logs).",
    "# The constant below was tuned on the validation set.",
    "# See the design doc for why this is done lazily.",
]


def _name(rng: random.Random, parts: int = 2) -> str:
    pool = [rng.choice(VERBS)] + [rng.choice(NOUNS) for _ in range(parts - 1)]
    return "_".join(pool)


def _noun(rng: random.Random) -> str:
    return rng.choice(NOUNS)


def _class_name(rng: random.Random) -> str:
    return "".join(w.capitalize() for w in (rng.choice(ADJECTIVES), _noun(rng), rng.choice(
        ["Manager", "Processor", "Model", "Store", "Builder", "Tracker", "Client", "Pipeline"])))


def _expr(rng: random.Random, names: list[str]) -> str:
    a, b = rng.choice(names), rng.choice(names)
    forms = [
        f"{a} + {b}", f"{a} * {rng.randint(2, 9)}", f"max({a}, {b})", f"abs({a} - {b})",
        f"({a} or 0) + {rng.random():.3f}", f"len(str({a}))", f"{a} if {b} else {rng.randint(0, 5)}",
        f"min({a}, {rng.randint(10, 100)})", f"round({a} / ({b} or 1), 4)",
    ]
    return rng.choice(forms)


def _function(rng: random.Random, indent: str = "", method: bool = False) -> list[str]:
    name = _name(rng, rng.randint(2, 3))
    args = sorted({_noun(rng) for _ in range(rng.randint(1, 4))})
    params = (["self"] if method else []) + [
        f"{a}: {rng.choice(['int', 'float', 'str', 'Any', 'Optional[int]', 'Sequence[float]'])}"
        if rng.random() < 0.5 else a for a in args
    ]
    if rng.random() < 0.3:
        params.append(f"{rng.choice(ADJECTIVES)}_{_noun(rng)}={rng.choice(['None', 'True', 'False', '0', '1.0'])}")
    ret = rng.choice(["", " -> int", " -> float", " -> dict", " -> list", " -> Optional[str]"])
    lines = [f"{indent}def {name}({', '.join(params)}){ret}:"]
    body = indent + "    "
    lines.append(f'{body}"""{rng.choice(VERBS).capitalize()} the {_noun(rng)} and return the '
                 f'{rng.choice(ADJECTIVES)} {_noun(rng)}."""')
    local_names = list(args)
    for _ in range(rng.randint(3, 12)):
        kind = rng.random()
        if kind < 0.25:
            var = f"{rng.choice(ADJECTIVES)}_{_noun(rng)}"
            lines.append(f"{body}{var} = {_expr(rng, local_names)}")
            local_names.append(var)
        elif kind < 0.38:
            var = f"{_noun(rng)}s"
            src = rng.choice(local_names)
            letter = var[0]
            lines.append(f"{body}{var} = [{letter} * {rng.randint(1, 4)} for {letter} in "
                         f"range(len(str({src}))) if {letter} % {rng.randint(2, 5)}]")
            local_names.append(var)
        elif kind < 0.5:
            it = rng.choice(local_names)
            lines.append(f"{body}for position, value in enumerate(str({it})):")
            lines.append(f"{body}    if position > {rng.randint(2, 20)}:")
            lines.append(f"{body}        break")
            lines.append(f"{body}    {rng.choice(COMMENTS)}")
            lines.append(f"{body}    {it} = value")
        elif kind < 0.6:
            lines.append(f"{body}try:")
            lines.append(f"{body}    {rng.choice(local_names)} = int({rng.choice(local_names)})")
            lines.append(f"{body}except (TypeError, ValueError) as error:")
            lines.append(f'{body}    logger.debug("could not convert %s: %s", "{_noun(rng)}", error)')
        elif kind < 0.7:
            a = rng.choice(local_names)
            lines.append(f"{body}if {a} is None:")
            lines.append(f'{body}    raise ValueError(f"{a} must be set, got {{{a}!r}}")')
        elif kind < 0.8:
            lines.append(f"{body}{rng.choice(COMMENTS)}")
            var = f"{_noun(rng)}_map"
            lines.append(f"{body}{var} = {{key: {_expr(rng, local_names)} for key in range({rng.randint(2, 8)})}}")
            local_names.append(var)
        elif kind < 0.9:
            lines.append(f"{body}while {rng.choice(local_names)} and {rng.randint(0, 1)}:")
            lines.append(f"{body}    break")
        else:
            lines.append(f"{body}with open(os.devnull, \"w\") as handle:")
            lines.append(f"{body}    handle.write(f\"{{{rng.choice(local_names)}}}\\n\")")
    lines.append(f"{body}return {_expr(rng, local_names)}")
    return lines


def _dataclass(rng: random.Random) -> list[str]:
    name = _class_name(rng) + "Config"
    lines = ["@dataclass", f"class {name}:", f'    """Settings for the {_noun(rng)} {rng.choice(VERBS)}er."""', ""]
    for _ in range(rng.randint(3, 8)):
        field_name = f"{rng.choice(ADJECTIVES)}_{_noun(rng)}"
        typ, default = rng.choice([("int", str(rng.randint(1, 512))), ("float", f"{rng.random():.4f}"),
                                   ("str", f'"{_noun(rng)}"'), ("bool", rng.choice(["True", "False"])),
                                   ("List[int]", "field(default_factory=list)")])
        lines.append(f"    {field_name}: {typ} = {default}")
    return lines


def _class(rng: random.Random) -> list[str]:
    name = _class_name(rng)
    lines = [f"class {name}:", f'    """{rng.choice(VERBS).capitalize()}s {_noun(rng)}s for the '
             f'{rng.choice(ADJECTIVES)} {_noun(rng)} path.', "",
             f"    Instances are cheap to create; the expensive work happens in `{rng.choice(VERBS)}`.",
             '    """', ""]
    attrs = sorted({_noun(rng) for _ in range(rng.randint(2, 5))})
    lines.append(f"    def __init__(self, {', '.join(attrs)}):")
    for a in attrs:
        lines.append(f"        self.{a} = {a}")
    lines.append(f"        self._{_noun(rng)}_cache = {{}}")
    for _ in range(rng.randint(2, 5)):
        lines.append("")
        if rng.random() < 0.2:
            lines.append("    @property")
            prop = _noun(rng)
            lines.append(f"    def {prop}_size(self) -> int:")
            lines.append(f"        return len(self._{_noun(rng)}_cache) + {rng.randint(0, 3)}")
        else:
            lines.extend(_function(rng, indent="    ", method=True))
    lines.append("")
    lines.append("    def __repr__(self) -> str:")
    lines.append(f'        return f"{name}({", ".join(f"{a}={{self.{a}!r}}" for a in attrs)})"')
    return lines


def _numeric_function(rng: random.Random) -> list[str]:
    """A jnp/np function of the kind found next to pmap code (no pmap itself)."""
    name = _name(rng)
    return [
        f"def {name}(x, w, b):",
        f'    """Dense layer with a {rng.choice(["relu", "tanh", "gelu"])} activation."""',
        "    y = jnp.dot(x, w) + b",
        f"    {rng.choice(COMMENTS)}",
        f"    return jnp.{rng.choice(['tanh', 'abs', 'sqrt', 'exp'])}(y) * {rng.random():.3f}",
    ]


# --- pmap sites ------------------------------------------------------------------------
# Each template is a self-contained block, formatted with a suffix to keep names unique.

PMAP_SITES = [
    '''\
@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,))
def train_step{s}(params, x, y):
    """One data-parallel SGD step; gradients are averaged across devices."""
    loss, grads = jax.value_and_grad(loss_fn{s})(params, x, y)
    grads = lax.pmean(grads, axis_name="batch")
    loss = lax.pmean(loss, axis_name="batch")
    new_params = {{k: params[k] - 0.01 * grads[k] for k in params}}
    return new_params, loss
''',
    '''\
def predict{s}(params, inputs):
    logits = jnp.dot(inputs, params["w"]) + params["b"]
    return jax.nn.log_softmax(logits)


p_predict{s} = jax.pmap(predict{s}, in_axes=(0, None))
''',
    '''\
@jax.pmap
def normalize{s}(x):
    # Per-device normalisation, no communication.
    return (x - x.mean()) / (x.std() + 1e-6)
''',
    '''\
def double_all{s}(xs):
    """Doubles every shard on its own device."""
    return jax.pmap(lambda x: x * 2)(xs)
''',
    '''\
class Replicated{s}:
    """Holds a pmapped update and the replicated parameters."""

    def __init__(self, params):
        self.params = params
        self._p_update = jax.pmap(self._update, axis_name="i")

    def _update(self, params, grads):
        grads = lax.psum(grads, "i")
        return params - 0.1 * grads

    def step(self, grads):
        self.params = self._p_update(self.params, grads)
        return self.params
''',
    '''\
def make_eval_fn{s}(num_classes):
    def eval_step(params, batch, training):
        logits = jnp.dot(batch["x"], params) * (1.0 if training else 0.5)
        correct = jnp.sum(jnp.argmax(logits, -1) == batch["y"])
        return lax.psum(correct, axis_name="d")

    return jax.pmap(eval_step, axis_name="d", static_broadcasted_argnums=(2,))
''',
    '''\
def global_sum{s}(x):
    total = lax.psum(x, axis_name="batch")
    return total


p_global_sum{s} = jax.pmap(global_sum{s}, axis_name="batch", out_axes=None)
''',
    '''\
@functools.partial(jax.pmap, axis_name="devices", in_axes=(0, 0, None))
def apply_update{s}(params, grads, lr):
    grads = lax.pmean(grads, "devices")
    return params - lr * grads
''',
    '''\
def sgd_step{s}(params, grads, lr, momentum):
    return params - lr * grads * momentum


p_sgd_step{s} = jax.pmap(functools.partial(sgd_step{s}, lr=0.1, momentum=0.9), axis_name="batch")
''',
    '''\
def gather_all{s}(x):
    return lax.all_gather(x, "i")


def run_gather{s}(xs):
    gathered = jax.pmap(gather_all{s}, axis_name="i", devices=jax.local_devices())(xs)
    return np.asarray(gathered[0])
''',
]

LOSS_FN = '''\
def loss_fn{s}(params, x, y):
    pred = jnp.dot(x, params["w"]) + params["b"]
    return jnp.mean((pred - y) ** 2)
'''

REPLICATE = '''\
def replicate{s}(params):
    """Put one copy of the parameters on every local device."""
    return jax.device_put_replicated(params, jax.local_devices())
'''


def make_file(rng: random.Random, with_pmap: bool, sites: int = 1, tree_map: bool = False) -> str:
    target_lines = rng.randint(90, 360)
    out: list[str] = []
    topic = f"{rng.choice(ADJECTIVES)} {_noun(rng)} {rng.choice(VERBS)}ing"
    out.append(f'"""Utilities for {topic}.')
    out.append("")
    out.append(f"This module is part of the {_noun(rng)} service. It {rng.choice(VERBS)}s "
               f"{_noun(rng)}s and {rng.choice(VERBS)}s {_noun(rng)}s.")
    out.append('"""')
    out.append("")
    out.append("from __future__ import annotations")
    out.append("")
    imports = sorted(set(rng.sample(STDLIB_IMPORTS, rng.randint(3, 7)) + ["import os", "import logging",
                      "from dataclasses import dataclass, field",
                      "from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple"]))
    needs_jax = with_pmap or tree_map or rng.random() < 0.4
    third = ["import numpy as np"] if rng.random() < 0.6 else []
    if needs_jax:
        third += ["import jax", "import jax.numpy as jnp", "from jax import lax", "import numpy as np"]
    if with_pmap:
        imports.append("import functools")
    out.extend(sorted(set(imports)))
    if third:
        out.append("")
        out.extend(sorted(set(third)))
    out.append("")
    out.append("logger = logging.getLogger(__name__)")
    out.append("")
    for _ in range(rng.randint(1, 4)):
        out.append(f"{rng.choice(ADJECTIVES).upper()}_{_noun(rng).upper()} = {rng.choice([str(rng.randint(1, 4096)), f'{rng.random():.5f}', repr(_noun(rng))])}")
    blocks: list[list[str]] = []
    if with_pmap:
        chosen = rng.sample(range(len(PMAP_SITES)), sites)
        for index, site in enumerate(chosen):
            suffix = f"_{index}"
            if site == 0:
                blocks.append(LOSS_FN.format(s=suffix).splitlines())
            blocks.append(PMAP_SITES[site].format(s=suffix).splitlines())
        if rng.random() < 0.3:
            blocks.append(REPLICATE.format(s="").splitlines())
    if tree_map:
        blocks.append(["def scale_tree(params, factor):",
                       '    """Multiply every leaf by factor."""',
                       "    return jax.tree_util.tree_map(lambda p: p * factor, params)"])
    while sum(len(b) + 2 for b in blocks) + len(out) < target_lines:
        kind = rng.random()
        if kind < 0.5:
            blocks.append(_function(rng))
        elif kind < 0.75:
            blocks.append(_class(rng))
        elif kind < 0.88:
            blocks.append(_dataclass(rng))
        elif needs_jax:
            blocks.append(_numeric_function(rng))
        else:
            blocks.append(_function(rng))
    rng.shuffle(blocks)  # the pmap site lands anywhere in the file
    for block in blocks:
        out.append("")
        out.append("")
        out.extend(block)
    if rng.random() < 0.3:
        out += ["", "", 'if __name__ == "__main__":', "    logging.basicConfig(level=logging.INFO)",
                f"    logger.info(\"{_noun(rng)} ready\")"]
    return "\n".join(out) + "\n"


def generate_tree(
    root: Path, files: int, pmap_fraction: float, seed: int, tree_map_fraction: float = 0.0
) -> dict:
    """Write `files` modules under `root` in nested packages; return what was written."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    with_pmap = set(rng.sample(range(files), round(files * pmap_fraction)))
    rest = [i for i in range(files) if i not in with_pmap]
    with_tree_map = set(rng.sample(rest, round(len(rest) * tree_map_fraction)))
    packages = ["core", "models", "data", "training", "serving", "utils", "eval", "io"]
    total_lines = total_bytes = 0
    for i in range(files):
        file_rng = random.Random(f"{seed}-{i}")
        package = root / packages[i % len(packages)] / f"sub{(i // len(packages)) % 12:02d}"
        package.mkdir(parents=True, exist_ok=True)
        init = package / "__init__.py"
        if not init.exists():
            init.write_text("")
        sites = 2 if (i in with_pmap and file_rng.random() < 0.25) else 1
        text = make_file(file_rng, i in with_pmap, sites, tree_map=i in with_tree_map)
        path = package / f"{_name(file_rng)}_{i:05d}.py"
        path.write_text(text)
        total_lines += text.count("\n")
        total_bytes += len(text)
    py_files = sum(1 for _ in root.rglob("*.py"))
    return {"files": py_files, "generated": files, "with_pmap": len(with_pmap),
            "with_tree_map": len(with_tree_map), "lines": total_lines, "bytes": total_bytes}


if __name__ == "__main__":  # manual look: python benchmarks/gentree.py OUT N FRACTION
    import sys

    print(generate_tree(Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), seed=0))
