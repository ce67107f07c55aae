"""Start the property driver (equivalence.properties) per device count and show its verdicts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from equivalence.check import CheckOptions


def run_properties(original: Path, migrated: Path, function: str, inputs: str,
                   options: CheckOptions, max_examples: int, console: Console,
                   report_json: Path | None) -> int:
    results = []
    for devices in options.devices:
        with tempfile.TemporaryDirectory(prefix="pmap-migrate-prop-") as scratch:
            report = Path(scratch) / "report.json"
            command = [
                sys.executable, "-m", "equivalence.properties", str(original), str(migrated),
                "--function", function, "--inputs", inputs, "--devices", str(devices),
                "--reference-python", options.reference_python,
                "--max-examples", str(max_examples), "--report", str(report),
            ]
            project = str(Path(__file__).resolve().parent.parent)
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [project, os.environ.get("PYTHONPATH")])))
            try:
                completed = subprocess.run(command, capture_output=True, text=True, env=env,
                                           timeout=options.timeout * max(1, max_examples))
                result = json.loads(report.read_text()) if report.exists() else {
                    "function": function, "devices": devices, "verdict": "error",
                    "error": completed.stderr[-2000:]}
            except subprocess.TimeoutExpired:
                result = {"function": function, "devices": devices, "verdict": "error", "error": "timed out"}
        results.append(result)
        line = f"{function} [{devices} devices]: {result['verdict']}"
        if result.get("examples") is not None:
            line += f" after {result['examples']} calls"
        console.print(line, highlight=False)
        if result.get("minimal_failure"):
            console.print(f"  minimal differing input: {result['minimal_failure']['input']}", highlight=False)
            for difference in result["minimal_failure"]["differences"]:
                console.print(f"  difference: {difference}", highlight=False)
        if result.get("error"):
            console.print(f"  could not check: {result['error']}", highlight=False)
    if report_json:
        report_json.write_text(json.dumps({"schema_version": 1, "properties": results}, indent=2) + "\n")
    verdicts = {r["verdict"] for r in results}
    return 2 if "error" in verdicts else 1 if "different" in verdicts else 0
