"""Evaluation: agents x tasks x k trials -> verdicts, metrics (Pass@1, pass@k, pass^k, RS(c)) and an HTML report."""
