"""Debug tasks for evaluating agents: build, verify, run, report, export."""
