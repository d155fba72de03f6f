"""What the agent can do: typed tools over one sandbox interface (launch, logs, diagnose, source, bench, git)."""
