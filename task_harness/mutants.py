"""Single-spot mutants: a named, exact text replacement in one source file.

The mutation corpus (`task_harness/corpus/*.yaml`) proves the checker, and the debug-task generator draws
its bugs from the same corpus. A mutant applies only where its `find` text occurs exactly once, so a
change to the mutated source is caught when the corpus is loaded, not silently skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from reference_impl.protocol import STAGES

CORPUS_DIR = Path(__file__).resolve().parent / "corpus"


class MutantError(ValueError):
    """A malformed mutant or one that no longer applies to its source."""


@dataclass(frozen=True)
class Mutant:
    """One bug: replace `find` by `replace` in `file` (relative to the mutated tree's root)."""

    id: str
    stage: str
    file: str
    find: str
    replace: str
    description: str
    symptom: str = ""
    source: str = ""  # the public bug report or paper it imitates, if any
    # Further replacements the same bug makes, each {file, find, replace}: what an author who
    # believed the bug would also have written (the docstring it makes untrue, the import it no
    # longer needs), so that no text states the intended behaviour beside the bug.
    hunks: tuple[dict, ...] = ()

    @property
    def files(self) -> list[str]:
        """Every file the mutant changes, its main file first."""
        return list(dict.fromkeys([self.file, *(h["file"] for h in self.hunks)]))

    def apply_to_text(self, text: str) -> str:
        count = text.count(self.find)
        if count != 1:
            raise MutantError(
                f"mutant {self.id}: `find` occurs {count} times in {self.file}, expected once"
            )
        return text.replace(self.find, self.replace)

    def apply(self, root: Path) -> None:
        """Mutate `root / file` in place (root is a copy, never the original tree)."""
        path = root / self.file
        path.write_text(self.apply_to_text(path.read_text()))
        for hunk in self.hunks:
            path = root / hunk["file"]
            text = path.read_text()
            count = text.count(hunk["find"])
            if count != 1:
                raise MutantError(
                    f"mutant {self.id}: a hunk's `find` occurs {count} times in {hunk['file']}, "
                    "expected once"
                )
            path.write_text(text.replace(hunk["find"], hunk["replace"]))


def load_corpus(name: str, corpus_dir: Path = CORPUS_DIR) -> list[Mutant]:
    """The mutants of `corpus_dir/<name>.yaml` (e.g. "reference", "trl"), checked for shape."""
    path = corpus_dir / f"{name}.yaml"
    entries = yaml.safe_load(path.read_text()) or []
    mutants, seen = [], set()
    for entry in entries:
        try:
            mutant = Mutant(**entry)
        except TypeError as error:
            raise MutantError(f"{path.name}: malformed mutant {entry!r}: {error}") from None
        if mutant.stage not in STAGES:
            raise MutantError(f"{path.name}: mutant {mutant.id} has unknown stage {mutant.stage!r}")
        if mutant.id in seen:
            raise MutantError(f"{path.name}: duplicate mutant id {mutant.id}")
        seen.add(mutant.id)
        mutants.append(mutant)
    return mutants
