"""A realistic data-parallel training step, timed as pmap and as both migrated styles.

The program is `dp_step_program.py`: LAYERS square float32 layers, a batch of BATCH rows split
over the devices, pmean of the gradients, SGD, the params donated (the issue's 4 x 4096^2,
batch 1024). This script writes it with the chosen sizes, migrates it with the project's own
transform in both styles (`transforms.pipeline.migrate_source`; it never imports jax, so the
programs can be written on one machine and timed on another), and times one blocked step of
each side per round, the sides' order rotated every round, so that neighbouring calls see the
same machine. `control` is the original loaded a second time: original vs control is the A/A
noise floor. Ratios are paired medians with a 95% bootstrap interval (step_worker.ratio_interval).

usage:
  python benchmarks/dp_step.py write DIR [--size small|full|tiny]     # the three programs
  python benchmarks/dp_step.py time DIR [--rounds N] [--pipelined K] [--sequential]
                                        [--hlo HLO_DIR] [--json FILE] [--extra NAME=FILE ...]
  python benchmarks/dp_step.py all DIR [--size small] ...              # write, then time

`all` sets 8 fake CPU devices (XLA_FLAGS) unless XLA_FLAGS is set; on an accelerator JAX uses
the accelerator (that flag only shapes the CPU platform). `time` needs no transform, only JAX,
so a machine without the project's dependencies can time programs written elsewhere.
`--pipelined K` adds K steps queued unblocked per side (30 rounds): the device's time per step
with dispatch hidden. Not a test: nothing here asserts a time. Figures: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "dp_step_program.py"
SIZES = {  # (LAYERS, WIDTH, BATCH); BATCH must divide by the device count
    "full": (4, 4096, 1024),   # the step: 64 MiB a layer
    "small": (4, 256, 64),     # 8 fake CPU devices in seconds
    "tiny": (4, 8, 8),         # almost no work: what is left is dispatch
}
SIDES = ("original", "faithful", "global")


def write_programs(out: Path, size: str) -> list[Path]:
    """The original with `size`'s constants, and its migrations in both styles."""
    sys.path.insert(0, str(HERE.parent))
    from transforms.pipeline import migrate_source

    layers, width, batch = SIZES[size]
    source = PROGRAM.read_text()
    for name, value in (("LAYERS", layers), ("WIDTH", width), ("BATCH", batch)):
        source = re.sub(rf"^{name} = \d+$", f"{name} = {value}", source, count=1, flags=re.M)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "original.py"]
    written[0].write_text(source)
    for style in ("faithful", "global"):
        result = migrate_source(source.encode(), style=style)
        codes = sorted({f.code for f in result.findings})
        print(f"{style}: {', '.join(codes)}", file=sys.stderr)
        path = out / f"{style}.py"
        path.write_bytes(result.source)
        written.append(path)
    return written


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class StepProbe:
    """Stands in for a module's `train_step`: times how long each call takes to return (the
    dispatch; the work is asynchronous) and, on the first call, keeps the compiled HLO."""

    def __init__(self, step):
        self.step = step
        self.dispatch: list[float] = []
        self.hlo = None
        self.state = None  # (params, x, y) for the next call, kept for `pipelined`

    def __call__(self, *args):
        if self.hlo is None:
            try:
                self.hlo = self.step.lower(*args).compile().as_text()
            except Exception as error:  # noqa: BLE001  a wrapper without .lower
                self.hlo = f"(no HLO: {type(error).__name__}: {error})"
        start = time.perf_counter()
        out = self.step(*args)
        self.dispatch.append(time.perf_counter() - start)
        self.state = (out[0], *args[1:])
        return out

    def pipelined(self, steps: int) -> float:
        """Seconds per step of `steps` calls queued without blocking: the device's time per
        step once dispatch hides behind the previous step (the generator is spent after)."""
        import jax

        params, *batch = self.state
        start = time.perf_counter()
        for _ in range(steps):
            params, _loss = self.step(params, *batch)
        jax.block_until_ready(params)
        seconds = (time.perf_counter() - start) / steps
        self.state = (params, *batch)
        return seconds


def hlo_summary(text: str) -> dict:
    """What a diff of two compiled steps looks for: data movement and donation."""
    entry = text[text.find("\nENTRY"):] if "\nENTRY" in text else text
    ops = {}
    for op in ("copy", "transpose", "all-reduce", "all-gather", "reduce-scatter",
               "collective-permute", "all-to-all", "dynamic-slice", "dynamic-update-slice",
               "reshape", "bitcast", "fusion", "convolution", "dot", "custom-call"):
        ops[op] = len(re.findall(rf"= [^=]*? {op}\(", text))
    first = text.splitlines()[0] if text else ""
    alias = re.search(r"input_output_alias=\{([^}]*)\}", first)
    return {"ops_whole_module": ops,
            "entry_ops": len(re.findall(r"^\s+\S+ = ", entry, flags=re.M)),
            "input_output_alias": alias.group(1).strip() if alias else None,
            "module_line": first[:400]}


