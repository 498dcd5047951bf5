"""Operations tooling: versioned runbooks, Kubernetes job manifests, image pins and the secret scan."""
