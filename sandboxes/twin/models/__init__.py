"""Model descriptions: what a model is made of, read from its real config.json, and the checkpoint it is stored as."""