def time_steps(directory: Path, rounds: int, warmup: int, extras: dict[str, Path],
               hlo_dir: Path | None, pipelined: int = 0, sequential: bool = False) -> dict:
    import jax
    import numpy as np  # noqa: F401  (step_worker's interval needs it)

    sys.path.insert(0, str(HERE))
    from step_worker import ratio_interval, summary

    files = {side: directory / f"{side}.py" for side in SIDES}
    files["control"] = directory / "original.py"
    files.update(extras)
    modules = {side: load(path, f"dp_step_{side}") for side, path in files.items()}
    probes, steps = {}, {}
    for side, module in modules.items():
        probes[side] = module.train_step = StepProbe(module.train_step)
        steps[side] = module.training()
    for side, step in steps.items():  # warm-up: compile, and settle the arrays' placement
        for _ in range(warmup):
            next(step)
        probes[side].dispatch.clear()
    samples = {side: [] for side in steps}
    sides = list(steps)
    for index in range(rounds):
        shift = index % len(sides)
        order = sides[shift:] + sides[:shift]
        if (index // len(sides)) % 2:
            order.reverse()
        if sequential:  # each side's steps back to back, as separate runs would time them
            order = [sides[index * len(sides) // rounds]] * len(sides)
        for side in order:
            start = time.perf_counter()
            next(steps[side])  # one step, blocked on its params
            samples[side].append(time.perf_counter() - start)
    queued = {side: [] for side in sides}
    for index in range(pipelined and 30):  # 30 rounds of `pipelined` queued steps
        for side in sides[index % len(sides):] + sides[:index % len(sides)]:
            queued[side].append(probes[side].pipelined(pipelined))
    result = {"jax_version": jax.__version__, "devices": jax.device_count(),
              "platform": jax.devices()[0].platform, "device_kind": jax.devices()[0].device_kind,
              "rounds": rounds, "sides": {}}
    for side in sides:
        entry = summary(samples[side])
        entry["dispatch_median_ms"] = statistics.median(probes[side].dispatch) * 1e3
        if side != "original":
            entry["vs_original"] = ratio_interval(samples["original"], samples[side])
        if queued[side]:
            entry["pipelined_median_ms"] = statistics.median(queued[side]) * 1e3
            if side != "original":
                entry["pipelined_vs_original"] = ratio_interval(queued["original"], queued[side])
        entry["hlo"] = hlo_summary(probes[side].hlo or "")
        if hlo_dir is not None:
            hlo_dir.mkdir(parents=True, exist_ok=True)
            (hlo_dir / f"{side}.hlo.txt").write_text(probes[side].hlo or "")
        result["sides"][side] = entry
    return result


def report(result: dict) -> str:
    lines = [f"jax {result['jax_version']}, {result['devices']} x {result['device_kind']} "
             f"({result['platform']}), {result['rounds']} rounds",
             f"{'side':<16}{'median ms':>10}{'p10-p90 ms':>18}{'dispatch ms':>13}"
             f"{'ratio vs original [95%]':>30}{'alias':>8}"]
    for side, entry in result["sides"].items():
        interval = entry.get("vs_original")
        ratio = (f"{interval['ratio']:.3f} [{interval['low']:.3f}, {interval['high']:.3f}]"
                 if interval else "-")
        alias = "yes" if entry["hlo"]["input_output_alias"] else "no"
        lines.append(f"{side:<16}{entry['median_ms']:>10.3f}"
                     f"{entry['p10_ms']:>9.3f}-{entry['p90_ms']:<8.3f}"
                     f"{entry['dispatch_median_ms']:>13.3f}{ratio:>30}{alias:>8}")
    if any("pipelined_median_ms" in entry for entry in result["sides"].values()):
        lines.append("queued (unblocked) steps, 30 rounds: device time per step")
        for side, entry in result["sides"].items():
            interval = entry.get("pipelined_vs_original")
            ratio = (f"{interval['ratio']:.3f} [{interval['low']:.3f}, {interval['high']:.3f}]"
                     if interval else "-")
            lines.append(f"{side:<16}{entry['pipelined_median_ms']:>10.3f}{ratio:>57}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("write", "time", "all"))
    parser.add_argument("directory", type=Path)
    parser.add_argument("--size", choices=tuple(SIZES), default="small")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--hlo", type=Path, help="write each side's compiled HLO here")
    parser.add_argument("--json", type=Path, help="write the result here")
    parser.add_argument("--pipelined", type=int, default=0, metavar="K",
                        help="also time K queued steps per side, 30 rounds (device time)")
    parser.add_argument("--sequential", action="store_true",
                        help="time each side's rounds back to back instead of interleaved")
    parser.add_argument("--extra", action="append", default=[], metavar="NAME=FILE",
                        help="also time this program (e.g. a hand-edited migration)")
    args = parser.parse_args(argv)
    if args.mode in ("write", "all"):
        write_programs(args.directory, args.size)
    if args.mode == "write":
        return 0
    if args.mode == "all" and "XLA_FLAGS" not in os.environ:
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    extras = dict(item.split("=", 1) for item in args.extra)
    result = time_steps(args.directory, args.rounds, args.warmup,
                        {name: Path(path) for name, path in extras.items()}, args.hlo,
                        args.pipelined, args.sequential)
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
