"""Top-level code is a caller like any function (issue 41, item 3): a script's statements, an
`if __name__ == "__main__":` block and a notebook's cells, read in order. Each program here is
small and written for the rule it shows; the notebook forms run top to bottom on 8 fake CPU
devices in both the original and the migration (`check --entry NAME.ipynb`)."""

from __future__ import annotations

import pytest
from conftest import legacy_python_or_skip
from test_notebook_check import check, write_notebook

from transforms.contract_names import is_fully_global
from transforms.pipeline import migrate_source
from site_findings_view import migrated_with_named_blockers

HEADER = "import jax\nimport jax.numpy as jnp\nimport numpy as np\n\nn = jax.local_device_count()\n"

# A name bound to a plain def, called, then rebound to a pmap of something else in a later
# cell (blackjax's `inference_loop_multiple_chains`): the call above the rebinding calls the
# def, with its own parameters, and is no call of the pmap.
REBOUND = (
    "def noisy(key, x):\n"
    "    return x + jax.random.normal(key, x.shape)\n\n\n"
    "def sample(key, x, chains):\n"
    "    keys = jax.random.split(key, chains)\n"
    "    return jax.vmap(noisy)(keys, x)\n",
    "x = np.ones((n, 3), np.float32)\n"
    "first = sample(jax.random.PRNGKey(0), x, n)\n",
    "sample = jax.pmap(lambda v: v * 2.0 + 1.0)\n",
    "result = sample(x)\n",
)

# A pmap bound inside a top-level `try:` (the notebook idiom of trying a step), read only by
# top-level code: a site of that code, as a local pmap is one of its function.
TRY_BUILT = (
    "x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)\n"
    "try:\n"
    "    double = jax.pmap(lambda v: v * 2 + jax.lax.psum(v, 'i'), axis_name='i')\n"
    "    result = double(x)\n"
    "except ValueError as error:\n"
    "    print(error)\n",
)

INLINE = (
    "x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)\n"
    "y = jax.pmap(lambda v: v * 2 + jax.lax.psum(v, 'i'), axis_name='i')(x)\n"
    "result = np.asarray(y)\n",
)

# A function whose body is not read (`jnp.tanh`) mapped over a batch: it sees one device's
# row under pmap, so the batch keeps pmap's stacked layout and it runs as jax.vmap over each
# device's block (was PM602, kept on the contract).
OPAQUE_INLINE = (
    "x = np.arange(n * 4, dtype=np.float32).reshape(n, 4) / 10\n"
    "y = jax.pmap(jnp.tanh)(x)\n"
    "result = np.asarray(y)\n",
)

LAMBDA_LOOP = (
    "w = jnp.stack([jnp.ones(3)] * n)\n"
    "xs = np.ones((n, 5, 3), np.float32)\n"
    "step = jax.pmap(lambda w, x: w - 0.1 * jax.lax.pmean(jnp.mean(x, axis=0), 'b'),"
    " axis_name='b')\n",
    "for _ in range(3):\n"
    "    w = step(w, xs)\n"
    "result = np.asarray(w[0])\n",
)

MAIN_BLOCK = (
    "def update(w, x):\n"
    "    g = jax.grad(lambda w: jnp.mean((x @ w) ** 2))(w)\n"
    "    return w - 0.1 * jax.lax.pmean(g, 'batch')\n\n\n"
    "p_update = jax.pmap(update, axis_name='batch')\n\n\n"
    "if __name__ == '__main__':\n"
    "    w = jax.device_put_replicated(jnp.ones(3), jax.local_devices())\n"
    "    x = np.random.RandomState(0).randn(n * 8, 3).astype(np.float32).reshape(n, 8, 3)\n"
    "    for _ in range(2):\n"
    "        w = p_update(w, x)\n"
    "    result = np.asarray(w[0])\n",
)

