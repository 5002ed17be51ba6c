"""Install, validate and list the grpo Agent Skill."""
