"""jgrad.optim."""
