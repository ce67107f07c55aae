"""Findings a person reads (issue 40): `scan` of the corpus, in both styles, gives short
messages, and in `--style global` one finding per site of the contract/blocker kind: a site kept
on pmap's calling convention has its PM612 alone on its line, the blocker named inside. The long
form of each message is its rule's doc (`pmap-migrate explain`).

Slow (a scan of corpus/ in each style, about 90 s): `.ci/run` runs it."""

from __future__ import annotations

import collections
import json

import pytest
from conftest import ROOT
from site_findings_view import NAMED
from typer.testing import CliRunner

from migrator.cli import app

# Characters in a message. Most are under 120; what remains above names long specs or values.
LIMIT = 200
# A site's own kind of finding in --style global: what was done, and why it is not global.
SITE_OR_BLOCKER = {"PM600", "PM612", *(f"PM6{n:02d}" for n in range(1, 11))}


def _scan(style: str, tmp_path) -> list[dict]:
    out = tmp_path / f"{style}.json"
    result = CliRunner().invoke(app, ["scan", "--style", style, "corpus", "--format", "json",
                                      "-o", str(out)])
    assert result.exit_code in (0, 1), result.output
    return json.loads(out.read_text())["findings"]


@pytest.fixture(scope="module", params=["faithful", "global"])
def findings(request, tmp_path_factory, monkeypatch_module):
    monkeypatch_module.chdir(ROOT)
    return request.param, _scan(request.param, tmp_path_factory.mktemp(request.param))


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.mark.slow
def test_every_message_is_short(findings):
    style, found = findings
    long = [f"{f['path']}:{f['line']} {f['code']} ({len(f['message'])}) {f['message']}"
            for f in found if len(f["message"]) > LIMIT]
    assert found and not long, "\n".join(long)


@pytest.mark.slow
def test_a_site_gets_one_finding_of_the_contract_or_blocker_kind(findings):
    style, found = findings
    if style != "global":
        pytest.skip("the global style's codes")
    at = collections.defaultdict(list)
    for f in found:
        if f["code"] in SITE_OR_BLOCKER:
            at[(f["path"], f["cell"], f["line"])].append(f["code"])
    contract_sites = {key for key, codes in at.items() if "PM612" in codes}
    assert contract_sites  # the corpus keeps some sites on the convention
    twice = {key: codes for key, codes in at.items()
             if key in contract_sites and len(codes) > 1}
    assert not twice, twice
    # and each PM612 names its blocker, or says it has no caller here
    unnamed = [f["message"] for f in found if f["code"] == "PM612"
               and not NAMED.search(f["message"]) and "callers are not in this module"
               not in f["message"]]
    assert not unnamed, unnamed
