"""The MI355X digital twin: a simulated SGLang ROCm engine on one 8-GPU node."""
