"""Training data: passing trajectories as SFT records, and the verifier as an RL reward."""
