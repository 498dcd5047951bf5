"""Container images on the build host: variants, lock files, wheelhouse, build driver, base images, docs, the image lock."""
