"""jgrad.nn (filled by the nn/optim work)."""
