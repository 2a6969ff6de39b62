"""Training callbacks: everything the loop does besides the step itself."""
