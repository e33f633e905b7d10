"""What `segprep verify` checked and found: the report and its one-line OK summary."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class VerifyReport:
    """What was checked and what failed; `problems` empty means the output is sound."""

    directory: str
    problems: list[str] = dataclasses.field(default_factory=list)
    examples: dict[str, int] = dataclasses.field(default_factory=dict)  # split -> records read
    shards: int = 0
    rejects: int = 0
    indexed: bool = False  # metadata.json lists a record index, and it was checked
    classes: bool = False  # class ids and their statistics were checked

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        splits = ", ".join(f"{split} {count}" for split, count in self.examples.items())
        classes = ", class ids, class statistics" if self.classes else ""
        index = ", record index" if self.indexed else ""
        return (
            f"OK {self.directory}: {sum(self.examples.values())} examples ({splits}) in "
            f"{self.shards} shards, {self.rejects} rejects; record checksums, sha256, sizes, "
            f"images and masks{classes}{index} checked"
        )
