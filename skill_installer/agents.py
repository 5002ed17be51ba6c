"""Where each coding agent loads Agent Skills from, at project and at user scope.

Sources: the agents' own documentation and loaders. Each agent has one folder we install into (`install_root`) and the
list of folders it reads (`load_roots`); several agents read more than one folder, which is how the
same skill ends up loaded twice.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SCOPES = ("project", "user")
SKILL_NAME = "grpo"


def home() -> Path:
    return Path(os.environ.get("HOME") or Path.home())


def claude_user_root() -> Path:
    """`$CLAUDE_CONFIG_DIR/skills` replaces `~/.claude/skills` when the variable is set."""
    config = os.environ.get("CLAUDE_CONFIG_DIR")
    return (Path(config) if config else home() / ".claude") / "skills"


def codex_home_root() -> Path:
    """Codex's own (older) user folder: `$CODEX_HOME/skills`, default `~/.codex/skills`."""
    codex_home = os.environ.get("CODEX_HOME")
    return (Path(codex_home) if codex_home else home() / ".codex") / "skills"


def opencode_user_root() -> Path:
    """OpenCode's config folder follows XDG: `$XDG_CONFIG_HOME/opencode/skills`."""
    config = os.environ.get("XDG_CONFIG_HOME")
    return (Path(config) if config else home() / ".config") / "opencode" / "skills"


def shared_user_root() -> Path:
    """`~/.agents/skills`: the cross-agent folder read by Codex, Cursor, Gemini, Copilot, OpenCode."""
    return home() / ".agents" / "skills"


@dataclass(frozen=True)
class Agent:
    """One coding agent: the folders we install into and the folders it reads skills from.

    Project paths are relative to the project root; user paths are functions so that HOME and
    the agents' environment variables are read when the path is needed, not at import.
    """

    name: str
    title: str
    project_install: str
    user_install: Callable[[], Path]
    project_loads: tuple[str, ...]
    user_loads: tuple[Callable[[], Path], ...]

    def install_root(self, scope: str, project_dir: Path) -> Path:
        if scope == "project":
            return project_dir / self.project_install
        return self.user_install()

    def load_roots(self, scope: str, project_dir: Path) -> list[Path]:
        if scope == "project":
            return [project_dir / relative for relative in self.project_loads]
        return [root() for root in self.user_loads]


AGENTS: dict[str, Agent] = {
    agent.name: agent
    for agent in (
        # Claude Code does not read .agents/skills, so it needs its own copy.
        Agent(
            "claude-code",
            "Claude Code",
            ".claude/skills",
            claude_user_root,
            (".claude/skills",),
            (claude_user_root,),
        ),
        Agent(
            "codex",
            "OpenAI Codex",
            ".agents/skills",
            shared_user_root,
            (".agents/skills", ".codex/skills"),
            (shared_user_root, codex_home_root),
        ),
        Agent(
            "cursor",
            "Cursor",
            ".agents/skills",
            shared_user_root,
            (".agents/skills", ".cursor/skills", ".claude/skills", ".codex/skills"),
            (
                shared_user_root,
                lambda: home() / ".cursor" / "skills",
                lambda: home() / ".claude" / "skills",
                lambda: home() / ".codex" / "skills",
            ),
        ),
        Agent(
            "gemini",
            "Gemini CLI",
            ".agents/skills",
            shared_user_root,
            (".gemini/skills", ".agents/skills"),
            (lambda: home() / ".gemini" / "skills", shared_user_root),
        ),
        Agent(
            "copilot",
            "GitHub Copilot",
            ".agents/skills",
            shared_user_root,
            (".github/skills", ".claude/skills", ".agents/skills"),
            (
                lambda: home() / ".copilot" / "skills",
                shared_user_root,
                lambda: home() / ".claude" / "skills",
            ),
        ),
        Agent(
            "opencode",
            "OpenCode",
            ".agents/skills",
            shared_user_root,
            (".opencode/skills", ".claude/skills", ".agents/skills"),
            (opencode_user_root, lambda: home() / ".claude" / "skills", shared_user_root),
        ),
    )
}


def resolve_agents(names: list[str] | None) -> list[Agent]:
    """The named agents in table order, or every agent for None; unknown names raise ValueError."""
    if names is None:
        return list(AGENTS.values())
    unknown = sorted(set(names) - set(AGENTS))
    if unknown:
        raise ValueError(f"unknown agent(s) {', '.join(unknown)}; known: {', '.join(AGENTS)}")
    return [agent for agent in AGENTS.values() if agent.name in names]


def agents_loading(folder: Path, project_dir: Path) -> list[tuple[Agent, str]]:
    """(agent, scope) pairs whose skill roots contain `folder` (a `.../skills/grpo` path)."""
    root = _normalise(folder.parent)
    return [
        (agent, scope)
        for agent in AGENTS.values()
        for scope in SCOPES
        if any(_normalise(r) == root for r in agent.load_roots(scope, project_dir))
    ]


def all_load_roots(project_dir: Path) -> list[Path]:
    """Every folder any agent reads skills from, project scope first, without repeats."""
    seen: dict[Path, None] = {}
    for scope in SCOPES:
        for agent in AGENTS.values():
            for root in agent.load_roots(scope, project_dir):
                seen.setdefault(_normalise(root), None)
    return list(seen)


def _normalise(path: Path) -> Path:
    """Absolute path with symlinks in the parent folders resolved, so that aliases compare equal."""
    return Path(os.path.realpath(path))
