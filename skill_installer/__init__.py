"""Install, uninstall, validate and list the grpo Agent Skill (`grpo-check skill ...`).

The public API other products use: `install_skill(project_root)` puts the skill into a
project's agent skill folders (the task harness's `--skill` condition), and `skill_source()` is
the folder the skill ships in.
"""

from skill_installer.install import install_skill
from skill_installer.source import skill_source

__all__ = ["install_skill", "skill_source"]
