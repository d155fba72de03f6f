"""The performance model: what one scheduler step costs, the serving simulation, and the benchmark's workloads."""
