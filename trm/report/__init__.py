"""Comparison reports of training runs: `python -m trm report RUN_DIR… | --batch batch_results.json --out DIR`.

- `collect`: run directories and batch results -> `RunRecord`s (metrics curves, status, timing);
- `stats`: the Wilson score interval;
- `paper`: the TRM paper's published numbers per recipe, and which runs used a published recipe;
- `plots`: the figures (matplotlib, Agg), one small function each, returning the Figure;
- `markdown`: the tables and `report.md` (byte-identical for the same inputs);
- `build`: reads, plots and writes the report directory.
"""
