"""trm-stack: Tiny Recursive Models on ARC-AGI, from a bare GPU host to a Kaggle submission."""

__version__ = "0.1.0"
