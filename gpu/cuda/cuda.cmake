# Placeholder: the CUDA device is not wired in yet.
