# Placeholder: CUDA agreement tests are not wired in yet.
