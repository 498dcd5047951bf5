"""Kaggle: package a checkpoint as an offline dataset (weights, config, wheelhouse) and run inference."""
