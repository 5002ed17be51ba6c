#!/usr/bin/env bash
# Hidden verifier: scores the agent's workspace; writes reward.json and reward.txt.
# Harbor runs it as /tests/test.sh with the workspace at /app; the local runner sets the variables.
set -u
TESTS_DIR="$(cd "$(dirname "$0")" && pwd)"
WORKSPACE="${GRPO_TASK_WORKSPACE:-/app}"
LOGS_DIR="${GRPO_TASK_LOGS:-/logs/verifier}"
PYTHON="${GRPO_TASK_PYTHON:-python3}"
exec "$PYTHON" "$TESTS_DIR/verify.py" "$WORKSPACE" "$LOGS_DIR"
