"""Rendering results: the rich table (people), `--json` (machines, the contract's shape) and JUnit XML (CI)."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree

from rich.console import Console
from rich.table import Table
from rich.text import Text

from checker.checks import PLAYBOOK, CheckResult
from checker.mutants import STAGES

STYLE = {"pass": "green", "fail": "bold red", "error": "bold magenta", "skip": "dim"}


def summary(results: list[CheckResult]) -> dict[str, int]:
    counts = {"pass": 0, "fail": 0, "error": 0, "skip": 0}
    for result in results:
        counts[result.status] += 1
    return counts


def to_json(
    target: str, kind: str, version: str, results: list[CheckResult], diagnosis: dict | None
) -> str:
    document = {
        "target": target,
        "kind": kind,
        "version": version,
        "results": [r.to_json() for r in results],
        "summary": summary(results),
    }
    if diagnosis:
        document["diagnosis"] = diagnosis
    return json.dumps(document, indent=2)


def print_table(
    console: Console, target: str, results: list[CheckResult], diagnosis: dict | None
) -> None:
    counts = summary(results)
    if diagnosis:
        console.print(Text("diagnosis: " + diagnosis["summary"].replace("`", ""), style="bold red"))
        for reference in diagnosis["references"]:
            console.print(f"  see {reference}")
    table = Table(title=f"grpo-check {target}", show_lines=False, expand=False)
    table.add_column("stage", style="cyan", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for stage in STAGES:
        rows = [r for r in results if r.stage == stage]
        for index, result in enumerate(rows):
            detail = Text("" if result.status == "pass" else result.message)
            if result.status in ("fail", "error"):
                if result.location:
                    detail.append(f"\nat {result.location}", style="yellow")
                detail.append(f"\nsee {PLAYBOOK}#{stage}", style="dim")
            table.add_row(
                stage if index == 0 else "",
                result.check.split(".", 1)[1],
                Text(result.status, style=STYLE[result.status]),
                detail,
                end_section=index == len(rows) - 1,
            )
    console.print(table)
    verdict = "all checks that ran passed" if counts["fail"] + counts["error"] == 0 else "FAILED"
    console.print(
        f"{counts['pass']} passed, {counts['fail']} failed, {counts['error']} errors, "
        f"{counts['skip']} skipped: {verdict}"
    )


def write_junit(path: str, target: str, results: list[CheckResult]) -> None:
    counts = summary(results)
    suite = ElementTree.Element(
        "testsuite",
        name=f"grpo-check {target}",
        tests=str(len(results)),
        failures=str(counts["fail"]),
        errors=str(counts["error"]),
        skipped=str(counts["skip"]),
        time=f"{sum(r.seconds for r in results):.3f}",
    )
    for result in results:
        case = ElementTree.SubElement(
            suite,
            "testcase",
            classname=f"grpo_check.{result.stage}",
            name=result.check,
            time=f"{result.seconds:.3f}",
        )
        text = result.message + (f" ({result.location})" if result.location else "")
        if result.status == "fail":
            ElementTree.SubElement(case, "failure", message=text).text = text
        elif result.status == "error":
            ElementTree.SubElement(case, "error", message=text).text = text
        elif result.status == "skip":
            ElementTree.SubElement(case, "skipped", message=text)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    ElementTree.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