PROGRAMS = {"rebound": REBOUND, "try_built": TRY_BUILT, "inline": INLINE,
            "opaque_inline": OPAQUE_INLINE,
            "lambda_loop": LAMBDA_LOOP, "main_block": MAIN_BLOCK}


def _script(cells: tuple[str, ...]) -> bytes:
    return "\n".join((HEADER, *cells)).encode()


def _global(cells: tuple[str, ...]):
    return migrated_with_named_blockers(migrate_source(_script(cells), style="global"))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_top_level_programs_go_fully_global(name):
    result = _global(PROGRAMS[name])
    codes = sorted({f.code for f in result.findings})
    assert "PM600" in codes and not {"PM601", "PM603", "PM608", "PM612"} & set(codes), codes
    assert is_fully_global(result.source), result.source.decode()


def test_a_call_above_the_rebinding_still_calls_the_plain_def():
    text = _global(REBOUND).source.decode()
    plain, call = text.index("def sample(key, x, chains):"), text.index("first = sample(")
    site = text.index("@jax.jit\ndef sample(v):")  # the site, where the rebinding was
    assert plain < call < site < text.index("result = sample(x)")


def test_a_read_below_the_rebinding_is_still_a_call_of_the_site():
    """Only what runs above the site's statement means the earlier binding: a call with the
    def's three arguments below it is the pmap's, with one parameter."""
    cells = (*REBOUND, "again = sample(jax.random.PRNGKey(0), x, n)\n")
    findings = [f for f in _global(cells).findings if f.code == "PM603"]
    assert findings and "called with 3 of its 1 parameters" in findings[0].message


def test_a_try_built_pmap_a_function_reads_is_not_a_top_level_site():
    """`double` is a module global: a def that reads it calls it where the analysis of the
    top-level code does not look, so it keeps pmap's contract."""
    cells = (*TRY_BUILT, "def twice(v):\n    return double(v)\n")
    result = _global(cells)
    assert "PM600" not in {f.code for f in result.findings}
    assert not is_fully_global(result.source)


def test_a_try_built_pmap_bound_twice_is_not_a_site():
    cells = (*TRY_BUILT, "double = None\n")
    assert "PM600" not in {f.code for f in _global(cells).findings}


@pytest.mark.equivalence
@pytest.mark.parametrize("name", ["rebound", "try_built", "opaque_inline", "main_block"])
def test_top_level_programs_compute_the_same_on_8_devices(name, tmp_path):
    write_notebook(tmp_path / "project" / "nb.ipynb", HEADER, *PROGRAMS[name])
    legacy = ["--reference-python", legacy_python_or_skip()] if "device_put_replicated" in \
        "".join(PROGRAMS[name]) else []  # gone from current JAX: the original runs on 0.4.38
    run, results = check(tmp_path / "project", "--entry", "nb.ipynb", "--devices", "8",
                         "--style", "global", *legacy, tmp_path=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert [r["verdict"] for r in results] == ["equivalent"], results


def test_a_function_reading_a_name_bound_above_the_pmap_too_keeps_the_contract():
    """`g` calls `f` and runs above the rebinding, so it calls the plain `f` with the caller's
    values as they are: read as the pmap's caller, `x` would be merged under it (a wrong
    rewrite before this rule)."""
    cells = ("def f(x):\n    return x.sum(axis=1)\n\n\ndef g(x):\n    return f(x)\n",
             "x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)\na = g(x)\n",
             "f = jax.pmap(lambda v: v + 1)\nresult = f(x)\n")
    result = _global(cells)
    assert [f.code for f in result.findings if f.code.startswith("PM60")] == ["PM603"]
    assert "x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)" in result.source.decode()


def test_a_def_below_the_pmap_rebinds_its_name():
    cells = (*LAMBDA_LOOP, "def step(w, x):\n    return w\n", "w = step(w, xs)\n")
    findings = [f for f in _global(cells).findings if f.code == "PM603"]
    assert findings and "bound again" in findings[0].message
