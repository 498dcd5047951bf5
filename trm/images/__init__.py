"""Container images: variants, hash-locked requirements, the build/push driver, the entrypoint."""
