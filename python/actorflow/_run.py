"""actorflow.run(): `actorflow run` for whole jobs (training included)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading

# "file:line: message" lines of a topology that does not load.
_PROBLEM = re.compile(r"^[^\s:][^:]*:\d+: .+")


def binary() -> str:
    """The `actorflow` binary that came with this package (ACTORFLOW_BINARY
    overrides it)."""
    override = os.environ.get("ACTORFLOW_BINARY")
    if override:
        return override
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "actorflow")


def _arguments(topology, options: dict) -> list:
    args = [binary(), "run", os.fspath(topology)]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            for v in value:
                args += [flag, str(v)]
        else:
            args += [flag, str(value)]
    return args


def run(topology, *, progress: bool = False, echo: bool = True, **options):
    """Runs the job of the topology file `topology` as `actorflow run` does,
    in a child process of the package's `actorflow` binary, and returns its
    Result (with `report`: the --report-json object).

    Every keyword is the option of `actorflow run` of the same name, with
    "_" for "-": run("job.pbtxt", threads=2, logdir="runs", resume=True,
    max_restarts=0). True gives a flag, False or None leaves it out.
    progress: show the progress line (off by default). echo: pass the job's
    log and summary through to sys.stderr / sys.stdout.

    Raises TopologyError when the topology does not load, JobError when the
    job fails (with its one-line error), ValueError for an option that
    `actorflow run` does not know. Ctrl-C (KeyboardInterrupt) stops the job
    as Ctrl-C stops `actorflow run` (draining it, or taking a checkpoint
    first), waits for it, and raises on.
    """
    from . import JobError, Progress, Result, TopologyError

    if "report_json" in options:
        raise ValueError("run() reads the report itself: leave out report_json")
    if not progress:
        options["no_progress"] = True
    with tempfile.TemporaryDirectory(prefix="actorflow-run-") as tmp:
        report_path = os.path.join(tmp, "report.json")
        options["report_json"] = report_path
        args = _arguments(topology, options)
        stderr_lines: list = []
        try:
            child = subprocess.Popen(
                args,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
            )
        except FileNotFoundError:
            raise JobError(f"cannot run {args[0]}: not found") from None
        pumps = [
            threading.Thread(target=_pump, args=(child.stdout, sys.stdout if echo else None, None)),
            threading.Thread(target=_pump, args=(child.stderr, sys.stderr if echo else None, stderr_lines)),
        ]
        for t in pumps:
            t.start()
        try:
            rc = child.wait()
        except KeyboardInterrupt:
            child.send_signal(signal.SIGINT)
            child.wait()
            for t in pumps:
                t.join()
            raise
        for t in pumps:
            t.join()

        if rc == 2:
            # "file:line: message", or "file: message" for the file itself
            # (missing, unreadable).
            path = os.fspath(topology)
            problems = [line for line in stderr_lines
                        if _PROBLEM.match(line) or line.startswith(path + ": ")]
            if problems:
                raise TopologyError(problems)
            usage = [line for line in stderr_lines if line.strip() and not line.startswith("Run with --help")]
            raise ValueError("actorflow run: " + ("; ".join(usage) if usage else "usage error"))
        report = None
        if os.path.exists(report_path):
            with open(report_path, encoding="utf-8") as f:
                report = json.load(f)
        errors = [line[len("actorflow: "):] for line in stderr_lines if line.startswith("actorflow: ")]
        if report is None:
            raise JobError(errors[-1] if errors else f"actorflow run exited with {rc} and wrote no report")
        result = Result(
            ok=bool(report.get("ok")) and rc == 0,
            stopped=bool(report.get("stopped")),
            error=report.get("error") or (errors[-1] if errors and rc != 0 else ""),
            final=Progress(
                elapsed_s=report.get("elapsed_s", 0.0),
                items=report.get("items", 0),
                records=report.get("records", 0),
                bytes=report.get("bytes", 0),
            ),
            restarts=list(report.get("restarts", [])),
            report=report,
        )
        if not result.ok and not result.stopped:
            raise JobError(result.error, result)
        return result


def _pump(stream, out, keep):
    for line in stream:
        if out is not None:
            out.write(line)
            out.flush()
        if keep is not None:
            keep.append(line.rstrip("\n"))
    stream.close()
