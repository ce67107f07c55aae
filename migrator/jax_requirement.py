"""`target-jax = "auto"`: the JAX version a project is written for, read from its `jax`
requirement (pyproject.toml's project / optional / poetry dependencies, else requirements*.txt).

A constraint is a list of alternatives (poetry's `||`); an alternative is a list of
(operator, version) clauses that must all hold, as in a PEP 440 specifier set.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from migrator.config_error import ConfigError
from transforms.target import NEWEST, TargetJax

# JAX releases that `target-jax = "auto"` chooses among, oldest first.
JAX_RELEASES: tuple[str, ...] = (
    "0.4.25", "0.4.30", "0.4.38", "0.5.0", "0.5.3", "0.6.0", "0.6.1", "0.7.0", "0.7.2",
    "0.8.0", "0.9.0", "0.9.2", "0.10.0", "0.10.2",
)

Clause = tuple[str, str]
Alternatives = list[list[Clause]]


def detect_target(root: Path, document: dict | None = None, source: Path | None = None) -> str:
    """The JAX version a project is written for, from its `jax` requirement.

    Where: `[project].dependencies`, else `[project.optional-dependencies]` (all extras
    together), else `[tool.poetry.dependencies]` of the pyproject.toml; else
    `requirements.txt`, else the other `requirements*.txt` files (together) in `root`.
    The first place that names jax decides; requirements found together must all hold.

    Which version: `==X` gives X; otherwise the newest release in `JAX_RELEASES` that the
    requirement admits (so `>=X,<Y` gives the newest known below Y and `>=X` the newest
    known). No requirement, or one without a version, gives the newest target (NEWEST).
    A requirement no known release meets gives its lower bound when it has one (`>=0.11`
    gives 0.11); otherwise, or when the requirements contradict each other, ConfigError.
    """
    document = document or {}
    for where, found in _pyproject_requirements(document, source):
        if found:
            return _choose(found, where)
    for where, found in _requirements_files(root):
        if found:
            return _choose(found, where)
    return NEWEST


def _pyproject_requirements(document: dict, source: Path | None):
    project = document.get("project", {})
    project = project if isinstance(project, dict) else {}
    dependencies = project.get("dependencies", [])
    if isinstance(dependencies, list):
        where = f"{source}: project.dependencies"
        yield where, _from_pep508(dependencies, where)
    optional = project.get("optional-dependencies", {})
    if isinstance(optional, dict):
        where = f"{source}: project.optional-dependencies"
        yield where, [
            alt for extra, items in optional.items() if isinstance(items, list)
            for alt in _from_pep508(items, f"{where}.{extra}")
        ]
    tool = document.get("tool", {})
    poetry = tool.get("poetry", {}) if isinstance(tool, dict) else {}
    poetry_dependencies = poetry.get("dependencies", {}) if isinstance(poetry, dict) else {}
    if isinstance(poetry_dependencies, dict):
        where = f"{source}: tool.poetry.dependencies"
        yield where, [
            _from_poetry(value, f"{where}.{name}")
            for name, value in poetry_dependencies.items() if _normalise(name) == "jax"
        ]


def _requirements_files(root: Path):
    files = sorted(root.glob("requirements*.txt"), key=lambda p: (p.name != "requirements.txt", p.name))
    first = [p for p in files if p.name == "requirements.txt"]
    rest = [p for p in files if p.name != "requirements.txt"]
    for group in (first, rest):
        found, where = [], []
        for path in group:
            if not path.is_file():
                continue
            for number, line in _requirement_lines(path):
                found += _from_pep508([line], f"{path}:{number}")
            where.append(str(path))
        if where:
            yield " + ".join(where), found


def _requirement_lines(path: Path):
    """(line number, requirement) for each requirement line; options (-r, -e, --index-url,
    ...) and comments are skipped, continuation lines joined."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise ConfigError(f"{path}: cannot be read: {error.strerror or error}") from None
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*", "", raw).rstrip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = (pending + line).strip(), ""
        line = re.split(r"\s+--?[A-Za-z]", line, maxsplit=1)[0]  # per-requirement options (--hash)
        if line and not line.startswith("-"):
            yield start, line


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_NAME = re.compile(r"\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")


def _from_pep508(items: list, where: str) -> list[list[Clause]]:
    """The specifier clauses of every `jax` requirement among PEP 508 strings."""
    found = []
    for item in items:
        if not isinstance(item, str):
            continue
        name = _NAME.match(item)
        if not name or _normalise(name.group(1)) != "jax":
            continue  # cheap: most lines name another package (jaxlib and jax-foo included)
        try:
            requirement = Requirement(item)
        except InvalidRequirement as error:
            raise ConfigError(f"{where}: invalid requirement {item!r}: {error}") from None
        if canonicalize_name(requirement.name) != "jax":
            continue
        found.append(_clauses(str(requirement.specifier), where))
    return found


