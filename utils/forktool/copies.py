"""The `# Copied from transformers.<module>.<object>` check, for the copies a patch series can break.

Upstream keeps code duplicated on purpose and marks each duplicate with `# Copied from transformers.X.Y with
A->B, C->D`; its `utils/check_copies.py` (not shipped in the sdist) fails when a copy is not the source with the
replacements applied. This is the same check, restricted to what a series can affect: the copies in the files it
touches, and the copies of objects defined in the files it touches. Copies that opt out of part of the check
(`# Ignore copy`) or use upstream's case options (`all-casing`) are skipped.
"""

from __future__ import annotations

import re
from pathlib import Path


COPY_COMMENT = re.compile(r"^(?P<indent>\s*)# Copied from transformers\.(?P<target>[\w.]+)(?P<options>.*)$")


def _block(lines: list[str], start: int) -> list[str]:
    """The lines of the `def` or `class` statement at `start` (its decorators excluded) and of its body."""
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    # the signature may span several lines: the body starts after the line that ends with ':'
    while end < len(lines) and not lines[end - 1].rstrip().endswith(":"):
        end += 1
    while end < len(lines):
        line = lines[end]
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        end += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return [line[indent:] if line.strip() else "" for line in lines[start:end]]


def _find_object(lines: list[str], qualname: str) -> int | None:
    """Index of the `def`/`class` line of `qualname` (`name` or `Class.method`) in a module's lines."""
    start, indent = 0, ""
    for part in qualname.split("."):
        pattern = re.compile(rf"^{indent}(?:async\s+)?(?:def|class)\s+{re.escape(part)}\b")
        for i in range(start, len(lines)):
            if pattern.match(lines[i]):
                start = i
                break
        else:
            return None
        indent = re.match(r"\s*", lines[start]).group(0) + "    "
    return start


def _resolve(tree: Path, target: str) -> tuple[Path, str] | None:
    """`models.gpt2.modeling_gpt2.GPT2Attention.forward` -> (path of the module, `GPT2Attention.forward`)."""
    parts = target.split(".")
    for split in range(len(parts) - 1, 0, -1):
        module = tree / "src" / "transformers" / Path(*parts[:split]).with_suffix(".py")
        if module.is_file():
            return module, ".".join(parts[split:])
    return None


def _replacements(options: str) -> list[tuple[str, str]] | None:
    options = options.strip()
    if not options:
        return []
    if not options.startswith("with ") or "all-casing" in options:
        return None
    pairs = []
    for item in options[len("with ") :].split(","):
        old, sep, new = item.strip().partition("->")
        if not sep:
            return None
        pairs.append((old.strip(), new.strip()))
    return pairs


def check_copies(tree: Path, touched: list[str]) -> list[str]:
    """Problems with the copies in, or copied from, the `touched` files (paths relative to `tree`)."""
    touched_modules = {
        ".".join(Path(p).with_suffix("").parts[2:])
        for p in touched
        if p.startswith("src/transformers/") and p.endswith(".py")
    }
    files = set()
    for path in (tree / "src" / "transformers").rglob("*.py"):
        relative = str(path.relative_to(tree))
        text = path.read_text(encoding="utf-8")
        if relative in touched or any(f"# Copied from transformers.{m}." in text for m in touched_modules):
            files.add(path)

    problems = []
    for path in sorted(files):
        lines = path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            match = COPY_COMMENT.match(line)
            if not match:
                continue
            copied_module = ".".join(path.relative_to(tree / "src" / "transformers").with_suffix("").parts)
            source_module = match["target"].rsplit(".", 1)[0]
            in_scope = str(path.relative_to(tree)) in touched or any(
                match["target"].startswith(f"{m}.") for m in touched_modules
            )
            pairs = _replacements(match["options"])
            if not in_scope or pairs is None or copied_module == source_module:
                continue
            resolved = _resolve(tree, match["target"])
            source_lines = resolved[0].read_text(encoding="utf-8").splitlines() if resolved else []
            source_start = _find_object(source_lines, resolved[1]) if resolved else None
            if source_start is None:
                problems.append(f"{path.relative_to(tree)}:{i + 1}: cannot find transformers.{match['target']}")
                continue
            copy_start = i + 1
            while copy_start < len(lines) and lines[copy_start].lstrip().startswith("@"):
                copy_start += 1
            copy = _block(lines, copy_start)
            if any("# Ignore copy" in copied_line for copied_line in copy):
                continue
            source = "\n".join(_block(source_lines, source_start))
            for old, new in pairs:
                source = source.replace(old, new)
            if source.splitlines() != copy:
                problems.append(
                    f"{path.relative_to(tree)}:{i + 1}: not in sync with transformers.{match['target']}"
                    f"{match['options']} (apply the same change to the copy)"
                )
    return problems
