"""Weight loading: the workspace's own model code run with the engine stubbed, and the checkpoint checked against it."""