def _from_poetry(value: Any, where: str) -> list[Clause] | Alternatives:
    """Poetry's constraint syntax: `^0.4.30`, `~0.4.30`, `0.4.38`, `>=0.4,<0.5`, `*`,
    `a || b`, or a table / list of tables with `version`."""
    if isinstance(value, dict):
        value = value.get("version", "*")
    if isinstance(value, list):
        alternatives: Alternatives = []
        for entry in value:
            alternatives += _alternatives(_from_poetry(entry, where))
        return alternatives
    if not isinstance(value, str):
        raise ConfigError(f"{where}: not a version constraint: {value!r}")
    alternatives = []
    token = re.compile(r"(\^|~=|~|==|!=|<=|>=|<|>|=)?\s*([0-9][0-9A-Za-z.*+!-]*|\*)")
    for alternative in value.split("||"):
        clauses: list[Clause] = []
        matches = list(token.finditer(alternative))
        if re.sub(r"[,\s]", "", token.sub("", alternative)):
            raise ConfigError(f"{where}: not a version constraint: {value!r}")
        for match in matches:
            op, version = match.group(1) or "==", match.group(2)
            if version == "*":
                continue
            release = [int(x) for x in re.findall(r"\d+", version.split("*")[0])[:3]] or [0]
            if op in ("^", "~"):
                if op == "~":
                    upper = [release[0], release[1] + 1] if len(release) >= 2 else [release[0] + 1]
                else:
                    first = next((i for i, x in enumerate(release) if x), len(release) - 1)
                    upper = release[:first] + [release[first] + 1]
                clauses += [(">=", version), ("<", ".".join(map(str, upper)))]
            else:
                clauses.append(("==" if op == "=" else op, version))
        alternatives.append(clauses)
    return alternatives


def _alternatives(found: list[Clause] | Alternatives) -> Alternatives:
    if found and isinstance(found[0], list):
        return found  # type: ignore[return-value]
    return [found]  # type: ignore[list-item]


def _clauses(specifier: str, where: str) -> list[Clause]:
    specifier = specifier.strip()
    if not specifier:
        return []
    try:
        return [(s.operator, s.version) for s in SpecifierSet(specifier)]
    except InvalidSpecifier as error:
        raise ConfigError(f"{where}: invalid version specifier {specifier!r}: {error}") from None


def _choose(found: list, where: str) -> str:
    """Combine every requirement found in one place (all must hold) and pick a version."""
    combined: Alternatives = [[]]
    for requirement in found:
        combined = [a + b for a in combined for b in _alternatives(requirement)]
    described = " || ".join(",".join(op + v for op, v in alt) or "*" for alt in combined)
    choices = [_choose_one(alternative) for alternative in combined]
    versions = [choice for choice in choices if isinstance(choice, str)]
    if not versions:
        problem = (
            "matches no known JAX release and has no lower bound to read"
            if None in choices else "cannot be met (its clauses contradict each other)"
        )
        raise ConfigError(f"{where}: the jax requirement {described!r} {problem}; set target-jax explicitly")
    version = max(versions, key=_release)
    try:
        TargetJax.parse(version)
    except ValueError as error:
        raise ConfigError(f"{where}: jax requirement {described!r}: {error}") from None
    return version


def _choose_one(clauses: list[Clause]) -> str | None | bool:
    """A version for one set of clauses; None when none can be read, False when the clauses
    contradict each other."""
    if not clauses:
        return NEWEST
    for clause in clauses:
        op, version = clause
        if op in ("==", "===") and "*" not in version:
            others = [c for c in clauses if c != clause]
            return _base(version) if _admits(others, version) else False
    admitted = [release for release in JAX_RELEASES if _admits(clauses, release)]
    if admitted:
        return admitted[-1]
    lower = [
        _base(version) for op, version in clauses
        if op in (">=", ">", "~=") or (op == "==" and "*" in version)
    ]
    if not lower:
        return None
    bound = max(lower, key=_release)
    rest = [(op, v) for op, v in clauses if op not in (">", ">=")]  # a bound admits itself here
    return bound if _admits(rest, bound) else False


def _base(version: str) -> str:
    """The release part of a version (`0.4.*` -> `0.4`, `0.4.30rc1` -> `0.4.30`)."""
    try:
        return Version(version.removesuffix(".*")).base_version
    except InvalidVersion:
        return version


def _release(version: str) -> Version:
    try:
        return Version(version.removesuffix(".*"))
    except InvalidVersion:
        return Version("0")


def _admits(clauses: list[Clause], version: str) -> bool:
    if not clauses:
        return True
    try:
        specifier = SpecifierSet(",".join(op + v for op, v in clauses))
        return specifier.contains(Version(version), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return False
