#!/usr/bin/env bash
# Oracle fix: puts back the intended version of every file a bug was injected into.
set -eu
SOLUTION_DIR="$(cd "$(dirname "$0")" && pwd)"
WORKSPACE="${GRPO_TASK_WORKSPACE:-/app}"
cp -R "$SOLUTION_DIR/files/." "$WORKSPACE/"
